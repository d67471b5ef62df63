// group_norm and layer_norm: float64 gradchecks, PyTorch golden values in float32 and float64
// (tests/golden/layers.json, from `/usr/bin/python3 tools/golden/make_golden_layers.py`, torch 1.13),
// the FP32 autocast policy, instance_norm == group_norm with G = C, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/norm/layer_norm.h"
#include "ops/norm/norm.h"
#include "tests/check_error.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
Tensor leaf(Tensor t) { return t.set_requires_grad(true); }
}  // namespace

TEST_CASE("ops: group_norm float64 gradcheck (2, 6, 2, 3), 3 groups, affine and not") {
  Generator g(7);
  Tensor x = leaf(Tensor::randn({2, 6, 2, 3}, g, kFloat64, 1.5));
  Tensor w = leaf(Tensor::uniform({6}, 0.5, 1.5, g, kFloat64));
  Tensor b = leaf(Tensor::randn({6}, g, kFloat64, 0.3));
  auto r = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 3, in[1], in[2]); },
                               {x, w, b});
  CHECK_MESSAGE(r.ok, r.report);
  auto r2 = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 2); }, {x});
  CHECK_MESSAGE(r2.ok, r2.report);
}

TEST_CASE("ops: group_norm float32 and float64 match PyTorch: y, dx, dweight, dbias (5-D, 4-D, 3-D, G = 1, G = C)") {
  for (const char* base : {"group_norm_affine", "group_norm_noaffine", "group_norm_3d_g1", "group_norm_instance"})
    for (const bool f64 : {false, true}) {
      const std::string name = std::string(base) + (f64 ? "_f64" : "");
      SUBCASE(name.c_str()) {
        const GoldenCase c = load_golden("layers.json").at(name);
        const Dtype dt = f64 ? kFloat64 : kFloat32;
        const bool affine = c.param<bool>("affine");
        Tensor x = leaf(c.input("x", dt));
        Tensor w = affine ? leaf(c.input("weight", dt)) : Tensor();
        Tensor b = affine ? leaf(c.input("bias", dt)) : Tensor();
        Tensor y = ops::group_norm(x, c.param<int64_t>("num_groups"), w, b, c.param<double>("eps"));
        CHECK(y.dtype() == dt);
        y.backward(c.input("gy", dt));
        check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
        check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
        if (affine) {
          check_close(w.grad(), c.grad("weight"), tolerance_for(dt), c.where() + " dweight");
          check_close(b.grad(), c.grad("bias"), tolerance_for(dt), c.where() + " dbias");
        }
      }
    }
}

TEST_CASE("ops: instance_norm is group_norm with one channel per group (float32 (2, 3, 4, 5), same bits)") {
  Generator g(3);
  const Tensor x = Tensor::randn({2, 3, 4, 5}, g), w = Tensor::uniform({3}, 0.5, 1.5, g), b = Tensor::randn({3}, g);
  CHECK(ops::instance_norm(x, w, b).to_float_vector() == ops::group_norm(x, 3, w, b).to_float_vector());
}

TEST_CASE("ops: group_norm float16 input: FP32 out under autocast (the FP32 list), float16 out outside") {
  const GoldenCase c = load_golden("layers.json").at("group_norm_affine");
  Tensor xh = leaf(c.input("x").cast_copy(kFloat16));
  const Tensor w = c.input("weight"), b = c.input("bias");
  {
    amp::AutocastGuard on;
    Tensor y = ops::group_norm(xh, 3, w, b);
    CHECK(y.dtype() == kFloat32);
    // The input was rounded to half: an FP16 tolerance on the normalised values.
    check_close(y, c.output("y"), tolerance_for(kFloat16), c.where() + " autocast y");
    y.backward(c.input("gy"));
    CHECK(xh.grad().dtype() == kFloat16);
    check_close(xh.grad(), c.grad("x"), tolerance_for(kFloat16), c.where() + " autocast dx");
  }
  CHECK(ops::group_norm(xh, 3, w, b).dtype() == kFloat16);
  CHECK(amp::default_policy(amp::OpKind::GroupNorm) == amp::CastPolicy::Fp32);
}

TEST_CASE("ops: group_norm errors name the op: C not divisible by num_groups, bad weight, 1-D input") {
  const Tensor x = Tensor::zeros({2, 6, 4});
  check_error([&] { ops::group_norm(x, 4); }, {"group_norm", "divisible by num_groups", "num_groups=4"});
  check_error([&] { ops::group_norm(x, 0); }, {"group_norm", "num_groups=0"});
  check_error([&] { ops::group_norm(x, 3, Tensor::ones({5})); }, {"group_norm", "weight", "[5]"});
  check_error([&] { ops::group_norm(Tensor::zeros({6}), 3); }, {"group_norm", "at least 2 dims"});
}

