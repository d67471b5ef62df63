// batch_norm and instance_norm: gradchecks (float64), PyTorch golden values (tests/golden/norm.json,
// from `/usr/bin/python3 tools/golden/make_golden.py`), float16 / autocast dtypes, the piece-split
// and shifted-variance paths, and the errors of ops/norm/norm.h.
#include <doctest/doctest.h>

#include <cmath>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

// PyTorch-style reference in double: y and the running-stat update for batch_norm in training mode.
std::vector<double> reference_norm(const Tensor& x, bool per_sample, double eps) {
  const Shape& s = x.shape();
  const int64_t N = s[0], C = s[1], S = x.numel() / (N * C);
  const std::vector<double> v = x.to_double_vector();
  std::vector<double> y(v.size());
  const int64_t G = per_sample ? N * C : C;
  for (int64_t g = 0; g < G; ++g) {
    std::vector<int64_t> chunks;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        if ((per_sample ? n * C + c : c) == g) chunks.push_back(n * C + c);
    double m = 0, q = 0;
    for (int64_t k : chunks)
      for (int64_t i = 0; i < S; ++i) m += v[k * S + i];
    m /= static_cast<double>(chunks.size() * S);
    for (int64_t k : chunks)
      for (int64_t i = 0; i < S; ++i) q += (v[k * S + i] - m) * (v[k * S + i] - m);
    const double inv = 1.0 / std::sqrt(q / static_cast<double>(chunks.size() * S) + eps);
    for (int64_t k : chunks)
      for (int64_t i = 0; i < S; ++i) y[k * S + i] = (v[k * S + i] - m) * inv;
  }
  return y;
}

}  // namespace

TEST_CASE("ops: batch_norm float64 gradcheck x, weight, bias") {
  Generator g(11);
  for (const Shape& shape : {Shape{2, 3, 2, 3, 2}, Shape{5, 3}}) {
    SUBCASE(("training " + shape_str(shape)).c_str()) {
      Tensor x = leaf(Tensor::randn(shape, g, kFloat64, 1.5));
      Tensor w = leaf(Tensor::uniform({3}, 0.5, 1.5, g, kFloat64));
      Tensor b = leaf(Tensor::randn({3}, g, kFloat64));
      auto r = autograd::gradcheck(
          [](const std::vector<Tensor>& in) { return ops::batch_norm(in[0], Tensor(), Tensor(), in[1], in[2]); },
          {x, w, b});
      CHECK_MESSAGE(r.ok, r.report);
    }
    SUBCASE(("training, no affine, running stats " + shape_str(shape)).c_str()) {
      Tensor x = leaf(Tensor::randn(shape, g, kFloat64, 1.5));
      Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
      auto r = autograd::gradcheck(
          [&](const std::vector<Tensor>& in) { return ops::batch_norm(in[0], rm, rv, Tensor(), Tensor()); }, {x});
      CHECK_MESSAGE(r.ok, r.report);
    }
    SUBCASE(("evaluation " + shape_str(shape)).c_str()) {
      Tensor x = leaf(Tensor::randn(shape, g, kFloat64, 1.5));
      Tensor w = leaf(Tensor::uniform({3}, 0.5, 1.5, g, kFloat64));
      Tensor b = leaf(Tensor::randn({3}, g, kFloat64));
      Tensor rm = Tensor::from_vector(std::vector<float>{0.1f, -0.2f, 0.3f}, {3});
      Tensor rv = Tensor::from_vector(std::vector<float>{0.5f, 1.5f, 2.0f}, {3});
      auto r = autograd::gradcheck(
          [&](const std::vector<Tensor>& in) {
            return ops::batch_norm(in[0], rm, rv, in[1], in[2], ops::BatchNormParams().training(false));
          },
          {x, w, b});
      CHECK_MESSAGE(r.ok, r.report);
      // Only x requiring grad: the backward skips the dweight/dbias sums.
      auto rx = autograd::gradcheck(
          [&](const std::vector<Tensor>& in) {
            return ops::batch_norm(in[0], rm, rv, in[1], in[2], ops::BatchNormParams().training(false));
          },
          {x, w.detach(), b.detach()});
      CHECK_MESSAGE(rx.ok, rx.report);
    }
  }
}

