// nn layers: parameter shapes, PyTorch's init distributions, BatchNorm3d train/eval behaviour.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "nn/nn.h"
#include "ops/ops.h"

using namespace halfgrad;

namespace {
double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_double_vector()) m = std::max(m, std::abs(v));
  return m;
}
}  // namespace

TEST_CASE("nn: init fan_in/fan_out follow torch _calculate_fan_in_and_fan_out") {
  CHECK(nn::init::calculate_fan_in_and_fan_out({16, 8, 3, 3, 3}) == std::pair<int64_t, int64_t>{8 * 27, 16 * 27});
  CHECK(nn::init::calculate_fan_in_and_fan_out({5, 7}) == std::pair<int64_t, int64_t>{7, 5});
  CHECK_THROWS_AS(nn::init::calculate_fan_in_and_fan_out({5}), Error);
}

TEST_CASE("nn: Conv3d float32 weight (Cout, Cin, k^3) and bias ~ U(+-1/sqrt(Cin k^3)) as PyTorch") {
  Generator gen(1);
  nn::Conv3d conv(nn::Conv3dOptions(4, 8, 3).stride(2).padding(1), gen);
  CHECK(conv.weight.shape() == Shape{8, 4, 3, 3, 3});
  CHECK(conv.weight.dtype() == kFloat32);
  CHECK(conv.bias.shape() == Shape{8});
  const double bound = 1.0 / std::sqrt(4.0 * 27);
  CHECK(max_abs(conv.weight) <= bound);
  CHECK(max_abs(conv.weight) > 0.9 * bound);  // 864 draws fill the interval
  CHECK(max_abs(conv.bias) <= bound);
  // Same generator seed, same weights; no bias registered when bias(false).
  Generator gen2(1);
  nn::Conv3d again(nn::Conv3dOptions(4, 8, 3), gen2);
  CHECK(again.weight.to_float_vector() == conv.weight.to_float_vector());
  nn::Conv3d nobias(nn::Conv3dOptions(4, 8, 3).bias(false), gen);
  CHECK_FALSE(nobias.bias.defined());
  CHECK(nobias.named_parameters().size() == 1);
  CHECK_THROWS_AS(nn::Conv3d(nn::Conv3dOptions(0, 8, 3)), Error);
  CHECK_THROWS_AS(nn::Conv3d(nn::Conv3dOptions(1, 8, 3).stride(0)), Error);
}

TEST_CASE("nn: Conv3d float32 forward (1,2,6,6,6) k3 s2 p1 gives (1,3,3,3,3)") {
  nn::Conv3d conv(nn::Conv3dOptions(2, 3, 3).stride(2).padding(1));
  Generator gen(2);
  CHECK(conv.forward(Tensor::randn({1, 2, 6, 6, 6}, gen)).shape() == Shape{1, 3, 3, 3, 3});
}

TEST_CASE("nn: ConvTranspose3d float32 weight (Cin, Cout, k^3), init bound uses fan_in = Cout k^3") {
  Generator gen(3);
  nn::ConvTranspose3d up(nn::ConvTranspose3dOptions(16, 2, 2).stride(2), gen);
  CHECK(up.weight.shape() == Shape{16, 2, 2, 2, 2});
  CHECK(up.bias.shape() == Shape{2});
  const double bound = 1.0 / std::sqrt(2.0 * 8);  // PyTorch: weight.size(1) * k^3, not Cin * k^3
  CHECK(max_abs(up.weight) <= bound);
  CHECK(max_abs(up.weight) > 0.9 * bound);
  CHECK(max_abs(up.bias) <= bound);
  CHECK(up.forward(Tensor::randn({1, 16, 3, 3, 3}, gen)).shape() == Shape{1, 2, 6, 6, 6});
}

