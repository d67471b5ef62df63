// group_norm_cuda_test.cpp - group_norm (ops/norm/norm_cuda.cu, shared with instance_norm) and
// layer_norm (ops/norm/layer_norm_cuda.cu) on CUDA against the CPU op in float64 on the same values:
// y, dx, dweight, dbias through backward(), float32 and float16, NCDHW and NDHWC, group sizes whose
// channels do and do not fill one 16-byte vector (a vector of 8 halfs spanning two groups of 4).
// Inputs have a mean of 3 and std 2, so a variance computed without a shift would lose digits.
#include <cmath>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "ops/norm/layer_norm.h"
#include "ops/norm/norm.h"
#include "tests/cuda/cuda_test.h"

namespace halfgrad {
namespace {

using testing::check_close;
using testing::rtol_for;
using testing::to_cuda;

Tensor random_values(const Shape& s, uint64_t seed, Dtype dt, double mean, double std) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& e : v) e = static_cast<float>(mean + std * g.normal());
  return Tensor::from_vector(v, s, dt);
}

const char* format_name(MemoryFormat f) { return f == MemoryFormat::ChannelsLast3d ? "NDHWC" : "NCDHW"; }

// One comparison: f(x, w, b) on CUDA (x in `format`) and on the CPU in float64. `param_shape` is the
// affine parameters' shape; per_stat values share one statistic and stats_per_param statistics meet
// in one dweight element (for its tolerance).
template <typename F>
void check_vs_cpu(const std::string& what, const Shape& s, const Shape& param_shape, Dtype dt, MemoryFormat format,
                  int64_t per_stat, int64_t stats_per_param, uint64_t seed, F f) {
  INFO(what);
  const Tensor x = random_values(s, seed, dt, 3.0, 2.0), dy = random_values(s, seed + 1, dt, 0.0, 1.0);
  const Tensor w = random_values(param_shape, seed + 2, kFloat32, 1.0, 0.3);
  const Tensor b = random_values(param_shape, seed + 3, kFloat32, 0.0, 0.5);
  Tensor xc = to_cuda(x, format).set_requires_grad(true);
  Tensor wc = to_cuda(w).set_requires_grad(true), bc = to_cuda(b).set_requires_grad(true);
  Tensor yc = f(xc, wc, bc);
  yc.backward(to_cuda(dy, format));
  Tensor x64 = x.cast_copy(kFloat64).set_requires_grad(true);
  Tensor w64 = w.cast_copy(kFloat64).set_requires_grad(true), b64 = b.cast_copy(kFloat64).set_requires_grad(true);
  Tensor y64 = f(x64, w64, b64);
  y64.backward(dy.cast_copy(kFloat64));
  CHECK(yc.is_cuda());
  CHECK(yc.dtype() == dt);
  const double rt = rtol_for(dt), at = dt == kFloat16 ? 2e-3 : 2e-5;
  check_close(yc, y64, rt, at, "y");
  REQUIRE(xc.grad().defined());
  CHECK(xc.grad().dtype() == dt);
  check_close(xc.grad(), x64.grad(), rt, at, "dx");
  // dweight / dbias: sums of per_stat * stats_per_param O(1) terms with FP32 per-thread partials.
  const double at_sum = 1e-5 * std::sqrt(static_cast<double>(per_stat)) * static_cast<double>(stats_per_param);
  CHECK(wc.grad().dtype() == kFloat32);
  check_close(wc.grad(), w64.grad(), 1e-5, at_sum, "dweight");
  check_close(bc.grad(), b64.grad(), 1e-5, at_sum, "dbias");
}

struct GroupCase {
  Shape shape;
  int64_t groups;
};
const GroupCase kGroupCases[] = {{{2, 6, 5, 7, 6}, 3}, {{2, 16, 4, 5, 3}, 4}, {{3, 12, 3, 3, 3}, 1},
                                 {{2, 32, 8, 8, 8}, 8}, {{2, 8, 16, 16, 16}, 8}};

}  // namespace

