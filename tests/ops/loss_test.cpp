// cross_entropy, soft_dice_loss, segmentation_loss: gradchecks (float64), PyTorch golden values
// (tests/golden/loss.json, from `/usr/bin/python3 tools/golden/make_golden.py`; loss_fn of
// shared/reference/torch_unet_step.py), the fused kernels against the same losses composed from
// halfgrad ops on a volume of several tiles, float16 / autocast dtypes, and bad targets.
#include <doctest/doctest.h>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

Tensor random_labels(const Shape& s, int64_t C, Generator& g) {
  std::vector<int64_t> v(shape_numel(s));
  for (auto& t : v) t = g.randint(C);
  return Tensor::from_labels(v, s);
}

// The loss of loss.h written with unfused halfgrad ops (logits (N, C, D, H, W)).
Tensor composed_loss(const std::string& which, const Tensor& x, const Tensor& t) {
  const int64_t C = x.shape()[1];
  Tensor oh = ops::one_hot(t, C, x.dtype());
  Tensor ce = -ops::mean(ops::sum(ops::log_softmax(x, 1) * oh, {1}));
  Tensor p = ops::softmax(x, 1);
  Tensor inter = ops::sum(p * oh, {0, 2, 3, 4});
  Tensor den = ops::sum(p, {0, 2, 3, 4}) + ops::sum(oh, {0, 2, 3, 4});
  Tensor dice = 1.0 - ops::mean((2.0 * inter + 1e-5) / (den + 1e-5));
  if (which == "cross_entropy") return ce;
  if (which == "soft_dice_loss") return dice;
  return ce + dice;
}

Tensor fused_loss(const std::string& which, const Tensor& x, const Tensor& t) {
  if (which == "cross_entropy") return ops::cross_entropy(x, t);
  if (which == "soft_dice_loss") return ops::soft_dice_loss(x, t);
  return ops::segmentation_loss(x, t);
}

}  // namespace

TEST_CASE("ops: cross_entropy/soft_dice_loss/segmentation_loss float64 gradcheck (2, 3, 2, 3, 4) and (6, 4)") {
  Generator g(41);
  for (const Shape& shape : {Shape{2, 3, 2, 3, 4}, Shape{6, 4}}) {
    Shape ts = shape;
    ts.erase(ts.begin() + 1);
    for (const char* which : {"cross_entropy", "soft_dice_loss", "segmentation_loss"}) {
      SUBCASE((std::string(which) + " " + shape_str(shape)).c_str()) {
        Tensor x = leaf(Tensor::randn(shape, g, kFloat64, 2.0));
        Tensor t = random_labels(ts, shape[1], g);
        auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return fused_loss(which, in[0], t); }, {x});
        CHECK_MESSAGE(r.ok, r.report);
      }
    }
  }
}

TEST_CASE("ops: cross_entropy/dice/unet loss float32/float64 (2, 3, 3, 4, 5) match PyTorch: L, dlogits") {
  for (const char* name : {"cross_entropy", "cross_entropy_f64", "dice_loss", "dice_loss_f64", "unet_loss",
                           "unet_loss_f64", "cross_entropy_absent_class", "dice_loss_absent_class",
                           "unet_loss_absent_class"}) {
    SUBCASE(name) {
      const GoldenCase c = load_golden("loss.json").at(name);
      const Dtype dt = c.param<std::string>("dtype") == "float64" ? kFloat64 : kFloat32;
      Tensor x = leaf(c.input("logits", dt));
      Tensor t = c.input("target");
      const std::string op = c.op();
      Tensor y = op == "cross_entropy" ? ops::cross_entropy(x, t)
                 : op == "dice_loss"   ? ops::soft_dice_loss(x, t, c.param<double>("smooth"))
                                       : ops::segmentation_loss(x, t);
      CHECK(y.dim() == 0);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " L");
      check_close(x.grad(), c.grad("logits"), tolerance_for(dt), c.where() + " dlogits");
    }
  }
}

