// nonfinite_test.cpp - NaN, +inf and -inf through every op of the U-Net and its training step, on the
// CPU, forward and backward, against what PyTorch 1.13 gives on the same inputs
// (tests/golden/nonfinite.json, from `/usr/bin/python3 tools/golden/make_nonfinite_golden.py`).
// check_close (tests/golden.h) holds every element to the golden one: a NaN must be a NaN, an inf the
// same inf, and a finite value within the float32 tolerance, so a NaN that became a plausible number
// (or a number that became NaN) fails and names its position. The cases plant the special values
// at fixed positions (each case's params["planted"]); see the script for what each one exercises.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "tests/golden.h"
#include "tests/ops/nonfinite_cases.h"

namespace halfgrad {
namespace {

using testing::check_close;
using testing::check_same_nonfinite;
using testing::GoldenCase;
using testing::load_golden;
using testing::NonfiniteConfig;
using testing::NonfiniteResult;
using testing::run_nonfinite_case;
using testing::Tolerance;
using testing::tolerance_for;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Where PyTorch has NaN, `actual` is NaN; where PyTorch has an inf, the same inf; where it has a
// number, `actual` has that number (within tol) or NaN. For the one known place where halfgrad makes
// more NaN than PyTorch: see conv3d_weight_nan below.
// With Spread::NanForInf instead, `actual` may hold NaN where PyTorch has an inf, and must have every
// number (see nan_may_spread).
enum class Spread { NanForNumber, NanForInf };
void check_nan_superset(const Tensor& actual, const Tensor& expected, Tolerance tol, const std::string& what,
                        Spread spread = Spread::NanForNumber) {
  const bool nan_for_inf = spread == Spread::NanForInf, nan_for_number = spread == Spread::NanForNumber;
  REQUIRE(actual.shape() == expected.shape());
  const std::vector<double> a = actual.to_double_vector(), e = expected.to_double_vector();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ok = std::isnan(e[i])   ? std::isnan(a[i])
                    : std::isinf(e[i]) ? a[i] == e[i] || (nan_for_inf && std::isnan(a[i]))
                                       : (nan_for_number && std::isnan(a[i])) ||
                                             std::fabs(a[i] - e[i]) <= tol.atol + tol.rtol * std::fabs(e[i]);
    if (!ok && first < 0) first = static_cast<int64_t>(i);
    bad += !ok;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements lost a NaN/inf or differ; first at " << first);
}

// The cases where halfgrad makes NaN where PyTorch 1.13 does not, on purpose or by the order of its
// products; everywhere else every NaN and inf is at PyTorch's position:
// - l1_loss: PyTorch's backward takes sign(NaN) = 0, a zero gradient for a NaN input (or target);
//   halfgrad's sign keeps the NaN, so a NaN never becomes a plausible gradient.
// - upsample_trilinear3d: where a tap of weight exactly 0 holds an inf, halfgrad forms 0 * inf = NaN;
//   PyTorch's kernel forms that product along some axes and not others (so it gives the inf there).
std::optional<Spread> nan_may_spread(const std::string& name) {
  if (name.rfind("l1_loss", 0) == 0) return Spread::NanForNumber;
  if (name.rfind("upsample_trilinear3d", 0) == 0) return Spread::NanForInf;
  return std::nullopt;
}

// The case on the CPU in float32, every output (but max_pool3d's indices, seen through dx) and every
// gradient against PyTorch's.
void check_case(const std::string& name, Tolerance tol = tolerance_for(kFloat32)) {
  const GoldenCase c = load_golden("nonfinite.json").at(name);
  INFO(c.where());
  const NonfiniteResult r = run_nonfinite_case(c, NonfiniteConfig{});
  const std::optional<Spread> spread = nan_may_spread(name);
  for (const std::string& o : c.output_names()) {
    if (o == "indices") continue;
    REQUIRE_MESSAGE(r.outputs.count(o), c.where() << ": no output " << o);
    if (spread) check_nan_superset(r.outputs.at(o), c.output(o), tol, c.where() + " " + o, *spread);
    else check_close(r.outputs.at(o), c.output(o), tol.atol, tol.rtol, c.where() + " " + o);
  }
  for (const std::string& g : c.grad_names()) {
    if (spread) {
      check_nan_superset(r.grads.at(g), c.grad(g), tol, c.where() + " d" + g, *spread);
      continue;
    }
    if (name == "conv3d_weight_nan" && g == "x") {
      // A NaN weight: the stride-1 dgrad runs as a convolution of the zero-padded dy with the flipped
      // weight, so the padding's zeros meet the NaN (0 * NaN) and dx is NaN on the border too, where
      // PyTorch's CPU col2vol never forms those products and leaves numbers (the CUDA implicit GEMM
      // does the same as halfgrad's CPU). NaN or inf in x or dy reach exactly PyTorch's positions.
      check_nan_superset(r.grads.at(g), c.grad(g), tol, c.where() + " dx");
      continue;
    }
    check_close(r.grads.at(g), c.grad(g), tol.atol, tol.rtol, c.where() + " d" + g);
  }
}

void check_cases(const std::vector<std::string>& names, Tolerance tol = tolerance_for(kFloat32)) {
  for (const std::string& n : names) {
    SUBCASE(n.c_str()) { check_case(n, tol); }
  }
}

TEST_CASE("nonfinite: conv3d float32 (2,2,4,4,4) k3 s1/s2 p1, NaN/inf in x, in dy and a NaN weight, as PyTorch") {
  check_cases({"conv3d_k3_s1_p1_x", "conv3d_k3_s1_p1_gy", "conv3d_k3_s2_p1_x", "conv3d_k3_s2_p1_gy",
               "conv3d_weight_nan"});
}

TEST_CASE("nonfinite: conv_transpose3d float32 (2,2,3,3,3) k2 s2, NaN/inf in x and in dy, as PyTorch") {
  check_cases({"conv_transpose3d_k2_s2_x", "conv_transpose3d_k2_s2_gy"});
}

TEST_CASE("nonfinite: batch_norm / instance_norm float32 (2,5,2,3,4), NaN/inf in x, dy and running stats, as PyTorch") {
  check_cases({"batch_norm_train_x", "batch_norm_eval_x", "batch_norm_eval_running", "batch_norm_train_gy",
               "instance_norm_x"});
}

TEST_CASE("nonfinite: relu, leaky_relu float32 [10], NaN/inf in x and dy, as PyTorch (relu passes dy at a NaN)") {
  check_cases({"relu", "leaky_relu_0.01"});
}

TEST_CASE("nonfinite: max_pool3d float32 (1,2,4,4,4) k2 s2 and (1,1,4,4,4) k3 s1: NaN wins, the last NaN gets dy") {
  check_cases({"max_pool3d_k2_s2", "max_pool3d_k3_s1"});
}

TEST_CASE("nonfinite: softmax / log_softmax float32 (2,3,2,2,3) dim 1 with NaN, +inf, all -inf, as PyTorch") {
  check_cases({"softmax_dim1", "log_softmax_dim1"});
}

TEST_CASE("nonfinite: cross_entropy, dice, their sum float32 (2,3,2,2,3) with NaN/+inf/-inf logits, as PyTorch") {
  check_cases({"cross_entropy_all", "dice_loss_all", "unet_loss_all", "cross_entropy_neg_inf_other_class",
               "dice_loss_neg_inf_other_class", "unet_loss_neg_inf_other_class", "cross_entropy_neg_inf_target",
               "dice_loss_neg_inf_target", "unet_loss_neg_inf_target"});
}

TEST_CASE("nonfinite: sum / mean float32 (2,3,4) with NaN, inf - inf, overflow; argmax (5,4) picks the first NaN") {
  check_cases({"sum_all", "sum_dims_2", "mean_dims_0_2", "sum_dims_2_gy", "sum_overflow", "argmax_dim1"});
}

TEST_CASE("nonfinite: matmul (4,5)x(5,3) and linear float32 with NaN/inf inputs, as PyTorch") {
  check_cases({"matmul_a", "linear_x"});
}

TEST_CASE("nonfinite: add, sub, mul, div, exp, log, pow float32: inf - inf, inf * 0, x / 0, log 0, pow 0, as PyTorch") {
  check_cases({"add", "sub", "mul", "div", "exp", "log", "pow_2", "pow_0"});
}

TEST_CASE("nonfinite: sigmoid, tanh, silu, gelu (erf and tanh) float32 [10], NaN/inf in x and dy, as PyTorch") {
  check_cases({"sigmoid", "tanh", "silu", "gelu", "gelu_tanh"});
}

TEST_CASE("nonfinite: sqrt float32 [8] (sqrt 0: dx inf; sqrt -1: NaN) and clamp (NaN passes through), as PyTorch") {
  check_cases({"sqrt", "clamp_-1_2", "clamp_min_0"});
}

TEST_CASE("nonfinite: mse_loss, l1_loss, bce_with_logits float32 with NaN/inf input and target, none and mean, as PyTorch") {
  check_cases({"mse_loss_none", "mse_loss_mean", "l1_loss_none", "l1_loss_mean", "bce_with_logits_none",
               "bce_with_logits_mean"});
}

TEST_CASE("nonfinite: layer_norm (2,3,4) and group_norm (2,4,2,2,3) float32, NaN/inf in x, as PyTorch") {
  check_cases({"layer_norm_x", "group_norm_x"});
}

TEST_CASE("nonfinite: avg_pool3d, adaptive_avg_pool3d, upsample nearest/trilinear float32 with NaN/inf, as PyTorch") {
  check_cases({"avg_pool3d_k2_s2", "avg_pool3d_k3_s1_p1", "adaptive_avg_pool3d_3x2x1", "upsample_nearest3d",
               "upsample_trilinear3d_align0", "upsample_trilinear3d_align1"});
}

TEST_CASE("nonfinite: cast float32 -> float16 [12] keeps NaN and inf, overflows to inf at 65520, as PyTorch") {
  check_case("cast_float16", {0, 0});  // exact
  // The bits too: a NaN stays a quiet NaN in half, and a NaN whose payload sits only in the low float
  // mantissa bits does not become inf (dropping those bits would leave the exponent of inf).
  const float low_payload_nan = [] {
    const uint32_t bits = 0x7f800001u;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }();
  const Tensor h = Tensor::from_vector(std::vector<float>{kNaN, low_payload_nan, -kNaN, kInf, -kInf}, {5}).to(kFloat16);
  const uint16_t* b = h.data<uint16_t>();
  for (int i = 0; i < 3; ++i) CHECK_MESSAGE(((b[i] & 0x7c00u) == 0x7c00u && (b[i] & 0x3ffu) != 0), "element " << i);
  CHECK(b[3] == 0x7c00u);
  CHECK(b[4] == 0xfc00u);
}

// The reference the CUDA twin (tests/cuda/nonfinite_cuda_test.cpp) compares float16 against: the CPU
// ops on the float16-rounded inputs must put NaN and inf exactly where they do in float32 (where
// PyTorch puts them, above); finite values agree to float16's precision.
TEST_CASE("nonfinite: every op case in float16 on the CPU has its NaN/inf where float32 has them") {
  const testing::GoldenFile f = load_golden("nonfinite.json");
  for (const std::string& name : f.case_names()) {
    const GoldenCase c = f.at(name);
    if (c.op() == "optim" || c.op() == "clip_grad_norm" || c.op() == "cast") continue;
    CAPTURE(name);
    const NonfiniteResult r32 = run_nonfinite_case(c, NonfiniteConfig{});
    const NonfiniteResult r16 = run_nonfinite_case(c, NonfiniteConfig{Device::CPU, kFloat16});
    for (const auto& [k, v] : r32.outputs) check_same_nonfinite(r16.outputs.at(k), v, 5e-2, 5e-2, name + " f16 " + k);
    for (const auto& [k, v] : r32.grads) check_same_nonfinite(r16.grads.at(k), v, 5e-2, 5e-2, name + " f16 d" + k);
  }
}

// One parameter (6), grad g1 with a NaN at 1 and +inf at 4, a step, then a finite g2 and a step:
// PyTorch leaves NaN in p[1] and p[4] for AdamW (inf / inf in the update), NaN / -inf for SGD.
void check_optim_case(const std::string& name, optim::Optimizer& opt, Tensor& p) {
  const GoldenCase c = load_golden("nonfinite.json").at(name);
  INFO(c.where());
  for (const char* step : {"g1", "g2"}) {
    p.set_grad(c.input(step));
    opt.step();
    const std::string out = std::string("p_step") + (step[1] == '1' ? "1" : "2");
    check_close(p, c.output(out), 1e-6, 1e-5, c.where() + " " + out);
  }
}

TEST_CASE("nonfinite: AdamW and SGD (momentum 0.9 and none) float32 [6], a NaN and an inf grad, as PyTorch") {
  const GoldenCase c = load_golden("nonfinite.json").at("optim_adamw");
  SUBCASE("adamw") {
    Tensor p = c.input("p").set_requires_grad(true);
    optim::AdamW opt({p}, optim::AdamWOptions(1e-2).weight_decay(1e-2));
    check_optim_case("optim_adamw", opt, p);
  }
  SUBCASE("sgd momentum") {
    Tensor p = c.input("p").set_requires_grad(true);
    optim::SGD opt({p}, optim::SGDOptions(1e-2).momentum(0.9));
    check_optim_case("optim_sgd_momentum", opt, p);
  }
  SUBCASE("sgd") {
    Tensor p = c.input("p").set_requires_grad(true);
    optim::SGD opt({p}, optim::SGDOptions(1e-2));
    check_optim_case("optim_sgd", opt, p);
  }
}

TEST_CASE("nonfinite: clip_grad_norm_ float32 [5]+[4] with an inf or NaN grad: total inf/NaN, grads as PyTorch") {
  for (const char* name : {"clip_grad_norm_inf", "clip_grad_norm_nan"}) {
    CAPTURE(name);
    const GoldenCase c = load_golden("nonfinite.json").at(name);
    Tensor a = Tensor::zeros({5}).set_requires_grad(true), b = Tensor::zeros({4}).set_requires_grad(true);
    a.set_grad(c.input("ga"));
    b.set_grad(c.input("gb"));
    const double total = optim::clip_grad_norm_({a, b}, 1.0, 2.0, /*error_if_nonfinite=*/false);
    check_close(Tensor::scalar(total, kFloat32), c.output("total"), 0, 0, c.where() + " total");
    check_close(a.grad(), c.output("ga"), 1e-6, 1e-5, c.where() + " ga");
    check_close(b.grad(), c.output("gb"), 1e-6, 1e-5, c.where() + " gb");
  }
}

// The user's report, by hand: with the running statistics a NaN channel must not come out with
// variance 0 (std::max(0.0, NaN) is 0.0) nor its running variance drift towards 0.9, and a {+inf, 5}
// channel has mean +inf (sum / M), as PyTorch, not NaN (a shift by its first value, inf - inf).
TEST_CASE("nonfinite: batch_norm float32 (1,3,2) channels {NaN,5}, {+inf,5}, {1,2}: running stats NaN / +inf / finite") {
  Tensor x = Tensor::from_vector(std::vector<float>{kNaN, 5, kInf, 5, 1, 2}, {1, 3, 2});
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  const Tensor y = ops::batch_norm(x, rm, rv, Tensor(), Tensor());
  const std::vector<float> m = rm.to_float_vector(), v = rv.to_float_vector(), yv = y.to_float_vector();
  CHECK(std::isnan(m[0]));
  CHECK(std::isnan(v[0]));  // was 0.9: (1 - 0.1) * 1 + 0.1 * 0
  CHECK(m[1] == kInf);      // 0.1 * mean, mean = +inf
  CHECK(std::isnan(v[1]));  // var = NaN (inf - inf), as PyTorch's two-pass variance
  CHECK(m[2] == doctest::Approx(0.15));
  CHECK(v[2] == doctest::Approx(0.9 + 0.1 * 0.5));
  for (int i = 0; i < 4; ++i) CHECK(std::isnan(yv[i]));
  CHECK(yv[4] == doctest::Approx(-1.0).epsilon(1e-4));
  // Evaluation with those statistics: channels 0 and 1 are NaN throughout, channel 2 finite.
  const Tensor ye = ops::batch_norm(Tensor::ones({1, 3, 2}), rm, rv, Tensor(), Tensor(), ops::BatchNormParams().training(false));
  const std::vector<float> e = ye.to_float_vector();
  for (int i = 0; i < 4; ++i) CHECK(std::isnan(e[i]));
  CHECK(std::isfinite(e[4]));
}

// GradScaler must see a NaN that a real backward produced (here: an inf in the data reaching a conv
// and a batch_norm), skip the AdamW step, leave the weights bit-identical and halve the scale.
TEST_CASE("nonfinite: GradScaler + AdamW skip the step when an inf input makes the conv3d/batch_norm grads NaN") {
  Generator gen(7);
  Tensor w = Tensor::randn({2, 1, 3, 3, 3}, gen, kFloat32, 0.3).set_requires_grad(true);
  Tensor x = Tensor::randn({1, 1, 4, 4, 4}, gen);
  x.data<float>()[21] = kInf;
  optim::AdamW opt({w}, optim::AdamWOptions(1e-3));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0));
  const Tensor before = w.clone();
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  Tensor loss = ops::sum(ops::batch_norm(ops::conv3d(x, w, Tensor(), ops::Conv3dParams().padding(1)), rm, rv,
                                         Tensor(), Tensor()));
  scaler.scale(loss).backward();
  CHECK(std::isnan(w.grad().to_float_vector()[0]));
  CHECK(!scaler.step(opt));
  scaler.update();
  CHECK(scaler.found_inf());
  CHECK(scaler.get_scale() == 512.0);
  CHECK(std::memcmp(before.raw_data(), w.raw_data(), before.nbytes()) == 0);
}

}  // namespace
}  // namespace halfgrad
