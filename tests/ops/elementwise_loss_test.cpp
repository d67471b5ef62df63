// mse_loss, l1_loss, binary_cross_entropy_with_logits: float64 gradchecks (input and target), PyTorch
// golden values for reduction mean / sum / none and BCE's weight and pos_weight (tests/golden/layers.json,
// from `/usr/bin/python3 tools/golden/make_golden_layers.py`, torch 1.13), BCE's stability for large
// logits, the FP32 autocast policy, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/loss/elementwise_loss.h"
#include "tests/check_error.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;
using ops::Reduction;

namespace {
Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

Reduction reduction_of(const std::string& r) {
  return r == "sum" ? Reduction::Sum : r == "none" ? Reduction::None : Reduction::Mean;
}

struct LossOp {
  const char* golden;  // case prefix in layers.json
  std::function<Tensor(const Tensor&, const Tensor&, Reduction)> f;
};
const LossOp kLosses[] = {
    {"mse_loss", [](const Tensor& x, const Tensor& t, Reduction r) { return ops::mse_loss(x, t, r); }},
    {"l1_loss", [](const Tensor& x, const Tensor& t, Reduction r) { return ops::l1_loss(x, t, r); }},
    {"bce_with_logits",
     [](const Tensor& x, const Tensor& t, Reduction r) { return ops::binary_cross_entropy_with_logits(x, t, {}, {}, r); }},
};
}  // namespace

TEST_CASE("ops: mse_loss / l1_loss / bce_with_logits float64 gradcheck (2, 3, 4) input and target, every reduction") {
  Generator g(17);
  Tensor x = leaf(Tensor::randn({2, 3, 4}, g, kFloat64, 2.0));
  Tensor t = leaf(Tensor::uniform({2, 3, 4}, 0.0, 1.0, g, kFloat64));
  for (const LossOp& op : kLosses)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      CAPTURE(op.golden);
      CAPTURE(static_cast<int>(r));
      auto res = autograd::gradcheck([&](const std::vector<Tensor>& in) { return op.f(in[0], in[1], r); }, {x, t});
      CHECK_MESSAGE(res.ok, res.report);
    }
  Tensor w = Tensor::uniform({1, 3, 1}, 0.5, 2.0, g, kFloat64), pw = Tensor::uniform({4}, 0.5, 3.0, g, kFloat64);
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return ops::binary_cross_entropy_with_logits(in[0], in[1], w, pw); }, {x, t});
  CHECK_MESSAGE(res.ok, res.report);
}

TEST_CASE("ops: mse_loss / l1_loss / bce_with_logits float32 and float64 (2, 3, 4, 5) match PyTorch: loss, dx, dtarget") {
  for (const LossOp& op : kLosses)
    for (const char* red : {"mean", "sum", "none"})
      for (const bool f64 : {false, true}) {
        const std::string name = std::string(op.golden) + "_" + red + (f64 ? "_f64" : "");
        SUBCASE(name.c_str()) {
          const GoldenCase c = load_golden("layers.json").at(name);
          const Dtype dt = f64 ? kFloat64 : kFloat32;
          Tensor x = leaf(c.input("x", dt)), t = leaf(c.input("target", dt));
          Tensor y = op.f(x, t, reduction_of(red));
          CHECK(y.dtype() == dt);
          CHECK(y.shape() == c.output("y").shape());
          y.backward(c.input("gy", dt));
          // A sum over 120 terms: a little more than one rounding in float32.
          const Tolerance tol = f64 ? tolerance_for(dt) : Tolerance{1e-5, 2e-4};
          check_close(y, c.output("y"), tol, c.where() + " loss");
          check_close(x.grad(), c.grad("x"), tol, c.where() + " dx");
          check_close(t.grad(), c.grad("target"), tol, c.where() + " dtarget");
        }
      }
}

