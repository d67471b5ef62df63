// GradScaler: PyTorch's documented semantics (torch/amp/grad_scaler.py, _amp_update_scale_), and a
// scripted replay of torch.amp.GradScaler (tests/golden/grad_scaler.json, written by
// `python3 tools/golden/make_grad_scaler_golden.py` with PyTorch >= 2.3; skipped when absent).
//
// Every iteration below is PyTorch's AMP loop on loss = sum(p * G):
//   zero_grad; scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
// so that p.grad = S * G before unscale_ and exactly G after it (S is a power of two).
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <iostream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "amp/grad_scaler.h"
#include "core/half.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "tests/golden.h"

using namespace halfgrad;

namespace {

// loss = sum over i of sum(params[i] * G[i]), scaled and backpropagated.
void scaled_backward(amp::GradScaler& scaler, const std::vector<Tensor>& params, const std::vector<Tensor>& G) {
  Tensor loss;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor term = ops::sum(ops::mul(params[i], G[i]));
    loss = loss.defined() ? loss + term : term;
  }
  scaler.scale(loss).backward();
}

// One full iteration; returns whether the optimizer stepped.
bool iterate(amp::GradScaler& scaler, optim::Optimizer& opt, const Tensor& p, const Tensor& G) {
  opt.zero_grad();
  scaled_backward(scaler, {p}, {G});
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

Tensor finite_grad() { return Tensor::from_vector(std::vector<float>{0.5f, -0.25f, 1.0f}, {3}); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("amp: GradScaler defaults are PyTorch's") {
  amp::GradScaler scaler;
  CHECK(scaler.is_enabled());
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.get_growth_factor() == 2.0);
  CHECK(scaler.get_backoff_factor() == 0.5);
  CHECK(scaler.get_growth_interval() == 2000);
  CHECK(scaler.get_growth_tracker() == 0);
  CHECK_THROWS_AS(amp::GradScaler(amp::GradScalerOptions().growth_factor(1.0)), Error);
  CHECK_THROWS_AS(amp::GradScaler(amp::GradScalerOptions().backoff_factor(1.0)), Error);
}

TEST_CASE("amp: GradScaler scale() is on the tape, gives grads S*g, and keeps PyTorch's dtype rules") {
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0));
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
  const Tensor scaled = scaler.scale(ops::sum(ops::mul(p, finite_grad())));
  CHECK(scaled.item() == 1024.0 * (0.5 - 0.5 + 3.0));
  scaled.backward();
  CHECK(p.grad().item_at(0) == 1024.0 * 0.5);
  CHECK(p.grad().item_at(1) == 1024.0 * -0.25);
  // A 0-d FP16 loss times the 0-d FP32 scale is FP32; a loss with dimensions keeps FP16.
  CHECK(scaler.scale(Tensor::scalar(3.0, kFloat16)).dtype() == kFloat32);
  const Tensor v = scaler.scale(Tensor::full({2}, 3.0, kFloat16));
  CHECK(v.dtype() == kFloat16);
  CHECK(v.item_at(0) == 3072.0);
  // 65536 itself is not a finite half; the product is formed in FP32 and rounded once.
  amp::GradScaler big;
  CHECK(std::isinf(big.scale(Tensor::full({1}, 1.0, kFloat16)).item()));
  CHECK(big.scale(Tensor::full({1}, 0.5, kFloat16)).item() == 32768.0);
}

TEST_CASE("amp: GradScaler grows the scale after exactly growth_interval clean steps") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(256.0).growth_interval(3));
  const double expect_scale[7] = {256, 256, 512, 512, 512, 1024, 1024};
  const int64_t expect_tracker[7] = {1, 2, 0, 1, 2, 0, 1};
  for (int t = 0; t < 7; ++t) {
    CAPTURE(t);
    CHECK(iterate(scaler, opt, p, finite_grad()));
    CHECK(!scaler.found_inf());
    CHECK(scaler.get_scale() == expect_scale[t]);
    CHECK(scaler.get_growth_tracker() == expect_tracker[t]);
  }
  CHECK(p.item_at(0) == doctest::Approx(-7 * 0.1 * 0.5).epsilon(1e-6));  // the grads were unscaled
  CHECK(scaler.skipped_steps() == 0);
}