CUDA_TEST_CASE("group_norm cuda f32/f16 NCDHW/NDHWC: forward and backward vs CPU f64, group sizes 1..16 channels") {
  uint64_t seed = 500;
  for (const GroupCase& gc : kGroupCases)
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
        const int64_t C = gc.shape[1], S = shape_numel(gc.shape) / (gc.shape[0] * C);
        const std::string what = "group_norm G=" + std::to_string(gc.groups) + " " + dtype_name(dt) + " " +
                                 format_name(fmt) + " " + shape_str(gc.shape);
        SUBCASE(what.c_str()) {
          check_vs_cpu(what, gc.shape, {C}, dt, fmt, C / gc.groups * S, gc.shape[0], seed += 10,
                       [&](const Tensor& x, const Tensor& w, const Tensor& b) { return ops::group_norm(x, gc.groups, w, b); });
        }
      }
}

CUDA_TEST_CASE("group_norm cuda f32 3-D (4, 8, 100) and 4-D (2, 6, 9, 11) NCDHW vs CPU f64") {
  check_vs_cpu("group_norm 3-D", {4, 8, 100}, {8}, kFloat32, MemoryFormat::Contiguous, 400, 4, 700,
               [](const Tensor& x, const Tensor& w, const Tensor& b) { return ops::group_norm(x, 2, w, b); });
  check_vs_cpu("group_norm 4-D", {2, 6, 9, 11}, {6}, kFloat32, MemoryFormat::Contiguous, 297, 2, 710,
               [](const Tensor& x, const Tensor& w, const Tensor& b) { return ops::group_norm(x, 2, w, b); });
}

CUDA_TEST_CASE("group_norm cuda f16 input under autocast runs in FP32 (the FP32 list) and matches the CPU") {
  const Tensor x = random_values({2, 8, 4, 4, 4}, 900, kFloat16, 3.0, 2.0);
  amp::AutocastGuard on;
  const Tensor yc = ops::group_norm(to_cuda(x, MemoryFormat::ChannelsLast3d), 4);
  const Tensor y = ops::group_norm(x, 4);
  CHECK(yc.dtype() == kFloat32);
  CHECK(yc.memory_format() == MemoryFormat::ChannelsLast3d);
  check_close(yc, y, 1e-5, 2e-5, "y");
}

CUDA_TEST_CASE("instance_norm cuda still matches group_norm with G = C (one code path), f32 NDHWC") {
  const Tensor x = to_cuda(random_values({2, 8, 4, 5, 6}, 950, kFloat32, 3.0, 2.0), MemoryFormat::ChannelsLast3d);
  check_close(ops::instance_norm(x, Tensor(), Tensor()), ops::group_norm(x, 8), 0.0, 0.0, "same bits");
}

CUDA_TEST_CASE("layer_norm cuda f32/f16 over the last 1, 2, 3 dims, NCDHW and NDHWC input, vs CPU f64") {
  struct LnCase {
    Shape shape, norm;
  };
  const LnCase cases[] = {{{4, 7, 33}, {33}},          {{3, 5, 1000}, {1000}},        {{2, 3, 4, 5, 6}, {5, 6}},
                          {{2, 4, 6, 8, 16}, {6, 8, 16}}, {{300, 64}, {64}}};
  uint64_t seed = 1000;
  for (const LnCase& c : cases)
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
        if (fmt == MemoryFormat::ChannelsLast3d && c.shape.size() != 5) continue;
        const int64_t K = shape_numel(c.norm), R = shape_numel(c.shape) / K;
        const std::string what = std::string("layer_norm ") + shape_str(c.shape) + " over " + shape_str(c.norm) + " " +
                                 dtype_name(dt) + " " + format_name(fmt);
        SUBCASE(what.c_str()) {
          check_vs_cpu(what, c.shape, c.norm, dt, fmt, R, 1, seed += 10,
                       [&](const Tensor& x, const Tensor& w, const Tensor& b) { return ops::layer_norm(x, c.norm, w, b); });
        }
      }
}

}  // namespace halfgrad
