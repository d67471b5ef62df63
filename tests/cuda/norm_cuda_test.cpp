// norm_cuda_test.cpp - batch_norm, instance_norm and group_norm (ops/norm/norm_cuda.cu) and layer_norm
// (ops/norm/layer_norm_cuda.cu) on CUDA against the CPU op in float64 on the same values: forward,
// running-stat updates, and dx / dweight / dbias through backward(), for float32 and float16 inputs,
// NCDHW and NDHWC, training and evaluation; group_norm with group sizes whose channels do and do not
// fill one 16-byte vector (a vector of 8 halfs spanning two groups of 4).
// Inputs have a mean of 3 and std 2, so a variance computed without a shift would lose digits.
#include <cmath>
#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "ops/norm/layer_norm.h"
#include "ops/norm/norm.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"

namespace halfgrad {
namespace {

using testing::check_close;
using testing::check_error;
using testing::rtol_for;
using testing::to_cuda;

// N(mean, std^2) values, rounded to dt.
Tensor random_values(const Shape& s, uint64_t seed, Dtype dt, double mean, double std) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& e : v) e = static_cast<float>(mean + std * g.normal());
  return Tensor::from_vector(v, s, dt);
}

const char* format_name(MemoryFormat f) { return f == MemoryFormat::ChannelsLast3d ? "NDHWC" : "NCDHW"; }

struct NormCase {
  Shape shape;
  Dtype dtype = kFloat32;
  MemoryFormat format = MemoryFormat::Contiguous;
  bool instance = false;  // instance_norm, else batch_norm
  bool training = true;
  bool affine = true;
  bool running = true;    // batch_norm: running stats defined
};

std::string describe(const NormCase& c) {
  return std::string(c.instance ? "instance_norm" : "batch_norm") + " " + dtype_name(c.dtype) + " " +
         format_name(c.format) + " " + shape_str(c.shape) + (c.training ? " train" : " eval") +
         (c.affine ? "" : " no-affine") + (c.running ? "" : " no-running");
}

void check_norm(const NormCase& c, uint64_t seed) {
  INFO(describe(c));
  const int64_t C = c.shape[1];
  int64_t per_group = c.shape[0];
  for (size_t d = 2; d < c.shape.size(); ++d) per_group *= c.shape[d];
  if (c.instance) per_group /= c.shape[0];
  const Tensor x = random_values(c.shape, seed, c.dtype, 3.0, 2.0);
  const Tensor dy = random_values(c.shape, seed + 1, c.dtype, 0.0, 1.0);
  const Tensor w = random_values({C}, seed + 2, kFloat32, 1.0, 0.3);
  const Tensor b = random_values({C}, seed + 3, kFloat32, 0.0, 0.5);
  const Tensor rm = random_values({C}, seed + 4, kFloat32, 2.5, 0.5);
  Generator gen_rv(seed + 5);
  const Tensor rv = Tensor::uniform({C}, 2.0, 6.0, gen_rv, kFloat32);
  const ops::BatchNormParams p = ops::BatchNormParams().training(c.training).momentum(0.3).eps(1e-5);
  const bool with_rs = !c.instance && c.running;

  // CUDA
  Tensor xc = to_cuda(x, c.format).set_requires_grad(true);
  Tensor wc, bc, rmc, rvc;
  if (c.affine) {
    wc = to_cuda(w).set_requires_grad(true);
    bc = to_cuda(b).set_requires_grad(true);
  }
  if (with_rs) {
    rmc = to_cuda(rm);
    rvc = to_cuda(rv);
  }
  Tensor yc = c.instance ? ops::instance_norm(xc, wc, bc, 1e-5) : ops::batch_norm(xc, rmc, rvc, wc, bc, p);
  yc.backward(to_cuda(dy, c.format));

  // CPU reference in float64 on the same values
  Tensor x64 = x.cast_copy(kFloat64).set_requires_grad(true);
  Tensor w64, b64, rm64, rv64;
  if (c.affine) {
    w64 = w.cast_copy(kFloat64).set_requires_grad(true);
    b64 = b.cast_copy(kFloat64).set_requires_grad(true);
  }
  if (with_rs) {
    rm64 = rm.cast_copy(kFloat64);
    rv64 = rv.cast_copy(kFloat64);
  }
  Tensor y64 = c.instance ? ops::instance_norm(x64, w64, b64, 1e-5) : ops::batch_norm(x64, rm64, rv64, w64, b64, p);
  y64.backward(dy.cast_copy(kFloat64));

  CHECK(yc.is_cuda());
  CHECK(yc.dtype() == c.dtype);
  CHECK(yc.memory_format() == c.format);
  const double rt = rtol_for(c.dtype);
  // y ~ N(0, 1)-sized: one rounding of the output plus FP32 math; the atol covers values near 0.
  const double at = c.dtype == kFloat16 ? 2e-3 : 2e-5;
  check_close(yc, y64, rt, at, "y");
  REQUIRE(xc.grad().defined());
  CHECK(xc.grad().memory_format() == c.format);
  CHECK(xc.grad().dtype() == c.dtype);
  check_close(xc.grad(), x64.grad(), rt, at, "dx");
  if (c.affine) {
    // sums over a group of M values of O(1) terms: O(sqrt(M)), FP32 per-thread partials
    const double at_sum = 1e-5 * std::sqrt(static_cast<double>(per_group)) * (c.instance ? c.shape[0] : 1);
    CHECK(wc.grad().dtype() == kFloat32);
    check_close(wc.grad(), w64.grad(), 1e-5, at_sum, "dweight");
    check_close(bc.grad(), b64.grad(), 1e-5, at_sum, "dbias");
  }
  if (with_rs) {
    check_close(rmc, rm64, 1e-5, 1e-6, "running_mean");
    check_close(rvc, rv64, 1e-5, 1e-6, "running_var");
  }
}