TEST_CASE("amp: GradScaler backs off and skips the step on inf and on NaN, leaving params unchanged") {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    CAPTURE(bad);
    Tensor p = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
    optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(0.9));
    amp::GradScaler scaler(amp::GradScalerOptions().init_scale(4096.0).growth_interval(3));
    CHECK(iterate(scaler, opt, p, finite_grad()));
    CHECK(scaler.get_growth_tracker() == 1);
    const Tensor before = p.clone();
    const Tensor buffer_before =
        dynamic_cast<const optim::SGDParamState*>(opt.param_state(p))->momentum_buffer.clone();
    Tensor G = finite_grad();
    G.data<float>()[1] = bad;
    CHECK(!iterate(scaler, opt, p, G));
    CHECK(scaler.found_inf());
    CHECK(scaler.skipped_steps() == 1);
    CHECK(scaler.get_scale() == 2048.0);
    CHECK(scaler.get_growth_tracker() == 0);
    CHECK(same_bits(p, before));
    CHECK(same_bits(dynamic_cast<const optim::SGDParamState*>(opt.param_state(p))->momentum_buffer, buffer_before));
    // The next clean step steps again and starts counting from zero.
    CHECK(iterate(scaler, opt, p, finite_grad()));
    CHECK(!scaler.found_inf());
    CHECK(scaler.get_growth_tracker() == 1);
  }
}

TEST_CASE("amp: GradScaler unscale_ twice throws, and the stages reset at update()") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(8.0));
  CHECK_THROWS_AS(scaler.unscale_(opt), Error);  // before any scale(): the scale is not set
  CHECK_THROWS_AS(scaler.update(), Error);
  scaled_backward(scaler, {p}, {finite_grad()});
  scaler.unscale_(opt);
  CHECK(p.grad().item_at(0) == 0.5);  // the true gradient, e.g. for clip_grad_norm_
  CHECK_THROWS_AS(scaler.unscale_(opt), Error);
  CHECK(scaler.step(opt));  // does not unscale a second time
  CHECK(p.item_at(0) == doctest::Approx(-0.05).epsilon(1e-6));
  CHECK_THROWS_AS(scaler.unscale_(opt), Error);  // after step()
  CHECK_THROWS_AS(scaler.step(opt), Error);      // step twice
  scaler.update();
  opt.zero_grad();
  scaled_backward(scaler, {p}, {finite_grad()});
  CHECK_NOTHROW(scaler.unscale_(opt));
  // An optimizer none of whose parameters has a gradient records no inf check.
  Tensor q = Tensor::zeros({1}).set_requires_grad(true);
  optim::SGD idle({q}, optim::SGDOptions(0.1));
  CHECK_THROWS_AS(scaler.step(idle), Error);
}

TEST_CASE("amp: GradScaler growth_interval 1 with finite grads for 1000 steps stops at 2^127, never inf") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.0));
  amp::GradScaler scaler(amp::GradScalerOptions().growth_interval(1));
  const Tensor tiny = Tensor::full({3}, 1e-30);  // S * 1e-30 stays finite even at S = 2^127
  for (int t = 0; t < 1000; ++t) {
    REQUIRE(iterate(scaler, opt, p, tiny));
    REQUIRE(std::isfinite(scaler.get_scale()));
  }
  CHECK(scaler.get_scale() == std::ldexp(1.0, 127));
  CHECK(scaler.get_growth_tracker() == 0);
}

TEST_CASE("amp: GradScaler update(new_scale) sets the scale and keeps the tracker") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().growth_interval(10));
  iterate(scaler, opt, p, finite_grad());
  opt.zero_grad();
  scaled_backward(scaler, {p}, {finite_grad()});
  scaler.step(opt);
  scaler.update(0.1);
  CHECK(scaler.get_scale() == static_cast<double>(0.1f));  // held in FP32, as PyTorch's tensor
  CHECK(scaler.get_growth_tracker() == 1);
}

