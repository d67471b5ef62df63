// avg_pool3d, adaptive_avg_pool3d, upsample_nearest3d and upsample_trilinear3d (ops/pool/): float64
// gradchecks, PyTorch golden values in float32 and float64 (tests/golden/pool.json, from
// `/usr/bin/python3 tools/golden/make_golden.py pool`, torch 1.13), float16 against float32, the
// autocast dtypes of their rows, the bins and coordinate rules on hand-checked values, and errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/pool/avg_pool3d.h"
#include "ops/pool/upsample.h"
#include "tests/check_error.h"
#include "tests/golden.h"
#include "tests/ops/pool_cases.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

struct MapOp {
  const char* name;
  Shape x;
  std::function<Tensor(const Tensor&)> f;
};

const std::vector<MapOp>& map_ops() {
  static const std::vector<MapOp> ops_ = {
      {"avg_pool3d k2", {1, 2, 4, 4, 6}, [](const Tensor& x) { return ops::avg_pool3d(x, 2); }},
      {"avg_pool3d k3 s2 p1", {1, 2, 5, 6, 5}, [](const Tensor& x) { return ops::avg_pool3d(x, 3, 2, 1); }},
      {"avg_pool3d k3 s2 p1 no pad, ceil", {1, 1, 6, 5, 4},
       [](const Tensor& x) { return ops::avg_pool3d(x, 3, 2, 1, true, false); }},
      {"avg_pool3d k(1,2,2) divisor 3", {1, 2, 2, 4, 4},
       [](const Tensor& x) { return ops::avg_pool3d(x, {1, 2, 2}, {1, 2, 2}, 0, false, true, 3); }},
      {"adaptive_avg_pool3d (2, 3, 4)", {1, 2, 5, 7, 9}, [](const Tensor& x) { return ops::adaptive_avg_pool3d(x, {2, 3, 4}); }},
      {"adaptive_avg_pool3d global", {2, 2, 3, 4, 5}, [](const Tensor& x) { return ops::adaptive_avg_pool3d(x, 1); }},
      {"upsample_nearest3d x2", {1, 2, 2, 3, 2}, [](const Tensor& x) { return ops::upsample_nearest3d(x, {4, 6, 4}, {2, 2, 2}); }},
      {"upsample_nearest3d to (5, 4, 3)", {1, 1, 3, 3, 4}, [](const Tensor& x) { return ops::upsample_nearest3d(x, {5, 4, 3}); }},
      {"upsample_trilinear3d x2", {1, 2, 2, 3, 3},
       [](const Tensor& x) { return ops::upsample_trilinear3d(x, {4, 6, 6}, false, {2, 2, 2}); }},
      {"upsample_trilinear3d align_corners to (5, 4, 7)", {1, 1, 3, 3, 4},
       [](const Tensor& x) { return ops::upsample_trilinear3d(x, {5, 4, 7}, true); }},
  };
  return ops_;
}

}  // namespace

TEST_CASE("ops: avg_pool3d / adaptive_avg_pool3d / upsample float64 NCDHW gradcheck") {
  for (const MapOp& op : map_ops()) {
    SUBCASE(op.name) {
      Generator g(41);
      Tensor x = leaf(Tensor::randn(op.x, g, kFloat64));
      auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return op.f(in[0]); }, {x});
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: avg_pool3d / adaptive_avg_pool3d / upsample float32 / float64 NCDHW match PyTorch (pool.json)") {
  const GoldenFile file = load_golden("pool.json");
  int checked = 0;
  for (const std::string& name : file.case_names()) {
    if (file.at(name).op() == "max_pool3d") continue;  // tests/ops/max_pool3d_test.cpp
    ++checked;
    SUBCASE(name.c_str()) {
      const GoldenCase c = file.at(name);
      const Dtype dt = golden_dtype(c.params().at("dtype").get<std::string>());
      Tensor x = leaf(c.input("x", dt));
      Tensor y = run_pool_case(c, x);
      CHECK(y.dtype() == dt);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
      check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
    }
  }
  CHECK(checked == 26);
}