const std::vector<Shape> kShapes = {{2, 3, 5, 7, 6}, {3, 17, 4, 5, 3}, {2, 16, 16, 16, 16}};

// ---- group_norm and layer_norm ----------------------------------------------------------------

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

CUDA_TEST_CASE("batch_norm cuda f32/f16 NCDHW/NDHWC training: forward, running stats, backward vs CPU f64") {
  uint64_t seed = 100;
  for (const Shape& s : kShapes)
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
        NormCase c;
        c.shape = s;
        c.dtype = dt;
        c.format = f;
        check_norm(c, seed += 10);
      }
}

CUDA_TEST_CASE("batch_norm cuda f32/f16 NCDHW/NDHWC eval: running stats used, backward vs CPU f64") {
  uint64_t seed = 200;
  for (const Shape& s : kShapes)
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
        NormCase c;
        c.shape = s;
        c.dtype = dt;
        c.format = f;
        c.training = false;
        check_norm(c, seed += 10);
      }
}

CUDA_TEST_CASE("batch_norm cuda several pieces per channel (2,4,32,24,24), no affine, no running stats, 3-D input") {
  uint64_t seed = 300;
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      NormCase c;
      c.shape = {2, 4, 32, 24, 24};
      c.dtype = dt;
      c.format = f;
      check_norm(c, seed += 10);
      c.shape = {2, 5, 3, 4, 5};
      c.affine = false;
      c.running = false;
      check_norm(c, seed += 10);
    }
  for (Dtype dt : {kFloat32, kFloat16}) {
    NormCase c;
    c.shape = {4, 6, 10};  // (N, C, L): the NCDHW path with any number of spatial dims
    c.dtype = dt;
    check_norm(c, seed += 10);
    c.shape = {8, 6};      // (N, C): S = 1
    check_norm(c, seed += 10);
  }
}

CUDA_TEST_CASE("instance_norm cuda f32/f16 NCDHW/NDHWC: forward and backward vs CPU f64") {
  uint64_t seed = 400;
  std::vector<Shape> shapes = kShapes;
  shapes.push_back({2, 3, 32, 24, 24});
  for (const Shape& s : shapes)
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d})
        for (bool affine : {true, false}) {
          NormCase c;
          c.shape = s;
          c.dtype = dt;
          c.format = f;
          c.instance = true;
          c.affine = affine;
          check_norm(c, seed += 10);
        }
}

CUDA_TEST_CASE("batch_norm cuda f16 NDHWC under autocast runs in its input dtype (FP16) like the CPU op") {
  const Shape s = {2, 8, 4, 5, 6};
  const Tensor x = random_values(s, 7, kFloat16, 1.0, 2.0);
  Tensor xc = to_cuda(x, MemoryFormat::ChannelsLast3d);
  Tensor wc = to_cuda(random_values({8}, 8, kFloat32, 1.0, 0.2));
  Tensor bc = to_cuda(random_values({8}, 9, kFloat32, 0.0, 0.2));
  Tensor y, y_ref;
  {
    amp::AutocastGuard guard;
    y = ops::batch_norm(xc, Tensor(), Tensor(), wc, bc);
    y_ref = ops::batch_norm(x, Tensor(), Tensor(), wc.copy_to(Device::CPU), bc.copy_to(Device::CPU));
  }
  // batch_norm is on no autocast list (PyTorch's policy): FP16 in, FP16 out, FP32 statistics.
  CHECK(y.dtype() == kFloat16);
  CHECK(y_ref.dtype() == kFloat16);
  CHECK(y.memory_format() == MemoryFormat::ChannelsLast3d);
  check_close(y, y_ref, 2.0 / 1024, 2e-3, "y");  // the same FP32 value rounded to half once: a tie may flip
}

CUDA_TEST_CASE("batch_norm / instance_norm cuda errors: mixed devices, shapes, one value per channel") {
  const Tensor xc = to_cuda(random_values({2, 3, 4, 4, 4}, 1, kFloat32, 0.0, 1.0));
  const Tensor wc = to_cuda(Tensor::ones({3}));
  const Tensor w_cpu = Tensor::ones({3});
  check_error([&] { ops::batch_norm(xc, Tensor(), Tensor(), w_cpu, Tensor()); },
              {"batch_norm", "weight", "cpu", "cuda"});
  check_error([&] { ops::batch_norm(xc, Tensor::zeros({3}), Tensor::ones({3}), wc, Tensor()); },
              {"batch_norm", "running_mean", "cpu"});
  check_error([&] { ops::instance_norm(xc, wc, w_cpu); }, {"instance_norm", "bias", "cpu"});
  check_error([&] { ops::batch_norm(xc, Tensor(), Tensor(), to_cuda(Tensor::ones({4})), Tensor()); },
              {"batch_norm", "weight", "[4]", "3 channels"});
  check_error([&] { ops::batch_norm(to_cuda(random_values({1, 3, 1, 1, 1}, 2, kFloat32, 0, 1)), Tensor(), Tensor(),
                                    Tensor(), Tensor()); },
              {"batch_norm", "more than 1 value per channel"});
  check_error([&] { ops::batch_norm(xc, Tensor(), Tensor(), wc, Tensor(), ops::BatchNormParams().training(false)); },
              {"batch_norm", "running_mean"});
  check_error([&] { ops::batch_norm(to_cuda(random_values({2, 3, 4, 4, 4}, 3, kFloat64, 0, 1)), Tensor(), Tensor(),
                                    Tensor(), Tensor()); },
              {"batch_norm", "float64"});
}

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
