// Opt levels O0..O3 (amp/opt_level.h): what each does to the model, optimizer and scaler, that each
// trains a small U-Net on a fixed batch, and the FP32 allow-list by module name.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/opt_level.h"
#include "core/error.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/adamw.h"

using namespace halfgrad;
using amp::OptLevel;

namespace {

nn::UNet3dOptions tiny() { return nn::UNet3dOptions().channels({4, 8}).bottleneck(16).num_classes(2); }

// A fixed batch: (2, 1, 16, 16, 16) float32, a bright ball of radius 5 in N(0, 0.3^2) noise, and its
// (2, 16, 16, 16) int64 mask.
void ball_batch(Tensor& x, Tensor& y) {
  Generator gen(11);
  const int64_t n = 2, s = 16;
  x = Tensor::randn({n, 1, s, s, s}, gen, kFloat32, 0.3);
  std::vector<int64_t> labels(n * s * s * s);
  float* px = x.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t z = 0; z < s; ++z)
      for (int64_t yy = 0; yy < s; ++yy)
        for (int64_t xx = 0; xx < s; ++xx) {
          const int64_t c = 7 + b;  // the two balls sit in different places
          const bool in = (z - c) * (z - c) + (yy - 8) * (yy - 8) + (xx - c) * (xx - c) <= 25;
          const int64_t i = ((b * s + z) * s + yy) * s + xx;
          labels[i] = in ? 1 : 0;
          if (in) px[i] += 1.0f;
        }
  y = Tensor::from_labels(labels, {n, s, s, s});
}

struct Run {
  std::vector<double> losses;
  int64_t skipped = 0;
};

// `steps` iterations of the loop of amp/opt_level.h on the fixed batch.
Run train(OptLevel level, int steps) {
  Generator gen(2);
  auto model = std::make_shared<nn::UNet3d>(tiny(), gen);
  optim::AdamWOptions adamw = optim::AdamWOptions().lr(3e-3).weight_decay(0.0);
  amp::GradScalerOptions so;
  const amp::OptLevelSetup mp = amp::apply_opt_level(level, *model, adamw, so);
  optim::AdamW opt(model->parameters(), adamw);
  amp::GradScaler scaler(so);
  Tensor x, y;
  ball_batch(x, y);
  Run run;
  for (int t = 0; t < steps; ++t) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(mp.autocast);
      loss = ops::segmentation_loss((*model)(mp.cast_input(x)).to(kFloat32), y);
    }
    scaler.scale(loss).backward();
    if (!scaler.step(opt)) ++run.skipped;
    scaler.update();
    run.losses.push_back(loss.item());
  }
  return run;
}

Dtype dtype_of(const nn::Module& m, const std::string& name) {
  for (auto& [n, t] : m.named_parameters())
    if (n == name) return t.dtype();
  for (auto& [n, t] : m.named_buffers())
    if (n == name) return t.dtype();
  FAIL("no tensor " << name);
  return kFloat32;
}

}  // namespace

TEST_CASE("amp: opt_level names round-trip; an unknown one lists the four") {
  for (OptLevel l : {OptLevel::O0, OptLevel::O1, OptLevel::O2, OptLevel::O3})
    CHECK(amp::opt_level_from_name(amp::opt_level_name(l)) == l);
  CHECK_THROWS_WITH_AS(amp::opt_level_from_name("O4"), doctest::Contains("O3 (pure FP16)"), Error);
  CHECK_THROWS_AS(amp::opt_level_from_name("o1"), Error);
}