TEST_CASE("ops: instance_norm float64 gradcheck (2, 3, 2, 3, 2), with and without affine") {
  Generator g(12);
  Tensor x = leaf(Tensor::randn({2, 3, 2, 3, 2}, g, kFloat64, 1.5));
  SUBCASE("affine") {
    Tensor w = leaf(Tensor::uniform({3}, 0.5, 1.5, g, kFloat64));
    Tensor b = leaf(Tensor::randn({3}, g, kFloat64));
    auto r = autograd::gradcheck(
        [](const std::vector<Tensor>& in) { return ops::instance_norm(in[0], in[1], in[2]); }, {x, w, b});
    CHECK_MESSAGE(r.ok, r.report);
  }
  SUBCASE("no affine") {
    auto r = autograd::gradcheck(
        [](const std::vector<Tensor>& in) { return ops::instance_norm(in[0], Tensor(), Tensor()); }, {x});
    CHECK_MESSAGE(r.ok, r.report);
  }
}

TEST_CASE("ops: batch_norm float32/float64 (2, 3, 3, 4, 5) matches PyTorch: y, dx, dweight, dbias, running stats") {
  for (const char* name : {"batch_norm_train", "batch_norm_train_f64", "batch_norm_eval", "batch_norm_eval_f64"}) {
    SUBCASE(name) {
      const GoldenCase c = load_golden("norm.json").at(name);
      const Dtype dt = c.param<std::string>("dtype") == "float64" ? kFloat64 : kFloat32;
      const Tolerance tol = tolerance_for(dt);
      Tensor x = leaf(c.input("x", dt)), w = leaf(c.input("weight", dt)), b = leaf(c.input("bias", dt));
      Tensor rm = c.input("running_mean", dt), rv = c.input("running_var", dt);
      Tensor y = ops::batch_norm(x, rm, rv, w, b, ops::BatchNormParams().training(c.param<bool>("training")));
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tol, c.where() + " y");
      check_close(rm, c.output("running_mean"), tol, c.where() + " running_mean");
      check_close(rv, c.output("running_var"), tol, c.where() + " running_var");
      check_close(x.grad(), c.grad("x"), tol, c.where() + " dx");
      check_close(w.grad(), c.grad("weight"), tol, c.where() + " dweight");
      check_close(b.grad(), c.grad("bias"), tol, c.where() + " dbias");
    }
  }
}

TEST_CASE("ops: instance_norm float32/float64 (2, 3, 3, 4, 5) matches PyTorch: y, dx, dweight, dbias") {
  for (const char* name : {"instance_norm_affine", "instance_norm_affine_f64", "instance_norm_noaffine"}) {
    SUBCASE(name) {
      const GoldenCase c = load_golden("norm.json").at(name);
      const Dtype dt = c.param<std::string>("dtype") == "float64" ? kFloat64 : kFloat32;
      const Tolerance tol = tolerance_for(dt);
      const bool affine = c.param<bool>("affine");
      Tensor x = leaf(c.input("x", dt));
      Tensor w = affine ? leaf(c.input("weight", dt)) : Tensor(), b = affine ? leaf(c.input("bias", dt)) : Tensor();
      Tensor y = ops::instance_norm(x, w, b);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tol, c.where() + " y");
      check_close(x.grad(), c.grad("x"), tol, c.where() + " dx");
      if (affine) {
        check_close(w.grad(), c.grad("weight"), tol, c.where() + " dweight");
        check_close(b.grad(), c.grad("bias"), tol, c.where() + " dbias");
      }
    }
  }
}

TEST_CASE("ops: batch_norm/instance_norm float32 (2, 2, 40, 30, 30): several pieces per chunk, mean 1000 >> std") {
  // 36000 values per (n, c): the FP64 partial sums of several pieces are combined; an offset of 1000
  // with std 0.5 would lose most digits of the variance in a naive float E[x^2] - E[x]^2.
  Generator g(13);
  Tensor x = Tensor::randn({2, 2, 40, 30, 30}, g, kFloat32, 0.5) + 1000.0;
  for (bool per_sample : {false, true}) {
    SUBCASE(per_sample ? "instance_norm" : "batch_norm") {
      Tensor y = per_sample ? ops::instance_norm(x, Tensor(), Tensor())
                            : ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor());
      const std::vector<double> ref = reference_norm(x, per_sample, 1e-5);
      check_close(y, Tensor::from_vector(ref, x.shape()), 2e-4, 1e-4, "normalised values");
    }
  }
}

