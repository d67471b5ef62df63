// matmul and linear (ops/matmul/): float64 gradchecks, PyTorch golden values (tests/golden/matmul.json,
// from `/usr/bin/python3 tools/golden/make_golden.py`), float16 / autocast dtypes, and the errors of
// ops/matmul/matmul.h.
#include <doctest/doctest.h>

#include "tests/check_error.h"

#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/matmul/matmul.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

Tensor half_exact(const Tensor& t) { return t.cast_copy(kFloat16).cast_copy(kFloat32); }

}  // namespace

TEST_CASE("ops: matmul float64 row-major gradcheck a, b") {
  for (const Shape& mkn : {Shape{3, 4, 5}, Shape{1, 7, 2}, Shape{6, 1, 3}}) {
    SUBCASE(("M K N = " + shape_str(mkn)).c_str()) {
      Generator g(31);
      Tensor a = leaf(Tensor::randn({mkn[0], mkn[1]}, g, kFloat64));
      Tensor b = leaf(Tensor::randn({mkn[1], mkn[2]}, g, kFloat64));
      auto r = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); }, {a, b});
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: linear float64 row-major gradcheck x, weight, bias") {
  for (bool bias : {true, false}) {
    SUBCASE(bias ? "x [4, 5], w [3, 5], b [3]" : "x [4, 5], w [3, 5], no bias") {
      Generator g(32);
      std::vector<Tensor> in{leaf(Tensor::randn({4, 5}, g, kFloat64)), leaf(Tensor::randn({3, 5}, g, kFloat64))};
      if (bias) in.push_back(leaf(Tensor::randn({3}, g, kFloat64)));
      auto r = autograd::gradcheck(
          [](const std::vector<Tensor>& t) { return ops::linear(t[0], t[1], t.size() > 2 ? t[2] : Tensor()); }, in);
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: matmul and linear float32/float64 match PyTorch golden values (matmul.json)") {
  const GoldenFile file = load_golden("matmul.json");
  for (const std::string& name : file.case_names()) {
    SUBCASE(name.c_str()) {
      const GoldenCase c = file.at(name);
      const Dtype dt = golden_dtype(c.params().at("dtype").get<std::string>());
      std::vector<std::string> names;
      Tensor y;
      std::vector<Tensor> leaves;
      if (c.op() == "matmul") {
        names = {"a", "b"};
        for (const auto& n : names) leaves.push_back(leaf(c.input(n, dt)));
        y = ops::matmul(leaves[0], leaves[1]);
      } else {
        REQUIRE(c.op() == "linear");
        names = {"x", "weight"};
        if (c.has_input("bias")) names.push_back("bias");
        for (const auto& n : names) leaves.push_back(leaf(c.input(n, dt)));
        y = ops::linear(leaves[0], leaves[1], leaves.size() > 2 ? leaves[2] : Tensor());
      }
      CHECK(y.dtype() == dt);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y", dt), tolerance_for(dt), c.where() + " y");
      for (size_t i = 0; i < names.size(); ++i)
        check_close(leaves[i].grad(), c.grad(names[i], dt), tolerance_for(dt), c.where() + " d" + names[i]);
    }
  }
}

TEST_CASE("ops: matmul and linear float16 and autocast row-major [9, 33] x [33, 5] vs float32") {
  Generator g(33);
  const Tensor a32 = half_exact(Tensor::randn({9, 33}, g)), w32 = half_exact(Tensor::randn({5, 33}, g));
  const Tensor b32 = half_exact(Tensor::randn({5}, g)), gy = half_exact(Tensor::randn({9, 5}, g));
  Tensor xr = leaf(a32.clone()), wr = leaf(w32.clone()), br = leaf(b32.clone());
  Tensor yr = ops::linear(xr, wr, br);
  yr.backward(gy);
  SUBCASE("linear, float16 tensors") {
    Tensor x = leaf(a32.cast_copy(kFloat16)), w = leaf(w32.cast_copy(kFloat16)), b = leaf(b32.cast_copy(kFloat16));
    Tensor y = ops::linear(x, w, b);
    CHECK(y.dtype() == kFloat16);
    y.backward(gy.cast_copy(kFloat16));
    check_close(y, yr, tolerance_for(kFloat16), "y");
    check_close(x.grad(), xr.grad(), tolerance_for(kFloat16), "dx");
    check_close(w.grad(), wr.grad(), tolerance_for(kFloat16), "dw");
    check_close(b.grad(), br.grad(), tolerance_for(kFloat16), "db");
  }
  SUBCASE("linear, float32 leaves under AutocastGuard") {
    Tensor x = leaf(a32.clone()), w = leaf(w32.clone()), b = leaf(b32.clone());
    Tensor y;
    {
      amp::AutocastGuard ac;
      y = ops::linear(x, w, b);
    }
    CHECK(y.dtype() == kFloat16);
    y.backward(gy.cast_copy(kFloat16));
    CHECK(w.grad().dtype() == kFloat32);
    CHECK(b.grad().dtype() == kFloat32);
    check_close(y, yr, tolerance_for(kFloat16), "y");
    check_close(w.grad(), wr.grad(), tolerance_for(kFloat16), "dw");
  }
  SUBCASE("matmul, float32 leaves under AutocastGuard") {
    Tensor a = leaf(a32.clone()), b = leaf(half_exact(Tensor::randn({33, 4}, g)));
    Tensor ar = leaf(a32.clone()), brr = leaf(b.detach().clone());
    Tensor y;
    {
      amp::AutocastGuard ac;
      y = ops::matmul(a, b);
    }
    Tensor yr2 = ops::matmul(ar, brr);
    CHECK(y.dtype() == kFloat16);
    const Tensor gy2 = half_exact(Tensor::randn({9, 4}, g));
    y.backward(gy2.cast_copy(kFloat16));
    yr2.backward(gy2);
    CHECK(a.grad().dtype() == kFloat32);
    check_close(y, yr2, tolerance_for(kFloat16), "y");
    check_close(a.grad(), ar.grad(), tolerance_for(kFloat16), "da");
    check_close(b.grad(), brr.grad(), tolerance_for(kFloat16), "db");
  }
}

TEST_CASE("ops: matmul and linear float32 row-major multi-threaded (>= 1M multiply-adds) vs float64") {
  // Large enough to be split over the threads: by rows of the product (M >= N) or by columns.
  for (const Shape& mkn : {Shape{200, 100, 80}, Shape{30, 200, 300}}) {
    SUBCASE(("M K N = " + shape_str(mkn)).c_str()) {
      Generator g(34);
      Tensor a = leaf(Tensor::randn({mkn[0], mkn[1]}, g)), b = leaf(Tensor::randn({mkn[1], mkn[2]}, g));
      Tensor a64 = leaf(a.detach().cast_copy(kFloat64)), b64 = leaf(b.detach().cast_copy(kFloat64));
      Tensor y = ops::matmul(a, b), y64 = ops::matmul(a64, b64);
      const Tensor gy = Tensor::randn(y.shape(), g);
      y.backward(gy);
      y64.backward(gy.cast_copy(kFloat64));
      const Tolerance tol{1e-4, 1e-4};  // float32 sums of 100-300 products
      check_close(y, y64, tol, "y");
      check_close(a.grad(), a64.grad(), tol, "da");
      check_close(b.grad(), b64.grad(), tol, "db");
    }
  }
}

TEST_CASE("ops: matmul and linear errors name the op and the shapes") {
  SUBCASE("operands not 2-D") {
    check_error([] { ops::matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({4, 2})); }, {"matmul", "2-D", "[2, 3, 4]"});
    check_error([] { ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3})); }, {"matmul", "2-D", "[3]"});
    check_error([] { ops::linear(Tensor::zeros({5}), Tensor::zeros({3, 5})); }, {"linear", "2-D", "[5]"});
    check_error([] { ops::linear(Tensor::zeros({2, 5}), Tensor::zeros({3, 5, 1})); }, {"linear", "2-D", "[3, 5, 1]"});
  }
  SUBCASE("inner extents differ") {
    check_error([] { ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 2})); }, {"matmul", "[2, 3]", "[4, 2]"});
    check_error([] { ops::linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 5})); }, {"linear", "[2, 4]", "[3, 5]"});
  }
  SUBCASE("bias of the wrong length") {
    check_error([] { ops::linear(Tensor::zeros({2, 5}), Tensor::zeros({3, 5}), Tensor::zeros({4})); },
                {"linear", "bias", "[4]", "[3, 5]"});
  }
}
