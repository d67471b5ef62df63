// nn::Linear (parameters, PyTorch's init bounds, (*, in) inputs against the PyTorch golden case in
// tests/golden/layers.json, autocast FP16) and nn::Flatten (options, as ops::flatten).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "autocast/autocast.h"
#include "core/error.h"
#include "nn/linear.h"
#include "tests/check_error.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_double_vector()) m = std::max(m, std::abs(v));
  return m;
}
}  // namespace

TEST_CASE("nn: Linear float32 weight (out, in) and bias (out) ~ U(+-1/sqrt(in)) as PyTorch; bias(false)") {
  Generator g(3);
  nn::Linear lin(nn::LinearOptions(64, 32), g);
  CHECK(lin.weight.shape() == Shape{32, 64});
  CHECK(lin.bias.shape() == Shape{32});
  const double bound = 1.0 / std::sqrt(64.0);
  CHECK(max_abs(lin.weight) <= bound);
  CHECK(max_abs(lin.weight) > 0.9 * bound);  // 2048 draws fill the interval
  CHECK(max_abs(lin.bias) <= bound);
  CHECK(lin.named_parameters().size() == 2);
  nn::Linear nobias(nn::LinearOptions(4, 2).bias(false), g);
  CHECK_FALSE(nobias.bias.defined());
  CHECK(nobias.named_parameters().size() == 1);
  CHECK(lin.extra_repr() == "in_features=64, out_features=32, bias=true");
  Generator g1(8), g2(8);
  CHECK(nn::Linear(nn::LinearOptions(5, 3), g1).weight.to_float_vector() ==
        nn::Linear(nn::LinearOptions(5, 3), g2).weight.to_float_vector());
}

TEST_CASE("nn: Linear float32/float64 (2, 3, 4) -> (2, 3, 5) matches PyTorch: y, dx, dweight, dbias") {
  for (const bool f64 : {false, true}) {
    SUBCASE(f64 ? "float64" : "float32") {
      const GoldenCase c = load_golden("layers.json").at(f64 ? "linear_3d_f64" : "linear_3d");
      const Dtype dt = f64 ? kFloat64 : kFloat32;
      nn::Linear lin(nn::LinearOptions(4, 5));
      lin.weight.copy_from(c.input("weight", kFloat32));
      lin.bias.copy_from(c.input("bias", kFloat32));
      if (f64) lin.to(kFloat64);
      Tensor x = c.input("x", dt).set_requires_grad(true);
      Tensor y = lin(x);
      CHECK(y.shape() == Shape{2, 3, 5});
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
      check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
      check_close(lin.weight.grad(), c.grad("weight"), tolerance_for(dt), c.where() + " dweight");
      check_close(lin.bias.grad(), c.grad("bias"), tolerance_for(dt), c.where() + " dbias");
    }
  }
}

TEST_CASE("nn: Linear of a 1-D input (in) gives (out); under autocast the output is float16 (FP16 list)") {
  nn::Linear lin(nn::LinearOptions(4, 3));
  const Tensor x = Tensor::ones({4});
  CHECK(lin(x).shape() == Shape{3});
  amp::AutocastGuard on;
#ifndef HALFGRAD_FORCE_FP32
  CHECK(lin(Tensor::ones({2, 7, 4})).dtype() == kFloat16);
#endif
}

TEST_CASE("nn: Linear errors: in_features < 1, input whose last dim is not in_features, 0-d input") {
  check_error([] { nn::Linear(nn::LinearOptions(0, 3)); }, {"Linear", "in_features"});
  nn::Linear lin(nn::LinearOptions(4, 3));
  check_error([&] { lin(Tensor::zeros({2, 5})); }, {"Linear", "[2, 5]", "in_features = 4"});
  check_error([&] { lin(Tensor::scalar(1.0)); }, {"Linear", "in_features = 4"});
}

TEST_CASE("nn: Flatten defaults to start_dim 1, end_dim -1; options as torch.nn.Flatten") {
  const Tensor x = Tensor::zeros({2, 3, 4, 5});
  CHECK(nn::Flatten()(x).shape() == Shape{2, 60});
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(0).end_dim(1))(x).shape() == Shape{6, 4, 5});
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(-2))(x).shape() == Shape{2, 3, 20});
  CHECK(nn::Flatten().extra_repr() == "start_dim=1, end_dim=-1");
  CHECK(nn::Flatten().named_parameters().empty());
}
