// permute, transpose and view (ops/shape/shape.h) and sum / mean over negative dims with keepdim
// (ops/reduce/reduce.h): PyTorch golden values (tests/golden/shape_ops.json and shape.json's
// permute_0_4_1_2_3, from `/usr/bin/python3 tools/golden/make_golden.py shape_ops`), float64
// gradchecks, view's -1, dtypes kept (int64 too), and the errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "tests/check_error.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
Tensor leaf(Tensor t) { return t.set_requires_grad(true); }
}  // namespace

TEST_CASE("ops: permute / transpose / view float32 match PyTorch: y, dx exact") {
  for (const char* name : {"permute_neg", "permute_3d", "transpose_1_neg1", "view_infer", "permute_0_4_1_2_3"}) {
    SUBCASE(name) {
      const bool in_shape_json = std::string(name) == "permute_0_4_1_2_3";
      const GoldenCase c = load_golden(in_shape_json ? "shape.json" : "shape_ops.json").at(name);
      Tensor x = leaf(c.input("x"));
      Tensor y;
      if (c.op() == "permute") y = ops::permute(x, c.param<std::vector<int64_t>>("dims"));
      else if (c.op() == "transpose") y = ops::transpose(x, c.param<int64_t>("d0"), c.param<int64_t>("d1"));
      else y = ops::view(x, c.param<Shape>("shape"));
      y.backward(c.input("gy"));
      check_close(y, c.output("y"), 0, 0, c.where() + " y");  // moves values: exact
      check_close(x.grad(), c.grad("x"), 0, 0, c.where() + " dx");
    }
  }
}

TEST_CASE("ops: permute / transpose float64 gradcheck (2, 3, 4) and (1, 2, 3, 2, 2)") {
  Generator g(5);
  Tensor a = leaf(Tensor::randn({2, 3, 4}, g, kFloat64));
  Tensor b = leaf(Tensor::randn({1, 2, 3, 2, 2}, g, kFloat64));
  auto r1 = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::permute(in[0], {1, 2, 0}); }, {a});
  CHECK_MESSAGE(r1.ok, r1.report);
  auto r2 = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::transpose(in[0], 0, -2); }, {b});
  CHECK_MESSAGE(r2.ok, r2.report);
  auto r3 = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::view(in[0], {-1, 4}); }, {b});
  CHECK_MESSAGE(r3.ok, r3.report);
}

TEST_CASE("ops: permute keeps the dtype (float16, int64) and copies; view shares the buffer") {
  Tensor l = Tensor::from_labels({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor lt = ops::transpose(l, 0, 1);
  CHECK(lt.dtype() == kInt64);
  CHECK(lt.shape() == Shape{3, 2});
  CHECK(lt.to_double_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(lt.raw_data() != l.raw_data());
  Tensor h = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {1, 2, 3}, kFloat16);
  Tensor hp = ops::permute(h, {2, 0, 1});
  CHECK(hp.dtype() == kFloat16);
  CHECK(hp.to_float_vector() == std::vector<float>{1, 4, 2, 5, 3, 6});
  Tensor v = ops::view(h, {-1});
  CHECK(v.shape() == Shape{6});
  CHECK(v.raw_data() == h.raw_data());
  CHECK(ops::reshape(h, {3, -1}).shape() == Shape{3, 2});  // reshape infers -1 too
}

TEST_CASE("ops: permute / transpose / view errors name the op, the dims and the shape") {
  const Tensor x = Tensor::zeros({2, 3, 4});
  check_error([&] { ops::permute(x, {0, 1}); }, {"permute", "[0, 1]", "[2, 3, 4]"});
  check_error([&] { ops::permute(x, {0, 1, 1}); }, {"permute", "repeat dim 1"});
  check_error([&] { ops::permute(x, {0, 1, 3}); }, {"permute", "dim 3", "out of range [-3, 3)"});
  check_error([&] { ops::transpose(x, 0, -4); }, {"transpose", "dim -4", "out of range"});
  check_error([&] { ops::view(x, {5, -1}); }, {"view", "[2, 3, 4]", "[5, -1]"});
  check_error([&] { ops::view(x, {-1, -1}); }, {"view", "only one dimension can be inferred"});
  check_error([&] { ops::view(x, {2, 3, 5}); }, {"view", "24 elements", "[2, 3, 5]"});
}

TEST_CASE("ops: sum / mean over negative dims, with and without keepdim, match PyTorch (shape_ops.json)") {
  const GoldenFile file = load_golden("shape_ops.json");
  int checked = 0;
  for (const std::string& name : file.case_names()) {
    const GoldenCase c = file.at(name);
    if (c.op() != "sum" && c.op() != "mean") continue;
    ++checked;
    SUBCASE(name.c_str()) {
      const Dtype dt = golden_dtype(c.params().at("dtype").get<std::string>());
      Tensor x = leaf(c.input("x", dt));
      const auto dims = c.param<std::vector<int64_t>>("dims");
      const bool keepdim = c.param<bool>("keepdim");
      Tensor y = c.op() == "sum" ? ops::sum(x, dims, keepdim) : ops::mean(x, dims, keepdim);
      CHECK(y.shape() == c.output("y").shape());
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
      check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
    }
  }
  CHECK(checked == 10);  // 4 dim sets x {sum, mean}, and the float64 twins of one
}