TEST_CASE("amp: GradScaler state_dict round trip") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0).growth_factor(4.0).growth_interval(5));
  for (int t = 0; t < 7; ++t) iterate(scaler, opt, p, finite_grad());
  const nlohmann::json sd = nlohmann::json::parse(scaler.state_dict().dump());
  CHECK(sd.at("scale") == 4096.0);
  CHECK(sd.at("growth_factor") == 4.0);
  CHECK(sd.at("backoff_factor") == 0.5);
  CHECK(sd.at("growth_interval") == 5);
  CHECK(sd.at("_growth_tracker") == 2);
  amp::GradScaler restored;
  restored.load_state_dict(sd);
  CHECK(restored.get_scale() == 4096.0);
  CHECK(restored.get_growth_tracker() == 2);
  CHECK(restored.get_growth_interval() == 5);
  for (int t = 0; t < 4; ++t) {  // both continue identically: growth after 3 more clean steps
    iterate(scaler, opt, p, finite_grad());
    iterate(restored, opt, p, finite_grad());
    CHECK(restored.get_scale() == scaler.get_scale());
    CHECK(restored.get_growth_tracker() == scaler.get_growth_tracker());
  }
  CHECK(scaler.get_scale() == 16384.0);
  amp::GradScaler disabled(amp::GradScalerOptions().enabled(false));
  CHECK(disabled.state_dict().empty());
  CHECK_THROWS_AS(restored.load_state_dict(disabled.state_dict()), Error);
  // A field of the wrong type is named, and nothing is set (the scale is unchanged).
  const double before = restored.get_scale();
  nlohmann::json bad = sd;
  bad["growth_interval"] = "5";
  CHECK_THROWS_WITH_AS(restored.load_state_dict(bad),
                       "GradScaler::load_state_dict: field 'growth_interval' must be an integer, got string \"5\"", Error);
  bad = sd;
  bad["_growth_tracker"] = -1;
  CHECK_THROWS_WITH_AS(restored.load_state_dict(bad), doctest::Contains("field '_growth_tracker' is -1"), Error);
  // Values the constructor refuses are refused from a checkpoint too (scale 1e300 would overflow float32).
  const std::vector<std::pair<const char*, nlohmann::json>> out_of_range = {
      {"scale", 0.0}, {"scale", -4.0}, {"scale", 1e300}, {"growth_factor", 1.0}, {"backoff_factor", 1.0},
      {"backoff_factor", 0.0}, {"growth_interval", 0}, {"max_scale", -1.0}, {"skip_warning_after", -3}};
  for (const auto& [key, value] : out_of_range) {
    CAPTURE(key);
    bad = sd;
    bad[key] = value;
    CHECK_THROWS_WITH_AS(restored.load_state_dict(bad), doctest::Contains("GradScaler::load_state_dict: "), Error);
  }
  CHECK(restored.get_scale() == before);
  CHECK(restored.get_growth_interval() == 5);
}

TEST_CASE("amp: GradScaler disabled is a pass-through") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(false));
  CHECK(!scaler.is_enabled());
  CHECK(scaler.get_scale() == 1.0);
  const Tensor loss = ops::sum(ops::mul(p, finite_grad()));
  CHECK(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.unscale_(opt);
  CHECK(p.grad().item_at(0) == 0.5);
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(p.item_at(0) == doctest::Approx(-0.05).epsilon(1e-6));
}

