// relu, leaky_relu and cat: gradchecks (float64), PyTorch golden values (tests/golden/activation.json
// and shape.json, from `/usr/bin/python3 tools/golden/make_golden.py`), float16 and autocast dtypes,
// and the errors of ops/activation/activation.h.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/activation/activation.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
Tensor leaf(Tensor t) { return t.set_requires_grad(true); }
}  // namespace

TEST_CASE("ops: relu/leaky_relu float64 gradcheck (2, 3, 4, 5)") {
  Generator g(21);
  Tensor x = leaf(Tensor::randn({2, 3, 4, 5}, g, kFloat64));
  SUBCASE("relu") {
    auto r = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::relu(in[0]); }, {x});
    CHECK_MESSAGE(r.ok, r.report);
  }
  for (double slope : {0.01, 0.2}) {
    SUBCASE(("leaky_relu " + std::to_string(slope)).c_str()) {
      auto r = autograd::gradcheck([slope](const std::vector<Tensor>& in) { return ops::leaky_relu(in[0], slope); },
                                   {x});
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: relu/leaky_relu float32 (2, 3, 3, 4, 5) match PyTorch: y, dx") {
  for (const char* name : {"relu", "leaky_relu_0.01", "leaky_relu_0.2"}) {
    SUBCASE(name) {
      const GoldenCase c = load_golden("activation.json").at(name);
      Tensor x = leaf(c.input("x"));
      Tensor y = c.op() == "relu" ? ops::relu(x) : ops::leaky_relu(x, c.param<double>("negative_slope"));
      y.backward(c.input("gy"));
      check_close(y, c.output("y"), tolerance_for(kFloat32), c.where() + " y");
      check_close(x.grad(), c.grad("x"), tolerance_for(kFloat32), c.where() + " dx");
    }
  }
}

TEST_CASE("ops: relu/leaky_relu float16 (2, 3, 3, 4, 5) stay float16, also under autocast") {
  const GoldenCase c = load_golden("activation.json").at("leaky_relu_0.2");
  Tensor x16 = c.input("x").cast_copy(kFloat16);
  amp::AutocastGuard ac;  // neither is on an autocast list: they run in the input's dtype
  Tensor xh = leaf(x16.clone());
  Tensor y = ops::leaky_relu(xh, 0.2);
  CHECK(y.dtype() == kFloat16);
  check_close(y, c.output("y"), tolerance_for(kFloat16), "leaky_relu fp16 y");
  y.backward(c.input("gy"));
  CHECK(xh.grad().dtype() == kFloat16);
  check_close(xh.grad(), c.grad("x"), tolerance_for(kFloat16), "leaky_relu fp16 dx");
  Tensor r = ops::relu(x16);
  CHECK(r.dtype() == kFloat16);
  const std::vector<float> xv = x16.to_float_vector(), rv = r.to_float_vector();
  for (size_t i = 0; i < xv.size(); ++i) CHECK(rv[i] == std::max(xv[i], 0.0f));  // exact in half
}

TEST_CASE("ops: relu keeps NaN and has gradient 0 at 0 (float32, [4])") {
  Tensor x = leaf(Tensor::from_vector(std::vector<float>{-1.0f, 0.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()},
                                      {4}));
  Tensor y = ops::relu(x);
  CHECK(y.item_at(0) == 0.0);
  CHECK(y.item_at(1) == 0.0);
  CHECK(y.item_at(2) == 2.0);
  CHECK(std::isnan(y.item_at(3)));
  y.backward(Tensor::ones({4}));
  CHECK(x.grad().to_float_vector()[0] == 0.0f);
  CHECK(x.grad().to_float_vector()[1] == 0.0f);
  CHECK(x.grad().to_float_vector()[2] == 1.0f);
}

TEST_CASE("ops: cat float64 gradcheck, dims 0, 1 and -1") {
  Generator g(22);
  struct Grid { int64_t dim; Shape a, b, c; };
  for (const Grid& t : {Grid{0, {1, 2, 3}, {2, 2, 3}, {3, 2, 3}}, Grid{1, {2, 1, 2, 3}, {2, 3, 2, 3}, {2, 2, 2, 3}},
                        Grid{-1, {2, 3, 1}, {2, 3, 4}, {2, 3, 2}}}) {
    SUBCASE(("dim " + std::to_string(t.dim)).c_str()) {
      Tensor a = leaf(Tensor::randn(t.a, g, kFloat64)), b = leaf(Tensor::randn(t.b, g, kFloat64));
      Tensor c = Tensor::randn(t.c, g, kFloat64);  // no grad: its slice of dy is dropped
      auto r = autograd::gradcheck(
          [&](const std::vector<Tensor>& in) { return ops::cat({in[0], in[1], in[2]}, t.dim); }, {a, b, c});
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: cat float32 (2, 3+5, 2, 3, 4) dim 1 and (1+2, 2, 2, 3, 4) dim 0 match PyTorch: y, da, db") {
  for (const char* name : {"cat_dim1", "cat_dim0"}) {
    SUBCASE(name) {
      const GoldenCase c = load_golden("shape.json").at(name);
      Tensor a = leaf(c.input("a")), b = leaf(c.input("b"));
      Tensor y = ops::cat({a, b}, c.param<int64_t>("dim"));
      y.backward(c.input("gy"));
      check_close(y, c.output("y"), 0, 0, c.where() + " y");  // a copy: exact
      check_close(a.grad(), c.grad("a"), 0, 0, c.where() + " da");
      check_close(b.grad(), c.grad("b"), 0, 0, c.where() + " db");
    }
  }
}

TEST_CASE("ops: cat float16 + float32 (2, 2, 3) dim 1 promotes to float32; grads come back in each dtype") {
  Generator g(23);
  Tensor a = leaf(Tensor::randn({2, 2, 3}, g, kFloat16)), b = leaf(Tensor::randn({2, 1, 3}, g, kFloat32));
  for (bool autocast : {false, true}) {
    SUBCASE(autocast ? "autocast" : "no autocast") {
      amp::AutocastGuard ac(autocast);
      a.set_grad(Tensor());
      b.set_grad(Tensor());
      Tensor y = ops::cat({a, b}, 1);
      CHECK(y.dtype() == kFloat32);
      CHECK(y.shape() == Shape{2, 3, 3});
      CHECK(y.item_at(0) == a.item_at(0));
      CHECK(y.item_at(6) == b.item_at(0));
      Tensor gy = Tensor::randn({2, 3, 3}, g);
      y.backward(gy);
      CHECK(a.grad().dtype() == kFloat16);
      CHECK(b.grad().dtype() == kFloat32);
      CHECK(b.grad().item_at(0) == gy.item_at(6));
    }
  }
  Tensor h = ops::cat({Tensor::ones({2}, kFloat16), Tensor::zeros({1}, kFloat16)}, 0);
  CHECK(h.dtype() == kFloat16);
  Tensor l = ops::cat({Tensor::from_labels({1, 2}, {2}), Tensor::from_labels({3}, {1})}, 0);
  CHECK(l.dtype() == kInt64);
  CHECK(l.to_double_vector() == std::vector<double>{1, 2, 3});
}

TEST_CASE("ops: cat bad inputs name the op, the shapes and the dim") {
  CHECK_THROWS_WITH_AS(ops::cat({}, 0), doctest::Contains("cat: expected a non-empty list of tensors"), Error);
  CHECK_THROWS_WITH_AS(ops::cat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3, 1})}, 1),
                       doctest::Contains("cat: tensor 1 has shape [2, 3, 1] but tensor 0 has shape [2, 3]"), Error);
  CHECK_THROWS_WITH_AS(ops::cat({Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 5, 3})}, 1),
                       doctest::Contains("cat: sizes of tensors must match except in dimension 1: tensor 0 has shape "
                                         "[2, 3, 4], tensor 1 has shape [2, 5, 3] (dimension 2)"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::cat({Tensor::zeros({2, 3})}, 2),
                       doctest::Contains("cat: dim 2 out of range for tensors of shape [2, 3]"), Error);
  CHECK_THROWS_WITH_AS(ops::cat({Tensor::zeros({2, 3})}, -3), doctest::Contains("cat: dim -3 out of range"), Error);
  CHECK_THROWS_WITH_AS(ops::cat({Tensor::scalar(1.0)}, 0), doctest::Contains("cat: zero-dimensional tensor"), Error);
  CHECK_THROWS_WITH_AS(ops::cat({Tensor::zeros({2}), Tensor::from_labels({1}, {1})}, 0),
                       doctest::Contains("cat: tensor 1 is int64 but tensor 0 is float32"), Error);
  CHECK_THROWS_WITH_AS(ops::cat({Tensor::zeros({2}), Tensor()}, 0),
                       doctest::Contains("cat: tensor 1 is an undefined tensor"), Error);
  CHECK_THROWS_WITH_AS(ops::relu(Tensor::from_labels({1}, {1})),
                       doctest::Contains("relu: input must be a floating-point tensor, got int64"), Error);
}