TEST_CASE("ops: fused losses match the composed ops, float64 (2, 3, 4, 9, 20): several tiles per sample") {
  Generator g(42);
  Tensor x0 = Tensor::randn({2, 3, 4, 9, 20}, g, kFloat64, 2.0);
  Tensor t = random_labels({2, 4, 9, 20}, 3, g);
  for (const char* which : {"cross_entropy", "soft_dice_loss", "segmentation_loss"}) {
    SUBCASE(which) {
      Tensor xa = leaf(x0.clone()), xb = leaf(x0.clone());
      Tensor la = fused_loss(which, xa, t), lb = composed_loss(which, xb, t);
      la.backward(Tensor::scalar(0.7, kFloat64));
      lb.backward(Tensor::scalar(0.7, kFloat64));
      check_close(la, lb, tolerance_for(kFloat64), "loss");
      check_close(xa.grad(), xb.grad(), tolerance_for(kFloat64), "dlogits");
    }
  }
}

TEST_CASE("ops: segmentation_loss float16 logits (2, 3, 3, 4, 5): FP32 under autocast, FP16 outside") {
  const GoldenCase c = load_golden("loss.json").at("unet_loss");
  Tensor x16 = c.input("logits").cast_copy(kFloat16);
  Tensor t = c.input("target");
  const Tensor ref = ops::segmentation_loss(x16.cast_copy(kFloat32), t);
  SUBCASE("autocast") {
    amp::AutocastGuard ac;
    Tensor xh = leaf(x16.clone());
    Tensor y = ops::segmentation_loss(xh, t);
    CHECK(y.dtype() == kFloat32);
    check_close(y, ref, tolerance_for(kFloat32), "loss from FP16 logits");
    check_close(y, c.output("y"), tolerance_for(kFloat16), "loss vs PyTorch FP32");
    y.backward(c.input("gy"));
    CHECK(xh.grad().dtype() == kFloat16);
    check_close(xh.grad(), c.grad("logits"), tolerance_for(kFloat16), "dlogits");
    CHECK(ops::cross_entropy(x16, t).dtype() == kFloat32);
    CHECK(ops::soft_dice_loss(x16, t).dtype() == kFloat32);
  }
  SUBCASE("no autocast") {
    Tensor y = ops::segmentation_loss(x16, t);
    CHECK(y.dtype() == kFloat16);
    check_close(y, ref, tolerance_for(kFloat16), "loss in FP16");
  }
}

TEST_CASE("ops: cross_entropy/soft_dice_loss/segmentation_loss bad inputs name the op, shapes and values") {
  Tensor x = Tensor::zeros({2, 3, 2, 2});
  std::vector<int64_t> labels(8, 1);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(Tensor::zeros({3}), Tensor::from_labels({0}, {1})),
                       doctest::Contains("cross_entropy: logits must be (N, C, *spatial) with at least 2 dims, got "
                                         "shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::soft_dice_loss(x, Tensor::from_labels(labels, {2, 4})),
                       doctest::Contains("soft_dice_loss: target has shape [2, 4] but logits [2, 3, 2, 2] need a "
                                         "target of shape [2, 2, 2]"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::segmentation_loss(x, Tensor::zeros({2, 2, 2})),
                       doctest::Contains("segmentation_loss: target must be int64 class indices, got float32"), Error);
  labels[6] = 3;  // position [1, 1, 0]
  CHECK_THROWS_WITH_AS(ops::cross_entropy(x, Tensor::from_labels(labels, {2, 2, 2})),
                       doctest::Contains("cross_entropy: target value 3 at position [1, 1, 0] of target [2, 2, 2] is "
                                         "outside [0, 3)"),
                       Error);
  labels[6] = 1;
  labels[1] = -100;  // PyTorch's ignore_index is not supported
  CHECK_THROWS_WITH_AS(ops::segmentation_loss(x, Tensor::from_labels(labels, {2, 2, 2})),
                       doctest::Contains("segmentation_loss: target value -100 at position [0, 0, 1]"), Error);
  CHECK_THROWS_WITH_AS(ops::soft_dice_loss(Tensor::from_labels(labels, {2, 2, 2}), Tensor::from_labels(labels, {2, 2, 2})),
                       doctest::Contains("soft_dice_loss: logits must be a floating-point tensor, got int64"), Error);
}