TEST_CASE("amp: GradScaler refuses FP16 grads unless fp16_grads_to_fp32, which feeds FP32 master updates") {
  const std::vector<float> init = {1.0f, -0.5f, 0.25f};
  Tensor p16 = Tensor::from_vector(init, {3}, kFloat16).set_requires_grad(true);
  optim::AdamW opt16({p16}, optim::AdamWOptions().lr(1e-3));
  amp::GradScaler strict;
  scaled_backward(strict, {p16}, {finite_grad().cast_copy(kFloat16)});
  REQUIRE(p16.grad().dtype() == kFloat16);
  CHECK_THROWS_AS(strict.unscale_(opt16), Error);  // PyTorch: "Attempting to unscale FP16 gradients."

  // Pure FP16 model: grads become FP32 master grads; the FP16 parameter follows an FP32 reference run.
  // With the default scale 2^16 the first backward overflows: 65536 * 1.0 is past half's 65504, so
  // that step is skipped and the scale halves; from then on the FP16 grads are finite.
  Tensor p32 = Tensor::from_vector(init, {3}, kFloat32).set_requires_grad(true);
  optim::AdamW opt32({p32}, optim::AdamWOptions().lr(1e-3));
  amp::GradScaler scaler(amp::GradScalerOptions().fp16_grads_to_fp32(true));
  for (int t = 0; t < 6; ++t) {
    CAPTURE(t);
    opt16.zero_grad();
    scaled_backward(scaler, {p16}, {finite_grad().cast_copy(kFloat16)});
    scaler.unscale_(opt16);
    REQUIRE(p16.grad().dtype() == kFloat32);
    const bool stepped = scaler.step(opt16);
    CHECK(stepped == (t > 0));
    if (stepped) {
      CHECK(p16.grad().item_at(1) == -0.25);
      p32.set_grad(finite_grad());
      opt32.step();
    }
    scaler.update();
  }
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(same_bits(p16, p32.cast_copy(kFloat16)));
}

constexpr const char* kGoldenReplayTest = "amp: GradScaler replays PyTorch's scripted sequence (grad_scaler.json)";

TEST_CASE(kGoldenReplayTest) {
  const std::string path = std::string(HALFGRAD_SOURCE_DIR) + "/tests/golden/grad_scaler.json";
  if (!std::ifstream(path)) {
    // Made on a machine with PyTorch >= 2.3: python3 tools/golden/make_grad_scaler_golden.py
    std::cout << "skipped: " << kGoldenReplayTest << ": tests/golden/grad_scaler.json not generated yet\n";
    return;
  }
  const auto file = halfgrad::testing::load_golden("grad_scaler.json");
  for (const std::string& name : file.case_names()) {
    CAPTURE(name);
    const auto c = file.at(name);
    const auto& opt_params = c.params().at("optimizer");
    Tensor p1 = c.input("p1").set_requires_grad(true), p2 = c.input("p2").set_requires_grad(true);
    optim::SGD opt({p1, p2}, optim::SGDOptions(opt_params.at("lr").get<double>())
                                 .momentum(opt_params.at("momentum").get<double>())
                                 .dampening(opt_params.at("dampening").get<double>())
                                 .weight_decay(opt_params.at("weight_decay").get<double>())
                                 .nesterov(opt_params.at("nesterov").get<bool>()));
    amp::GradScaler scaler(amp::GradScalerOptions()
                               .init_scale(c.param<double>("init_scale"))
                               .growth_factor(c.param<double>("growth_factor"))
                               .backoff_factor(c.param<double>("backoff_factor"))
                               .growth_interval(c.param<int64_t>("growth_interval")));
    const Tensor g1 = c.input("g1"), g2 = c.input("g2");
    const Tensor scale_before = c.output("scale_before", kFloat64), scale_after = c.output("scale_after", kFloat64);
    const Tensor skipped = c.output("skipped"), tracker = c.output("growth_tracker");
    const Tensor p1_after = c.output("p1_after"), p2_after = c.output("p2_after");
    const int steps = c.param<int>("steps");
    const double lr = opt_params.at("lr").get<double>(), momentum = opt_params.at("momentum").get<double>();
    double gmax = 0;
    for (const Tensor& g : {g1, g2})
      for (int64_t i = 0; i < g.numel(); ++i) gmax = std::max(gmax, std::abs(g.item_at(i)));
    int64_t n_skipped = 0;
    for (int t = 0; t < steps; ++t) {
      CAPTURE(t);
      // G[t], with the file's inf / NaN injections applied.
      Tensor G1 = Tensor::from_vector(std::vector<float>(g1.data<float>() + t * 5, g1.data<float>() + (t + 1) * 5), {5});
      Tensor G2 = Tensor::from_vector(std::vector<float>(g2.data<float>() + t * 6, g2.data<float>() + (t + 1) * 6), {3, 2});
      for (const auto& inj : c.params().at("inject")) {
        if (inj.at("step").get<int>() != t) continue;
        const std::string v = inj.at("value").get<std::string>();
        const float bad = v == "nan" ? NAN : (v == "-inf" ? -INFINITY : INFINITY);
        (inj.at("param") == "p1" ? G1 : G2).data<float>()[inj.at("index").get<int>()] = bad;
      }
      CHECK(scaler.get_scale() == scale_before.item_at(t));
      opt.zero_grad();
      scaled_backward(scaler, {p1, p2}, {G1, G2});
      const bool stepped = scaler.step(opt);
      scaler.update();
      n_skipped += !stepped;
      CHECK(static_cast<int64_t>(skipped.item_at(t)) == (stepped ? 0 : 1));
      CHECK(scaler.get_scale() == scale_after.item_at(t));
      CHECK(scaler.get_growth_tracker() == static_cast<int64_t>(tracker.item_at(t)));
      // The parameters went through t + 1 SGD steps of size up to lr * max|g| / (1 - momentum), each
      // rounded in FP32 (on the GPU with fused multiply-adds): allow that much rounding on top of 1e-6
      // relative. The scale, skip and tracker records above are exact.
      const double atol = (t + 1) * FLT_EPSILON * lr * gmax / (1 - momentum);
      for (int i = 0; i < 11; ++i) {
        const double got = i < 5 ? p1.item_at(i) : p2.item_at(i - 5);
        const double want = i < 5 ? p1_after.item_at(t * 5 + i) : p2_after.item_at(t * 6 + i - 5);
        CHECK_MESSAGE(std::abs(got - want) <= atol + 1e-6 * std::abs(want),
                      (i < 5 ? "p1[" : "p2[") << (i < 5 ? i : i - 5) << "] " << got << " vs " << want);
      }
    }
    CHECK(scaler.skipped_steps() == n_skipped);
  }
}