TEST_CASE("ops: adaptive_avg_pool3d float32 [1, 1, 1, 1, 5] -> 3 uses PyTorch's overlapping bins") {
  // W = 5 -> 3: bins [0, 2), [1, 4), [3, 5) (start floor(i 5 / 3), end ceil((i + 1) 5 / 3)).
  Tensor x = leaf(Tensor::from_vector(std::vector<float>{1, 2, 4, 8, 16}, {1, 1, 1, 1, 5}));
  Tensor y = ops::adaptive_avg_pool3d(x, {1, 1, 3});
  const std::vector<float> v = y.to_float_vector();
  CHECK(v[0] == doctest::Approx(1.5));
  CHECK(v[1] == doctest::Approx(14.0 / 3));
  CHECK(v[2] == doctest::Approx(12.0));
  y.backward(Tensor::ones(y.shape()));
  const std::vector<float> dx = x.grad().to_float_vector();
  CHECK(dx[1] == doctest::Approx(0.5 + 1.0 / 3));  // in the first two bins
  CHECK(dx[4] == doctest::Approx(0.5));
}

TEST_CASE("ops: avg_pool3d float32 [1, 1, 1, 1, 4] k3 s2 p1: count_include_pad divides by 3, else by the real count") {
  Tensor x = Tensor::from_vector(std::vector<float>{3, 6, 9, 12}, {1, 1, 1, 1, 4});
  // Windows over W: [-1, 2) and [1, 4): sums 9 and 27.
  const std::vector<float> with_pad = ops::avg_pool3d(x, {1, 1, 3}, {1, 1, 2}, {0, 0, 1}).to_float_vector();
  const std::vector<float> without = ops::avg_pool3d(x, {1, 1, 3}, {1, 1, 2}, {0, 0, 1}, false, false).to_float_vector();
  REQUIRE(with_pad.size() == 2);
  CHECK(with_pad[0] == doctest::Approx(3.0));
  CHECK(with_pad[1] == doctest::Approx(9.0));
  CHECK(without[0] == doctest::Approx(4.5));
  CHECK(without[1] == doctest::Approx(9.0));
}

TEST_CASE("ops: upsample float32 [1, 1, 1, 1, 2] -> 4 along W: nearest repeats, trilinear follows both corner rules") {
  Tensor x = Tensor::from_vector(std::vector<float>{0, 8}, {1, 1, 1, 1, 2});
  CHECK(ops::upsample_nearest3d(x, {1, 1, 4}).to_float_vector() == std::vector<float>{0, 0, 8, 8});
  // align_corners false: src = (o + 0.5) / 2 - 0.5 clamped at 0 -> 0, 0.25, 0.75, 1 (index 1 is the last).
  CHECK(ops::upsample_trilinear3d(x, {1, 1, 4}, false).to_float_vector() == std::vector<float>{0, 2, 6, 8});
  // align_corners true: src = o (2 - 1) / (4 - 1) -> 0, 1/3, 2/3, 1.
  const std::vector<float> ac = ops::upsample_trilinear3d(x, {1, 1, 4}, true).to_float_vector();
  CHECK(ac[1] == doctest::Approx(8.0 / 3));
  CHECK(ac[3] == 8.0f);
}

