// Cases from public mixed-precision bug reports (PyTorch, apex and forum threads), each with the value
// a correct implementation must give. The reports' common shapes:
//   1. the loss scale grows to inf when every step is clean (growth_interval 1);
//   2. a loss that is NaN on every step silently halves the scale forever;
//   3. clipping scaled gradients (clip before unscale_) clips by the wrong norm;
//   4. normalising large FP16 activations overflows the variance (512^2 = 262144 > 65504);
//   5. a Dice sum over a 64^3 volume overflows FP16 (262144 > 65504);
//   6. Adam's eps 1e-8 underflows in FP16, so a zero gradient gives 0/0 = NaN;
//   7. resuming from a checkpoint does not continue the run exactly (scaler state lost or rounded).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/opt_level.h"
#include "core/error.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

using namespace halfgrad;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// One AMP iteration on loss = sum(p * G); returns whether the optimizer stepped.
bool iterate(amp::GradScaler& scaler, optim::Optimizer& opt, const Tensor& p, const Tensor& G) {
  opt.zero_grad();
  scaler.scale(ops::sum(ops::mul(p, G))).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

}  // namespace

TEST_CASE("amp bug reports: growth_interval 1 with small finite gradients for 1000 steps never makes the scale inf") {
  SUBCASE("FP32 gradients 1e-3: the scale climbs to 2^127 and stops (2^128 would be inf)") {
    Tensor p = Tensor::zeros({4}).set_requires_grad(true);
    optim::SGD opt({p}, optim::SGDOptions(0.0));
    amp::GradScaler scaler(amp::GradScalerOptions().growth_interval(1));
    const Tensor G = Tensor::full({4}, 1e-3);
    for (int t = 0; t < 1000; ++t) {
      REQUIRE(iterate(scaler, opt, p, G));
      REQUIRE(std::isfinite(scaler.get_scale()));
    }
    CHECK(scaler.get_scale() == std::ldexp(1.0, 127));
  }
  SUBCASE("FP16 gradients (O2-style): the scale oscillates at FP16's overflow level and never leaves it") {
    // loss = sum(p * G) is an FP16 0-d tensor, so backward hands S itself, rounded to FP16, to the sum:
    // S = 2^16 = 65536 is past FP16's 65504 and overflows, S = 2^15 does not. With growth_interval 1
    // every clean step doubles S into the overflow and the next step halves it back.
    Tensor p = Tensor::zeros({4}, kFloat16).set_requires_grad(true);
    optim::SGD opt({p}, optim::SGDOptions(0.0));
    amp::GradScaler scaler(amp::GradScalerOptions().growth_interval(1).fp16_grads_to_fp32(true));
    const Tensor G = Tensor::full({4}, 1e-3, kFloat16);
    int64_t skipped = 0;
    for (int t = 0; t < 1000; ++t) {
      skipped += !iterate(scaler, opt, p, G);
      REQUIRE(std::isfinite(scaler.get_scale()));
      REQUIRE(scaler.get_scale() <= 65536.0);
    }
    CHECK(skipped == 500);
    CHECK(scaler.get_scale() == 65536.0);
  }
}