TEST_CASE("ops: batch_norm/instance_norm float16 (2, 3, 3, 4, 5): FP16 output under autocast and outside (PyTorch's policy)") {
  const GoldenCase c = load_golden("norm.json").at("batch_norm_train");
  Tensor x32 = c.input("x"), w = c.input("weight"), b = c.input("bias");
  Tensor x16 = x32.cast_copy(kFloat16);
  const Tensor ref = ops::batch_norm(x16.cast_copy(kFloat32), Tensor(), Tensor(), w, b);
  const Tensor ref_in = ops::instance_norm(x16.cast_copy(kFloat32), w, b);
  SUBCASE("autocast") {
    amp::AutocastGuard ac;
    Tensor xh = x16.clone().set_requires_grad(true);
    Tensor rm = c.input("running_mean"), rv = c.input("running_var");
    Tensor y = ops::batch_norm(xh, rm, rv, w, b);
    CHECK(y.dtype() == kFloat16);
    check_close(y, ref, tolerance_for(kFloat16), "batch_norm autocast y");
    CHECK(rm.dtype() == kFloat32);
    check_close(rm, c.output("running_mean"), tolerance_for(kFloat16), "running_mean from the FP16 input");
    check_close(rv, c.output("running_var"), tolerance_for(kFloat16), "running_var from the FP16 input");
    y.backward(c.input("gy"));
    CHECK(xh.grad().dtype() == kFloat16);
    Tensor yi = ops::instance_norm(x16, w, b);
    CHECK(yi.dtype() == kFloat16);
    check_close(yi, ref_in, tolerance_for(kFloat16), "instance_norm autocast y");
  }
  SUBCASE("no autocast") {
    Tensor y = ops::batch_norm(x16, Tensor(), Tensor(), w, b);
    CHECK(y.dtype() == kFloat16);
    check_close(y, ref, tolerance_for(kFloat16), "batch_norm fp16 y");
    Tensor yi = ops::instance_norm(x16, w, b);
    CHECK(yi.dtype() == kFloat16);
    check_close(yi, ref_in, tolerance_for(kFloat16), "instance_norm fp16 y");
  }
}

TEST_CASE("ops: batch_norm/instance_norm bad inputs name the op and the shapes") {
  Tensor x = Tensor::zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(ops::batch_norm(Tensor::zeros({3}), Tensor(), Tensor(), Tensor(), Tensor()),
                       doctest::Contains("batch_norm: input must be (N, C, *spatial) with at least 2 dims, got shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::batch_norm(x, Tensor(), Tensor(), Tensor::ones({4}), Tensor()),
                       doctest::Contains("batch_norm: weight has shape [4] but input [2, 3, 4] has 3 channels"), Error);
  CHECK_THROWS_WITH_AS(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor::ones({2})),
                       doctest::Contains("batch_norm: bias has shape [2]"), Error);
  CHECK_THROWS_WITH_AS(ops::batch_norm(x, Tensor::zeros({3, 1}), Tensor::ones({3}), Tensor(), Tensor()),
                       doctest::Contains("batch_norm: running_mean has shape [3, 1]"), Error);
  CHECK_THROWS_WITH_AS(ops::batch_norm(x, Tensor::zeros({3}), Tensor::ones({5}), Tensor(), Tensor()),
                       doctest::Contains("batch_norm: running_var has shape [5]"), Error);
  Tensor rm = Tensor::full({3}, 0.5), rv = Tensor::full({3}, 2.0);
  CHECK_THROWS_WITH_AS(ops::batch_norm(Tensor::zeros({1, 3, 1, 1, 1}), rm, rv, Tensor(), Tensor()),
                       doctest::Contains("batch_norm: expected more than 1 value per channel when training, got input "
                                         "of shape [1, 3, 1, 1, 1]"),
                       Error);
  CHECK(rm.to_float_vector() == std::vector<float>{0.5f, 0.5f, 0.5f});  // nothing modified before the throw
  CHECK(rv.to_float_vector() == std::vector<float>{2.0f, 2.0f, 2.0f});
  CHECK_NOTHROW(ops::batch_norm(Tensor::zeros({1, 3, 1, 1, 1}), rm, rv, Tensor(), Tensor(),
                                ops::BatchNormParams().training(false)));
  CHECK_THROWS_WITH_AS(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), ops::BatchNormParams().training(false)),
                       doctest::Contains("batch_norm: evaluation mode needs running_mean and running_var"), Error);
  CHECK_THROWS_WITH_AS(ops::batch_norm(Tensor::from_labels({1, 2}, {1, 2}), Tensor(), Tensor(), Tensor(), Tensor()),
                       doctest::Contains("batch_norm: input must be a floating-point tensor, got int64"), Error);
  CHECK_THROWS_WITH_AS(ops::instance_norm(Tensor::zeros({2, 3, 1, 1}), Tensor(), Tensor()),
                       doctest::Contains("instance_norm: expected more than 1 spatial element per (sample, channel), "
                                         "got input of shape [2, 3, 1, 1]"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::instance_norm(x, Tensor::ones({2}), Tensor()),
                       doctest::Contains("instance_norm: weight has shape [2] but input [2, 3, 4] has 3 channels"),
                       Error);
}