TEST_CASE("amp: apply_opt_level sets weight dtypes, optimizer masters and scaler options per level (UNet3d channels {4,8})") {
  SUBCASE("O0: FP32, scaler disabled") {
    nn::UNet3d m(tiny());
    optim::AdamWOptions o;
    amp::GradScalerOptions s;
    const auto mp = amp::apply_opt_level(OptLevel::O0, m, o, s);
    CHECK_FALSE(mp.autocast);
    CHECK(mp.input_dtype == kFloat32);
    CHECK_FALSE(s.enabled());
    for (const Tensor& p : m.parameters()) CHECK(p.dtype() == kFloat32);
  }
  SUBCASE("O1: FP32 weights, autocast, GradScaler refusing FP16 grads") {
    nn::UNet3d m(tiny());
    optim::AdamWOptions o;
    amp::GradScalerOptions s;
    const auto mp = amp::apply_opt_level(OptLevel::O1, m, o, s);
    CHECK(mp.autocast);
    CHECK(s.enabled());
    CHECK_FALSE(s.fp16_grads_to_fp32());
    for (const Tensor& p : m.parameters()) CHECK(p.dtype() == kFloat32);
  }
  SUBCASE("O2: FP16 convs, FP32 BatchNorm (weights and running stats), masters") {
    nn::UNet3d m(tiny());
    const Dtype low = amp::autocast_lower_dtype();  // FP16; FP32 in a HALFGRAD_FORCE_FP32 build
    optim::AdamWOptions o;
    amp::GradScalerOptions s;
    const auto mp = amp::apply_opt_level(OptLevel::O2, m, o, s);
    CHECK_FALSE(mp.autocast);
    CHECK(mp.input_dtype == low);
    CHECK(o.master_weights());
    CHECK(s.fp16_grads_to_fp32());
    CHECK(dtype_of(m, "enc.0.0.weight") == low);
    CHECK(dtype_of(m, "up.0.bias") == low);
    CHECK(dtype_of(m, "enc.0.1.weight") == kFloat32);
    CHECK(dtype_of(m, "dec.1.4.bias") == kFloat32);
    CHECK(dtype_of(m, "enc.0.1.running_var") == kFloat32);
    CHECK(dtype_of(m, "enc.0.1.num_batches_tracked") == kInt64);
    nn::UNet3d mi(nn::UNet3dOptions(tiny()).norm(nn::NormKind::Instance));  // InstanceNorm3d: no params, nothing to keep
    amp::apply_opt_level(OptLevel::O2, mi, o, s);
    CHECK(dtype_of(mi, "enc.0.0.weight") == low);
  }
  SUBCASE("O3: everything FP16, no masters, eps raised to 1e-4") {
    nn::UNet3d m(tiny());
    const Dtype low = amp::autocast_lower_dtype();  // FP16; FP32 in a HALFGRAD_FORCE_FP32 build
    optim::AdamWOptions o;
    amp::GradScalerOptions s;
    amp::apply_opt_level(OptLevel::O3, m, o, s);
    CHECK_FALSE(o.master_weights());
    CHECK(o.eps() == amp::kPureFp16MinAdamEps);
    for (const Tensor& p : m.parameters()) CHECK(p.dtype() == low);
    CHECK(dtype_of(m, "enc.0.1.running_mean") == low);
    optim::AdamWOptions big_eps = optim::AdamWOptions().eps(1e-3);
    amp::apply_opt_level(OptLevel::O3, m, big_eps, s);
    CHECK(big_eps.eps() == 1e-3);  // only ever raised
  }
}

TEST_CASE("amp: every opt level O0-O3 trains a UNet3d {4,8} on a fixed (2,1,16,16,16) batch: 20 steps, finite, decreasing loss") {
  for (OptLevel level : {OptLevel::O0, OptLevel::O1, OptLevel::O2, OptLevel::O3}) {
    CAPTURE(amp::opt_level_name(level));
    const Run run = train(level, 20);
    for (double l : run.losses) REQUIRE(std::isfinite(l));
    double first = 0, last = 0;
    for (int t = 0; t < 5; ++t) first += run.losses[t] / 5, last += run.losses[15 + t] / 5;
    CAPTURE(first);
    CAPTURE(last);
    CHECK(last < 0.8 * first);
    CHECK(run.losses.back() < run.losses.front());
    CHECK(run.skipped <= 3);  // at most the first steps, while the scale settles
  }
}

TEST_CASE("amp: mark_fp32_modules: a decoder block's convs are not cast to FP16 under autocast; the rest are") {
  Generator gen(4);
  auto net = std::make_shared<nn::UNet3d>(tiny(), gen);
  CHECK(amp::mark_fp32_modules(*net, "dec.1") == 7);  // the block (Sequential) and its 6 layers
  CHECK(net->dec[1]->autocast_fp32());
  CHECK_FALSE(net->dec[0]->autocast_fp32());
  Tensor x = Tensor::randn({1, 1, 8, 8, 8}, gen);
  amp::AutocastGuard on;
  Tensor y = (*net)(x);
#ifndef HALFGRAD_FORCE_FP32
  CHECK(y.dtype() == kFloat16);  // the head, after the block, is FP16 again
  // The weight-cast cache shows which weights autocast converted in this region.
  for (auto& [name, p] : net->named_parameters()) {
    if (p.dim() != 5) continue;  // conv and transposed-conv weights
    CAPTURE(name);
    CHECK(amp::cast_cache_lookup(p).defined() == (name.rfind("dec.1.", 0) != 0));
  }
#endif
  ops::mean(y.to(kFloat32)).backward();
  for (auto& [name, p] : net->named_parameters()) {
    CAPTURE(name);
    CHECK(p.grad().defined());
  }
}

TEST_CASE("amp: mark_fp32_modules with prefix \"\" gives exactly the FP32 logits under autocast; unknown prefixes throw") {
  Generator gen(9);
  auto net = std::make_shared<nn::UNet3d>(tiny(), gen);
  Tensor x = Tensor::randn({1, 1, 8, 8, 8}, gen);
  const Tensor ref = (*net)(x);
  amp::mark_fp32_modules(*net, "");
  amp::AutocastGuard on;
  const Tensor y = (*net)(x);
  REQUIRE(y.dtype() == kFloat32);
  CHECK(std::memcmp(y.raw_data(), ref.raw_data(), ref.nbytes()) == 0);
  CHECK_THROWS_WITH_AS(amp::mark_fp32_modules(*net, "decoder"), doctest::Contains("'decoder'"), Error);
  CHECK_THROWS_WITH_AS(amp::mark_fp32_modules(*net, "decoder"), doctest::Contains("dec.0"), Error);
}