TEST_CASE("amp bug reports: a loss that is always NaN never changes the parameters, and the skip diagnostic fires") {
  const std::vector<float> init = {1.0f, -2.0f, 0.5f};
  Tensor p = Tensor::from_vector(init, {3}).set_requires_grad(true);
  const Tensor before = p.clone();
  optim::AdamW opt({p}, optim::AdamWOptions().lr(1e-3));  // weight decay would move p if a step ran
  amp::GradScaler scaler;  // diagnostic after 10 consecutive skipped steps (the default)
  const Tensor G = Tensor::from_vector(std::vector<float>{NAN, 1.0f, 1.0f}, {3});
  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  for (int t = 1; t <= 20; ++t) {
    CHECK_FALSE(iterate(scaler, opt, p, G));
    CHECK(scaler.skip_streak() == (t >= 10));
  }
  std::cerr.rdbuf(old);
  CHECK(same_bits(p, before));
  CHECK(opt.param_state(p) == nullptr);  // AdamW never ran: no moments, no step count
  CHECK(scaler.skipped_steps() == 20);
  CHECK(scaler.consecutive_skipped_steps() == 20);
  CHECK(scaler.get_scale() == std::ldexp(1.0, 16 - 20));  // halved 20 times: 2^-4
  CHECK(scaler.scale_below_one());
  CHECK(scaler.warnings_emitted() == 2);  // the streak at 10, the scale below 1 at step 17
  CHECK(err.str().find("the last 10 optimizer steps were all skipped") != std::string::npos);
  CHECK(err.str().find("fell below 1") != std::string::npos);
}

TEST_CASE("amp bug reports: clip_grad_norm_(max 1) after unscale_ with true norm 0.5 under scale 65536 clips nothing; update equals FP32") {
  // G = (0.25, 0.25, 0.25, 0.25): ||G|| = 0.5 exactly. Scaled, the gradient norm is 32768, so clipping
  // before unscale_ (the reported mistake) would shrink the update by a factor 65536.
  const Tensor G = Tensor::full({4}, 0.25);
  const std::vector<float> init = {0.1f, 0.2f, 0.3f, 0.4f};
  Tensor p_amp = Tensor::from_vector(init, {4}).set_requires_grad(true);
  Tensor p_ref = Tensor::from_vector(init, {4}).set_requires_grad(true);
  optim::SGD opt_amp({p_amp}, optim::SGDOptions(0.1)), opt_ref({p_ref}, optim::SGDOptions(0.1));
  amp::GradScaler scaler;  // 65536

  scaler.scale(ops::sum(ops::mul(p_amp, G))).backward();
  CHECK(p_amp.grad().item_at(0) == 16384.0);  // 65536 * 0.25
  scaler.unscale_(opt_amp);
  const double norm = optim::clip_grad_norm_({p_amp}, 1.0);
  CHECK(norm == 0.5);
  CHECK(p_amp.grad().item_at(0) == 0.25);  // not clipped
  CHECK(scaler.step(opt_amp));             // does not unscale a second time
  scaler.update();

  ops::sum(ops::mul(p_ref, G)).backward();
  CHECK(optim::clip_grad_norm_({p_ref}, 1.0) == 0.5);
  opt_ref.step();
  CHECK(same_bits(p_amp, p_ref));
  CHECK(p_amp.item_at(0) == doctest::Approx(0.1 - 0.1 * 0.25));

  // The reported mistake, for contrast: the norm of the scaled gradients.
  p_amp.set_grad(Tensor());
  scaler.scale(ops::sum(ops::mul(p_amp, G))).backward();
  CHECK(optim::clip_grad_norm_({p_amp}, 1.0) == 32768.0);
}

TEST_CASE("amp bug reports: instance_norm of float16 (1,4,4,4,2) alternating +-512 and +-256 gives exactly +-1, no inf") {
  // Per (sample, channel) the 32 values alternate +a, -a: mean 0, variance a^2 (262144 and 65536,
  // both past FP16's 65504). halfgrad accumulates the moments in FP64, so nothing overflows.
  for (double a : {512.0, 256.0}) {
    CAPTURE(a);
    std::vector<float> v(1 * 4 * 4 * 4 * 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 2 == 0 ? a : -a);
    const Tensor x = Tensor::from_vector(v, {1, 4, 4, 4, 2}, kFloat16);
    Tensor y_amp, y_plain;
    {
      // instance_norm is on no autocast list (as in PyTorch): FP16 in, FP16 out, FP32+ statistics
      amp::AutocastGuard on;
      y_amp = ops::instance_norm(x, Tensor(), Tensor(), 1e-5);
    }
    y_plain = ops::instance_norm(x, Tensor(), Tensor(), 1e-5);  // FP16 in, FP16 out
    CHECK(y_amp.dtype() == kFloat16);
    CHECK(y_plain.dtype() == kFloat16);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double want = i % 2 == 0 ? 1.0 : -1.0;
      REQUIRE(y_amp.item_at(i) == want);
      REQUIRE(y_plain.item_at(i) == want);
    }
  }
}