TEST_CASE("ops: layer_norm float64 gradcheck (3, 4, 5) over (4, 5), affine and not") {
  Generator g(11);
  Tensor x = leaf(Tensor::randn({3, 4, 5}, g, kFloat64, 1.5));
  Tensor w = leaf(Tensor::uniform({4, 5}, 0.5, 1.5, g, kFloat64));
  Tensor b = leaf(Tensor::randn({4, 5}, g, kFloat64, 0.3));
  auto r = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], {4, 5}, in[1], in[2]); },
                               {x, w, b});
  CHECK_MESSAGE(r.ok, r.report);
  auto r2 = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], {5}); }, {x});
  CHECK_MESSAGE(r2.ok, r2.report);
}

TEST_CASE("ops: layer_norm float32 and float64 match PyTorch: y, dx, dweight, dbias") {
  for (const char* base : {"layer_norm_affine", "layer_norm_noaffine", "layer_norm_5d_last3"})
    for (const bool f64 : {false, true}) {
      const std::string name = std::string(base) + (f64 ? "_f64" : "");
      SUBCASE(name.c_str()) {
        const GoldenCase c = load_golden("layers.json").at(name);
        const Dtype dt = f64 ? kFloat64 : kFloat32;
        const bool affine = c.param<bool>("elementwise_affine");
        const Shape ns = c.param<Shape>("normalized_shape");
        Tensor x = leaf(c.input("x", dt));
        Tensor w = affine ? leaf(c.input("weight", dt)) : Tensor();
        Tensor b = affine ? leaf(c.input("bias", dt)) : Tensor();
        Tensor y = ops::layer_norm(x, ns, w, b, c.param<double>("eps"));
        CHECK(y.dtype() == dt);
        y.backward(c.input("gy", dt));
        check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
        check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
        if (affine) {
          CHECK(w.grad().shape() == ns);
          check_close(w.grad(), c.grad("weight"), tolerance_for(dt), c.where() + " dweight");
          check_close(b.grad(), c.grad("bias"), tolerance_for(dt), c.where() + " dbias");
        }
      }
    }
}

TEST_CASE("ops: layer_norm float16 input: FP32 out under autocast (the FP32 list), float16 out outside") {
  const GoldenCase c = load_golden("layers.json").at("layer_norm_affine");
  Tensor xh = leaf(c.input("x").cast_copy(kFloat16));
  const Tensor w = c.input("weight"), b = c.input("bias");
  {
    amp::AutocastGuard on;
    Tensor y = ops::layer_norm(xh, {4, 5}, w, b);
    CHECK(y.dtype() == kFloat32);
    check_close(y, c.output("y"), tolerance_for(kFloat16), c.where() + " autocast y");
    y.backward(c.input("gy"));
    CHECK(xh.grad().dtype() == kFloat16);
    check_close(xh.grad(), c.grad("x"), tolerance_for(kFloat16), c.where() + " autocast dx");
  }
  CHECK(ops::layer_norm(xh, {4, 5}, w, b).dtype() == kFloat16);
  CHECK(amp::default_policy(amp::OpKind::LayerNorm) == amp::CastPolicy::Fp32);
}

TEST_CASE("ops: layer_norm errors: trailing dims not normalized_shape, weight of another shape, empty shape") {
  const Tensor x = Tensor::zeros({2, 3, 4});
  check_error([&] { ops::layer_norm(x, {3}); }, {"layer_norm", "normalized_shape=[3]", "[*, 3]", "[2, 3, 4]"});
  check_error([&] { ops::layer_norm(x, {2, 3, 4, 5}); }, {"layer_norm", "[2, 3, 4]"});
  check_error([&] { ops::layer_norm(x, {4}, Tensor::ones({3})); }, {"layer_norm", "weight", "[3]"});
  check_error([&] { ops::layer_norm(x, {}); }, {"layer_norm", "at least one dim"});
}

TEST_CASE("ops: layer_norm / group_norm float32: a NaN or inf makes its row / group NaN, the others stay finite") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector(std::vector<float>{1.f, inf, 2.f, 1.f, 2.f, 3.f, nan, 0.f, 4.f, 5.f, 6.f, 8.f},
                                       {4, 3});
  const std::vector<float> y = ops::layer_norm(x, {3}).to_float_vector();
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 3; ++k) {
      CAPTURE(r);
      CHECK(std::isnan(y[r * 3 + k]) == (r == 0 || r == 2));
    }
  // (2, 2, 3) in 2 groups of one channel: group (0, 0) holds the inf, group (1, 0) the NaN.
  const std::vector<float> g = ops::group_norm(x.view_as_shape({2, 2, 3}), 2).to_float_vector();
  for (int i = 0; i < 12; ++i) {
    CAPTURE(i);
    CHECK(std::isnan(g[i]) == (i / 3 == 0 || i / 3 == 2));
  }
}
