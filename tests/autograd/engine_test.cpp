// The tape: accumulation, a tensor used twice, NoGradGuard, detach, freed vs retained graphs.
#include <doctest/doctest.h>

#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"

using namespace halfgrad;

TEST_CASE("autograd: gradients accumulate across backward calls") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
  ops::sum(x * 2.0).backward();
  CHECK(x.grad().to_float_vector() == std::vector<float>{2, 2, 2});
  ops::sum(x * 3.0).backward();
  CHECK(x.grad().to_float_vector() == std::vector<float>{5, 5, 5});
}

TEST_CASE("autograd: a tensor used twice receives both contributions") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
  Tensor y = x * x + x;  // dy/dx = 2x + 1
  ops::sum(y).backward();
  CHECK(x.grad().to_float_vector() == std::vector<float>{3, 5, 7});
}

TEST_CASE("autograd: diamond graph (shared intermediate)") {
  Tensor x = Tensor::from_vector(std::vector<float>{2}, {1}).set_requires_grad(true);
  Tensor a = x * 3.0;
  Tensor y = a * a;  // 9 x^2 -> 18 x
  y.backward(Tensor::ones({1}));
  CHECK(x.grad().item() == doctest::Approx(36));
}

TEST_CASE("autograd: backward with an explicit output gradient") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor y = x * 4.0;
  y.backward(Tensor::from_vector(std::vector<float>{1, 10}, {2}));
  CHECK(x.grad().to_float_vector() == std::vector<float>{4, 40});
  CHECK_THROWS_WITH_AS((x * 4.0).backward(), doctest::Contains("shape [2]"), Error);
  CHECK_THROWS_WITH_AS((x * 4.0).backward(Tensor::ones({3})), doctest::Contains("[3]"), Error);
}

TEST_CASE("autograd: NoGradGuard records nothing; detach cuts history") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
  }
  CHECK(autograd::grad_mode_enabled());
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK_THROWS_WITH_AS(ops::sum(d).backward(), doctest::Contains("does not require grad"), Error);
}

TEST_CASE("autograd: second backward through a freed graph is an error; retain_graph allows it") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor y = ops::sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().to_float_vector() == std::vector<float>{4, 8});
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("second time"), Error);
}

TEST_CASE("autograd: set_requires_grad only on leaves") {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y = x * 2.0;
  CHECK_THROWS_WITH_AS(y.set_requires_grad(false), doctest::Contains("leaf"), Error);
}

TEST_CASE("autograd: float16 leaf gets a float16 grad; cast backward returns the source dtype") {
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor h = w.to(kFloat16);
  CHECK(h.dtype() == kFloat16);
  ops::sum(h * 3.0).backward();
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(w.grad().to_float_vector() == std::vector<float>{3, 3});
}

TEST_CASE("ops: gradcheck float64 elementwise with broadcasting, scalars, exp/log/pow") {
  Generator g(3);
  Tensor a = Tensor::randn({2, 3, 4}, g, kFloat64).set_requires_grad(true);
  Tensor b = Tensor::uniform({1, 3, 1}, 0.5, 2.0, g, kFloat64).set_requires_grad(true);
  Tensor s = Tensor::uniform({}, 0.5, 2.0, g, kFloat64).set_requires_grad(true);
  SUBCASE("add sub mul div") {
    auto r = autograd::gradcheck([](const std::vector<Tensor>& x) { return (x[0] + x[1]) * x[0] - x[0] / x[1] * x[2]; },
                                 {a, b, s});
    CHECK_MESSAGE(r.ok, r.report);
  }
  SUBCASE("affine, exp, log, pow") {
    auto r = autograd::gradcheck(
        [](const std::vector<Tensor>& x) { return ops::exp(x[0] * 0.5) + ops::log(x[1]) * 2.0 - ops::pow(x[1], 3.0) + (1.0 - x[0]); },
        {a, b});
    CHECK_MESSAGE(r.ok, r.report);
  }
  SUBCASE("sum and mean over dims, keepdim") {
    auto r = autograd::gradcheck(
        [](const std::vector<Tensor>& x) {
          return ops::sum(x[0], {0, 2}) * ops::mean(x[0]);
        },
        {a});
    CHECK_MESSAGE(r.ok, r.report);
    auto r2 = autograd::gradcheck([](const std::vector<Tensor>& x) { return ops::mean(x[0], {1}, true); }, {a});
    CHECK_MESSAGE(r2.ok, r2.report);
    auto r3 = autograd::gradcheck([](const std::vector<Tensor>& x) { return ops::reshape(x[0], {4, 6}); }, {a});
    CHECK_MESSAGE(r3.ok, r3.report);
  }
}

TEST_CASE("ops: broadcasting errors name the op and both shapes") {
  CHECK_THROWS_WITH_AS(Tensor::zeros({2, 3}) + Tensor::zeros({4}), doctest::Contains("add: shapes [2, 3] and [4]"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::sum(Tensor::zeros({2, 3}), {2}), doctest::Contains("sum: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(ops::one_hot(Tensor::from_labels({0, 3}, {1, 2}), 3), doctest::Contains("label 3"), Error);
}

TEST_CASE("ops: sum of float16 accumulates in FP32 or better") {
  // 4096 ones in half: a half accumulator would stop at 2048 (2048 + 1 rounds to 2048).
  Tensor x = Tensor::ones({4096}, kFloat16);
  CHECK(ops::sum(x).item() == 4096.0);
  CHECK(ops::sum(x).dtype() == kFloat16);
  CHECK(ops::argmax(Tensor::from_vector(std::vector<float>{1, 5, 2, 7, 0, 1}, {2, 3}), 1).data<int64_t>()[1] == 0);
}