TEST_CASE("amp bug reports: soft Dice of an all-ones 64^3 prediction and target under autocast: intersection 262144, finite loss") {
  const int64_t s = 64, V = s * s * s;  // 262144 voxels: four times FP16's largest finite value
  // The sums themselves: FP16 p and one-hot target (all ones), as an FP16 network would produce them.
  const Tensor p = Tensor::ones({1, 1, s, s, s}, kFloat16), oh = Tensor::ones({1, 1, s, s, s}, kFloat16);
  const Tensor inter_plain = ops::sum(ops::mul(p, oh));  // outside autocast: the FP16 input's dtype
  CHECK(std::isinf(inter_plain.item()));                 // the reported overflow
  {
    amp::AutocastGuard on;  // sum is on the FP32 list
    const Tensor inter = ops::sum(ops::mul(p, oh));
    CHECK(inter.dtype() == kFloat32);
    CHECK(inter.item() == 262144.0);
    CHECK(ops::sum(p).item() + ops::sum(oh).item() == 524288.0);
  }
  // The loss: logits (1, 2, 64, 64, 64) FP16 with class 0 at -8 and class 1 at +8 everywhere, and a
  // target of class 1 everywhere. Softmax (in FP32 under autocast) gives p_1 = 1 - e, p_0 = e with
  // e = 1 / (1 + exp(16)) = 1.1e-7, so inter_1 = 262144 (1 - e) and den_1 = 262144 (2 - e); class 0 is
  // absent from the target, so its Dice is smooth / (262144 e + smooth) ~ 3.4e-4 and the loss is
  // ~0.4998 - the mean over both classes, as the reference's soft Dice defines it.
  std::vector<float> logits(2 * V);
  for (int64_t i = 0; i < V; ++i) logits[i] = -8.0f, logits[V + i] = 8.0f;
  const Tensor x = Tensor::from_vector(logits, {1, 2, s, s, s}, kFloat16);
  const Tensor target = Tensor::from_labels(std::vector<int64_t>(V, 1), {1, s, s, s});
  amp::AutocastGuard on;
  const Tensor loss = ops::soft_dice_loss(x, target);
  CHECK(loss.dtype() == kFloat32);
  REQUIRE(std::isfinite(loss.item()));
  // Class 1: (2 * 262144 (1 - e) + s) / (262144 (1 - e) + 262144 + s) with e = 1.1e-7; class 0's
  // p sums to 262144 e = 0.03, so its ratio is s / (0.03 + s) ~ 3e-4: loss ~ 1 - (1 + 3e-4) / 2.
  const double e = 1.0 / (1.0 + std::exp(16.0));
  const double r1 = (2 * V * (1 - e) + 1e-5) / (V * (1 - e) + V + 1e-5), r0 = 1e-5 / (V * e + 1e-5);
  CHECK(loss.item() == doctest::Approx(1.0 - (r0 + r1) / 2).epsilon(1e-5));
}