// ---- halfgrad's extensions: max_scale, diagnostics, their state ------------------------------------

namespace {
// Captures what std::cerr receives while alive.
struct CerrCapture {
  std::ostringstream text;
  std::streambuf* old;
  CerrCapture() : old(std::cerr.rdbuf(text.rdbuf())) {}
  ~CerrCapture() { std::cerr.rdbuf(old); }
};
}  // namespace

TEST_CASE("amp: GradScaler max_scale caps growth: init 8192, cap 32768, growth_interval 1 stays at 32768") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.0));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(8192).max_scale(32768).growth_interval(1));
  CHECK(scaler.get_max_scale() == 32768.0);
  std::vector<double> seen;
  for (int t = 0; t < 5; ++t) {
    iterate(scaler, opt, p, finite_grad());
    seen.push_back(scaler.get_scale());
  }
  CHECK(seen == std::vector<double>{16384, 32768, 32768, 32768, 32768});
  // A cap that is not a power-of-two multiple of S: growth stops exactly at the cap.
  amp::GradScaler odd(amp::GradScalerOptions().init_scale(1024).max_scale(3000).growth_interval(1));
  for (int t = 0; t < 3; ++t) iterate(odd, opt, p, finite_grad());
  CHECK(odd.get_scale() == 3000.0);
  // Backoff is not capped from below, and growth resumes up to the cap.
  Tensor bad = Tensor::from_vector(std::vector<float>{INFINITY, 0, 0}, {3});
  iterate(odd, opt, p, bad);
  CHECK(odd.get_scale() == 1500.0);
  CHECK_THROWS_AS(amp::GradScaler(amp::GradScalerOptions().init_scale(65536).max_scale(32768)), Error);
  CHECK_THROWS_AS(amp::GradScaler(amp::GradScalerOptions().max_scale(0)), Error);
  CHECK(std::isinf(amp::GradScaler().get_max_scale()));  // PyTorch: no cap
}