TEST_CASE("ops: bce_with_logits with weight (1, 3, 1, 1) and pos_weight (5) matches PyTorch (float32, float64)") {
  for (const bool f64 : {false, true}) {
    SUBCASE(f64 ? "float64" : "float32") {
      const GoldenCase c = load_golden("layers.json").at(f64 ? "bce_with_logits_weights_f64" : "bce_with_logits_weights");
      const Dtype dt = f64 ? kFloat64 : kFloat32;
      Tensor x = leaf(c.input("x", dt)), t = leaf(c.input("target", dt));
      Tensor y = ops::binary_cross_entropy_with_logits(x, t, c.input("weight", dt), c.input("pos_weight", dt));
      y.backward(c.input("gy", dt));
      const Tolerance tol = f64 ? tolerance_for(dt) : Tolerance{1e-5, 2e-4};
      check_close(y, c.output("y"), tol, c.where() + " loss");
      check_close(x.grad(), c.grad("x"), tol, c.where() + " dx");
      check_close(t.grad(), c.grad("target"), tol, c.where() + " dtarget");
    }
  }
}

TEST_CASE("ops: bce_with_logits is exact for logits of +-100 and +-1e30 (float32), as the stable form") {
  Tensor x = leaf(Tensor::from_vector(std::vector<float>{100.f, -100.f, 1e30f, -1e30f}, {4}));
  const Tensor t = Tensor::from_vector(std::vector<float>{0.f, 1.f, 1.f, 0.f}, {4});
  Tensor l = ops::binary_cross_entropy_with_logits(x, t, {}, {}, Reduction::None);
  // log(1 + exp(100)) overflows float32 in the naive form; here l = 100, 100, 0, 0 exactly.
  CHECK(l.to_float_vector() == std::vector<float>{100.f, 100.f, 0.f, 0.f});
  l.backward(Tensor::ones({4}));
  const std::vector<float> g = x.grad().to_float_vector();
  CHECK(g[0] == 1.f);
  CHECK(g[1] == doctest::Approx(-1.f));
  CHECK(g[2] == 0.f);
  CHECK(g[3] == 0.f);
}

TEST_CASE("ops: losses under autocast: float16 input gives a float32 loss (the FP32 list); float16 stays float16 outside") {
  const GoldenCase c = load_golden("layers.json").at("mse_loss_mean");
  Tensor xh = leaf(c.input("x").cast_copy(kFloat16));
  const Tensor t = c.input("target");
  {
    amp::AutocastGuard on;
    for (const LossOp& op : kLosses) {
      CAPTURE(op.golden);
      CHECK(op.f(xh, t, Reduction::Mean).dtype() == kFloat32);
      CHECK(op.f(xh, t.cast_copy(kFloat16), Reduction::None).dtype() == kFloat32);
    }
    Tensor y = ops::mse_loss(xh, t);
    check_close(y, c.output("y"), tolerance_for(kFloat16), c.where() + " autocast loss");
    y.backward();
    CHECK(xh.grad().dtype() == kFloat16);
  }
  CHECK(ops::l1_loss(xh, t.cast_copy(kFloat16)).dtype() == kFloat16);
  for (amp::OpKind k : {amp::OpKind::MseLoss, amp::OpKind::L1Loss, amp::OpKind::BinaryCrossEntropyWithLogits}) {
    CHECK(amp::default_policy(k) == amp::CastPolicy::Fp32);
    CHECK(amp::op_record(k).inputs == amp::CastInputs::First);
  }
}

TEST_CASE("ops: elementwise losses: Mean of an empty input throws (no silent NaN), Sum is 0") {
  const Tensor x = Tensor::zeros({0, 3}), t = Tensor::zeros({0, 3});
  check_error([&] { ops::mse_loss(x, t); }, {"mean", "zero elements", "[0, 3]"});
  CHECK(ops::l1_loss(x, t, Reduction::Sum).item() == 0.0);
}

TEST_CASE("ops: elementwise loss errors name the op: target shape, weight broadcast, pos_weight with grad, int input") {
  const Tensor x = Tensor::zeros({2, 3}), t = Tensor::zeros({2, 3});
  check_error([&] { ops::mse_loss(x, Tensor::zeros({3})); }, {"mse_loss", "target", "[3]", "[2, 3]"});
  check_error([&] { ops::l1_loss(Tensor::from_labels({1, 2}, {2}), Tensor::zeros({2})); }, {"l1_loss", "floating"});
  check_error([&] { ops::binary_cross_entropy_with_logits(x, t, Tensor::ones({4})); },
              {"binary_cross_entropy_with_logits", "weight [4]", "broadcast", "[2, 3]"});
  Tensor pw = leaf(Tensor::ones({3}));
  check_error([&] { ops::binary_cross_entropy_with_logits(x, t, {}, pw); },
              {"binary_cross_entropy_with_logits", "pos_weight requires grad"});
}