TEST_CASE("amp bug reports: AdamW on float16 params [1, -2, 0.5] with zero gradient and eps 1e-8 does not move them") {
  // In FP16 eps = 1e-8 rounds to 0 and m / (sqrt(v) + eps) = 0 / 0 = NaN (the report). halfgrad
  // keeps eps in FP32 whether or not there is a master weight. weight_decay is 0 here: AdamW's
  // decoupled decay multiplies p by (1 - lr * wd) even when the gradient is zero.
  for (bool masters : {true, false}) {
    CAPTURE(masters);
    Tensor p = Tensor::from_vector(std::vector<float>{1.0f, -2.0f, 0.5f}, {3}, kFloat16).set_requires_grad(true);
    const Tensor before = p.clone();
    optim::AdamW opt({p}, optim::AdamWOptions().lr(1e-3).eps(1e-8).weight_decay(0.0).master_weights(masters));
    for (int t = 0; t < 5; ++t) {
      p.set_grad(Tensor::zeros({3}, kFloat16));
      opt.step();
    }
    CHECK(same_bits(p, before));
  }
  // With the default weight decay 1e-2 the same zero-gradient steps do move p: 1 * (1 - 1e-5)^5 in the master.
  Tensor q = Tensor::from_vector(std::vector<float>{1.0f, -2.0f, 0.5f}, {3}, kFloat16).set_requires_grad(true);
  optim::AdamW decayed({q}, optim::AdamWOptions().lr(1e-3).eps(1e-8));
  for (int t = 0; t < 5; ++t) q.set_grad(Tensor::zeros({3}, kFloat16)), decayed.step();
  CHECK(decayed.param_state(q)->master.item_at(0) < 1.0);
}

TEST_CASE("amp bug reports: a checkpoint taken mid-training (UNet3d, AdamW, GradScaler) resumes bit-identically") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("halfgrad_amp_resume_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "checkpoint.bin").string();
  const auto opts = nn::UNet3dOptions().channels({4, 8}).bottleneck(16).num_classes(2);
  Generator data_gen(5);
  const Tensor x = Tensor::randn({2, 1, 8, 8, 8}, data_gen);
  std::vector<int64_t> labels(2 * 8 * 8 * 8);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = x.item_at(static_cast<int64_t>(i)) > 0.5 ? 1 : 0;
  const Tensor y = Tensor::from_labels(labels, {2, 8, 8, 8});
  // growth_interval 2 and a low start, so the scale changes around the checkpoint.
  const auto scaler_options = amp::GradScalerOptions().init_scale(256).growth_interval(2).max_scale(1024);
  const auto adamw = optim::AdamWOptions().lr(3e-3);

  auto step = [&](nn::UNet3d& model, optim::AdamW& opt, amp::GradScaler& scaler) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard on;
      loss = ops::segmentation_loss(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };

  Generator g1(1);
  auto model = std::make_shared<nn::UNet3d>(opts, g1);
  optim::AdamW opt(model->parameters(), adamw);
  amp::GradScaler scaler(scaler_options);
  for (int t = 0; t < 3; ++t) step(*model, opt, scaler);
  nn::save_checkpoint(path, *model, {{"optimizer", opt.state_dict()}, {"scaler", scaler.state_dict()}});
  step(*model, opt, scaler);  // the uninterrupted run's next step

  Generator g2(99);  // a different init: everything must come from the file
  auto resumed = std::make_shared<nn::UNet3d>(opts, g2);
  const nn::CheckpointState ck = nn::load_checkpoint(path, *resumed);
  optim::AdamW opt2(resumed->parameters(), optim::AdamWOptions());
  opt2.load_state_dict(ck.extra.at("optimizer"));
  amp::GradScaler scaler2(scaler_options);
  scaler2.load_state_dict(ck.extra.at("scaler"));
  step(*resumed, opt2, scaler2);
  fs::remove_all(dir);

  CHECK(scaler2.get_scale() == scaler.get_scale());
  CHECK(scaler2.get_growth_tracker() == scaler.get_growth_tracker());
  CHECK(scaler.get_scale() == 1024.0);  // 256 -> 512 (step 2) -> 1024 (step 4): grown across the resume
  const auto a = model->named_parameters(), b = resumed->named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(same_bits(a[i].second, b[i].second));
  }
  const auto ab = model->named_buffers(), bb = resumed->named_buffers();
  for (size_t i = 0; i < ab.size(); ++i) CHECK(same_bits(ab[i].second, bb[i].second));
}