TEST_CASE("amp: GradScaler warns once after skip_warning_after consecutive skipped steps, and when the scale falls below 1") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(8).skip_warning_after(3));
  const Tensor nan_grad = Tensor::from_vector(std::vector<float>{NAN, 1, 1}, {3});
  CerrCapture cap;
  for (int t = 1; t <= 2; ++t) iterate(scaler, opt, p, nan_grad);
  CHECK(scaler.consecutive_skipped_steps() == 2);
  CHECK_FALSE(scaler.skip_streak());
  CHECK(cap.text.str().empty());
  iterate(scaler, opt, p, nan_grad);  // the third in a row: S = 8 / 2^3 = 1
  CHECK(scaler.skip_streak());
  CHECK(scaler.warnings_emitted() == 1);
  CHECK(cap.text.str().find("the last 3 optimizer steps were all skipped") != std::string::npos);
  CHECK_FALSE(scaler.scale_below_one());
  iterate(scaler, opt, p, nan_grad);  // S = 0.5: the second kind of warning
  CHECK(scaler.scale_below_one());
  CHECK(scaler.warnings_emitted() == 2);
  CHECK(cap.text.str().find("fell below 1") != std::string::npos);
  iterate(scaler, opt, p, nan_grad);  // neither warning repeats while the condition lasts
  CHECK(scaler.warnings_emitted() == 2);
  CHECK(scaler.consecutive_skipped_steps() == 5);
  CHECK(iterate(scaler, opt, p, finite_grad()));  // a clean step ends the streak
  CHECK(scaler.consecutive_skipped_steps() == 0);
  CHECK_FALSE(scaler.skip_streak());
  amp::GradScaler quiet(amp::GradScalerOptions().skip_warning_after(0));
  for (int t = 0; t < 12; ++t) iterate(quiet, opt, p, nan_grad);
  CHECK(quiet.consecutive_skipped_steps() == 12);
  CHECK_FALSE(quiet.skip_streak());
  CHECK_THROWS_AS(amp::GradScaler(amp::GradScalerOptions().skip_warning_after(-1)), Error);
}

TEST_CASE("amp: GradScaler state_dict carries max_scale and the skip streak; PyTorch's dict without them still loads") {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(8192).max_scale(32768).skip_warning_after(4));
  const Tensor nan_grad = Tensor::from_vector(std::vector<float>{NAN, 1, 1}, {3});
  iterate(scaler, opt, p, nan_grad);
  iterate(scaler, opt, p, nan_grad);
  const nlohmann::json sd = nlohmann::json::parse(scaler.state_dict().dump());
  CHECK(sd.at("max_scale") == 32768.0);
  CHECK(sd.at("skip_warning_after") == 4);
  CHECK(sd.at("_consecutive_skipped") == 2);
  CHECK_FALSE(amp::GradScaler().state_dict().contains("max_scale"));  // no cap: no key (JSON has no inf)
  amp::GradScaler restored;
  restored.load_state_dict(sd);
  CHECK(restored.get_max_scale() == 32768.0);
  CHECK(restored.consecutive_skipped_steps() == 2);
  CerrCapture cap;
  iterate(restored, opt, p, nan_grad);
  iterate(restored, opt, p, nan_grad);  // the 4th in a row counts across the checkpoint
  CHECK(restored.skip_streak());
  // A dict as PyTorch writes it: the five keys only.
  const nlohmann::json torch_sd = {{"scale", 1024.0}, {"growth_factor", 2.0}, {"backoff_factor", 0.5},
                                   {"growth_interval", 2000}, {"_growth_tracker", 7}};
  amp::GradScaler from_torch(amp::GradScalerOptions().init_scale(1024).max_scale(4096));
  from_torch.load_state_dict(torch_sd);
  CHECK(from_torch.get_scale() == 1024.0);
  CHECK(from_torch.get_growth_tracker() == 7);
  CHECK(from_torch.get_max_scale() == 4096.0);
}