TEST_CASE("ops: avg_pool3d / adaptive / upsample float16 NCDHW [2, 3, 4, 6, 5] equal float32 on the same values") {
  Generator g(7);
  const Tensor x32 = Tensor::randn({2, 3, 4, 6, 5}, g).cast_copy(kFloat16).cast_copy(kFloat32);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> fs = {
      {"avg", [](const Tensor& x) { return ops::avg_pool3d(x, 3, 2, 1); }},
      {"adaptive", [](const Tensor& x) { return ops::adaptive_avg_pool3d(x, {3, 2, 2}); }},
      {"nearest", [](const Tensor& x) { return ops::upsample_nearest3d(x, {8, 12, 10}); }},
      {"trilinear", [](const Tensor& x) { return ops::upsample_trilinear3d(x, {8, 12, 10}, false); }},
  };
  for (const auto& [name, f] : fs) {
    SUBCASE(name) {
      Tensor xr = leaf(x32.clone()), x16 = leaf(x32.cast_copy(kFloat16));
      Tensor yr = f(xr), y16 = f(x16);
      CHECK(y16.dtype() == kFloat16);
      const Tensor gy = Tensor::randn(yr.shape(), g).cast_copy(kFloat16).cast_copy(kFloat32);
      yr.backward(gy);
      y16.backward(gy.cast_copy(kFloat16));
      CHECK(x16.grad().dtype() == kFloat16);
      // FP32 sums rounded once to FP16: within half an FP16 ulp of the FP32 result.
      check_close(y16, yr, 1e-3, 1e-3, "y");
      check_close(x16.grad(), xr.grad(), 1e-3, 1e-3, "dx");
    }
  }
}

TEST_CASE("ops: autocast rows: upsample runs float16 input in float32, the pools keep float16") {
  Generator g(8);
  const Tensor x = Tensor::randn({1, 2, 2, 2, 2}, g, kFloat16);
  amp::AutocastGuard guard;
  CHECK(amp::default_policy(amp::OpKind::Upsample) == amp::CastPolicy::Fp32);
  CHECK(ops::upsample_trilinear3d(x, 4, false).dtype() == kFloat32);
  CHECK(ops::upsample_nearest3d(x, 4).dtype() == kFloat32);
  CHECK(amp::default_policy(amp::OpKind::AvgPool3d) == amp::CastPolicy::None);
  CHECK(amp::default_policy(amp::OpKind::AdaptiveAvgPool3d) == amp::CastPolicy::None);
  CHECK(ops::avg_pool3d(x, 2).dtype() == kFloat16);
  CHECK(ops::adaptive_avg_pool3d(x, 1).dtype() == kFloat16);
}

TEST_CASE("ops: avg_pool3d / adaptive_avg_pool3d / upsample errors name the op and what was expected") {
  const Tensor x = Tensor::zeros({1, 2, 4, 4, 4});
  check_error([&] { ops::avg_pool3d(Tensor::zeros({2, 4, 4, 4}), 2); }, {"avg_pool3d", "5-D", "[2, 4, 4, 4]"});
  check_error([&] { ops::avg_pool3d(x, 0); }, {"avg_pool3d", "kernel_size", ">= 1"});
  check_error([&] { ops::avg_pool3d(x, 2, 1, 2); }, {"avg_pool3d", "padding", "kernel_size / 2"});
  check_error([&] { ops::avg_pool3d(x, 5); }, {"avg_pool3d", "larger than", "[1, 2, 4, 4, 4]"});
  check_error([&] { ops::avg_pool3d(x, 2, 2, 0, false, true, 0); }, {"avg_pool3d", "divisor_override", "> 0"});
  check_error([&] { ops::adaptive_avg_pool3d(x, {2, 0, 2}); }, {"adaptive_avg_pool3d", "output_size", "(2, 0, 2)"});
  check_error([&] { ops::upsample_nearest3d(x, {8, 8, 0}); }, {"upsample_nearest3d", "output size", ">= 1"});
  check_error([&] { ops::upsample_trilinear3d(x, 8, false, {2, 2}); }, {"upsample_trilinear3d", "scales", "3 values"});
  check_error([&] { ops::upsample_trilinear3d(x, 8, false, {2, -2, 2}); }, {"upsample_trilinear3d", "> 0"});
  check_error([&] { ops::upsample_output_size("upsample", x.shape(), {0.1, 1, 1}); },
              {"upsample", "output extent 0", "[1, 2, 4, 4, 4]"});
}