TEST_CASE("nn: BatchNorm3d float32 defaults, training batch stats with running update, eval running stats") {
  nn::BatchNorm3d bn(nn::BatchNorm3dOptions(2));
  CHECK(bn.weight.to_float_vector() == std::vector<float>{1, 1});
  CHECK(bn.bias.to_float_vector() == std::vector<float>{0, 0});
  CHECK(bn.running_mean.to_float_vector() == std::vector<float>{0, 0});
  CHECK(bn.running_var.to_float_vector() == std::vector<float>{1, 1});
  CHECK(bn.num_batches_tracked.dim() == 0);
  CHECK(bn.num_batches_tracked.dtype() == kInt64);
  CHECK(bn.named_buffers().size() == 3);

  // x (2, 2, 1, 1, 2): channel 0 holds {1, 3, 5, 7} (mean 4, biased var 5, unbiased 20/3),
  // channel 1 holds 10 + the same.
  Tensor x = Tensor::from_vector(std::vector<float>{1, 3, 11, 13, 5, 7, 15, 17}, {2, 2, 1, 1, 2});
  Tensor y = bn.forward(x);
  const double inv = 1.0 / std::sqrt(5.0 + 1e-5);
  CHECK(y.item_at(0) == doctest::Approx(-3 * inv).epsilon(1e-5));
  CHECK(y.item_at(2) == doctest::Approx(-3 * inv).epsilon(1e-5));
  CHECK(bn.running_mean.item_at(0) == doctest::Approx(0.4));
  CHECK(bn.running_mean.item_at(1) == doctest::Approx(1.4));
  CHECK(bn.running_var.item_at(0) == doctest::Approx(0.9 + 0.1 * 20.0 / 3.0));
  CHECK(bn.num_batches_tracked.item() == 1);

  // eval: (x - running_mean) / sqrt(running_var + eps); nothing is updated.
  bn.eval();
  Tensor ye = bn.forward(x);
  CHECK(ye.item_at(0) == doctest::Approx((1 - 0.4) / std::sqrt(0.9 + 2.0 / 3.0 + 1e-5)).epsilon(1e-5));
  CHECK(bn.running_mean.item_at(0) == doctest::Approx(0.4));
  CHECK(bn.num_batches_tracked.item() == 1);

  CHECK_THROWS_WITH_AS(bn.forward(Tensor::zeros({2, 2, 2})), doctest::Contains("expected 5D input"), Error);
  CHECK_THROWS_AS(bn.forward(Tensor::zeros({1, 3, 1, 1, 2})), Error);
}

TEST_CASE("nn: BatchNorm3d without running stats uses batch statistics in eval too") {
  nn::BatchNorm3d bn(nn::BatchNorm3dOptions(1).track_running_stats(false).affine(false));
  CHECK(bn.named_buffers().empty());
  CHECK(bn.named_parameters().empty());
  bn.eval();
  Tensor y = bn.forward(Tensor::from_vector(std::vector<float>{1, 3}, {1, 1, 1, 1, 2}));
  CHECK(y.item_at(0) == doctest::Approx(-1.0).epsilon(1e-4));
}

TEST_CASE("nn: InstanceNorm3d float32 affine defaults to false, per-sample statistics") {
  nn::InstanceNorm3d in(nn::InstanceNorm3dOptions(2));
  CHECK(in.named_parameters().empty());
  CHECK(in.named_buffers().empty());
  nn::InstanceNorm3d affine(nn::InstanceNorm3dOptions(2).affine(true));
  CHECK(affine.named_parameters().size() == 2);
  // Sample 0 channel 0 is {1, 3}: normalised to {-1, 1} whatever sample 1 holds.
  Tensor x = Tensor::from_vector(std::vector<float>{1, 3, 0, 4, 100, 300, 5, 5}, {2, 2, 1, 1, 2});
  Tensor y = in.forward(x);
  CHECK(y.item_at(0) == doctest::Approx(-1.0).epsilon(1e-4));
  CHECK(y.item_at(1) == doctest::Approx(1.0).epsilon(1e-4));
  CHECK_THROWS_AS(in.forward(Tensor::zeros({2, 3, 1, 1, 2})), Error);
}

TEST_CASE("nn: MaxPool3d stride defaults to the kernel; ReLU and LeakyReLU match their formulas") {
  nn::MaxPool3d pool(nn::MaxPool3dOptions(2));
  CHECK(pool.options.stride_ == 2);
  Generator gen(4);
  CHECK(pool.forward(Tensor::randn({1, 1, 4, 6, 8}, gen)).shape() == Shape{1, 1, 2, 3, 4});
  CHECK_THROWS_AS(nn::MaxPool3d(nn::MaxPool3dOptions(0)), Error);

  Tensor x = Tensor::from_vector(std::vector<float>{-2, 0, 3}, {3});
  CHECK(nn::ReLU().forward(x).to_float_vector() == std::vector<float>{0, 0, 3});
  Tensor l = nn::LeakyReLU().forward(x);
  CHECK(l.item_at(0) == doctest::Approx(-0.02));
  CHECK(l.item_at(2) == doctest::Approx(3.0));
}
