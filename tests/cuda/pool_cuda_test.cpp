// pool_cuda_test.cpp - the pooling and upsampling ops on CUDA (ops/pool/max_pool3d_cuda.cu,
// separable_map_cuda.cu) against the CPU op in float64 on the same values: y, and dx through
// backward(), for float32 / float16 and NCDHW / NDHWC, on every case of tests/golden/pool.json
// (max_pool3d per-axis and padded, avg_pool3d, adaptive_avg_pool3d, upsample nearest / trilinear), and
// on channel counts that take max_pool3d's vector path.
#include <functional>
#include <string>
#include <vector>

#include "tests/check_error.h"
#include "tests/cuda/cuda_test_case.h"
#include "tests/golden.h"
#include "tests/ops/pool_cases.h"

namespace halfgrad {
namespace {

using testing::check_close;
using testing::to_cuda;

// FP16 inputs are exact in both runs; FP32 sums rounded once to FP16 (2^-11 relative), and an FP16
// gradient of a few overlapping windows: the tolerance of one FP16 rounding plus the sum's.
double atol_for(Dtype dt) { return dt == kFloat16 ? 2e-3 : 1e-5; }
double rtol_for(Dtype dt) { return dt == kFloat16 ? 2e-3 : 1e-5; }

// Runs `f` on x (dt, format) on CUDA and on x in float64 on the CPU; compares y and dx.
template <typename F>
void check_vs_cpu(const std::string& what, const Tensor& x32, const Tensor& gy32, Dtype dt, MemoryFormat f, F run) {
  INFO(what << " " << std::string(dtype_name(dt)) << std::string(f == MemoryFormat::ChannelsLast3d ? " NDHWC" : " NCDHW") << " "
            << shape_str(x32.shape()));
  const Tensor x = x32.cast_copy(dt);  // the values both runs see
  Tensor xc = to_cuda(x, f).set_requires_grad(true);
  Tensor yc = run(xc);
  Tensor x64 = x.cast_copy(kFloat64).set_requires_grad(true);
  Tensor y64 = run(x64);
  const Tensor gy = gy32.cast_copy(dt);
  yc.backward(to_cuda(gy, f));
  y64.backward(gy.cast_copy(kFloat64));
  CHECK(yc.is_cuda());
  CHECK(yc.memory_format() == f);
  check_close(yc.cpu().cast_copy(kFloat64), y64, atol_for(dt), rtol_for(dt), "y");
  REQUIRE(xc.grad().defined());
  CHECK(xc.grad().memory_format() == f);
  CHECK(xc.grad().dtype() == xc.dtype());
  check_close(xc.grad().cpu().cast_copy(kFloat64), x64.grad(), atol_for(dt), rtol_for(dt), "dx");
}

}  // namespace

CUDA_TEST_CASE("pool cuda f32/f16 NCDHW/NDHWC: every pool.json case vs CPU f64 (max, avg, adaptive, upsample)") {
  const testing::GoldenFile file = testing::load_golden("pool.json");
  for (const std::string& name : file.case_names()) {
    const testing::GoldenCase c = file.at(name);
    if (c.params().at("dtype").get<std::string>() != "float32") continue;  // the _f64 twins hold the same x
    const Tensor x = c.input("x"), gy = c.input("gy");
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
        // Under no autocast the op runs in x's dtype (upsample's FP32 row applies only under autocast).
        check_vs_cpu(c.where(), x, gy, dt, f, [&](const Tensor& t) { return testing::run_pool_case(c, t); });
      }
  }
}

CUDA_TEST_CASE("pool cuda f32/f16 NDHWC with C % 8 == 0: max_pool3d vector path per-axis and padded, avg, upsample") {
  Generator g(77);
  const Tensor x = Tensor::randn({2, 16, 6, 9, 8}, g);
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
  };
  const std::vector<Op> ops_ = {
      {"max k2 s2 (the U-Net's)", [](const Tensor& t) { return ops::max_pool3d(t, 2, 2); }},
      {"max k(1,2,2)", [](const Tensor& t) { return ops::max_pool3d(t, {1, 2, 2}, {1, 2, 2}); }},
      {"max k3 s2 p1", [](const Tensor& t) { return ops::max_pool3d(t, 3, 2, 1); }},
      {"max k(3,1,3) s1 p(1,0,1)", [](const Tensor& t) { return ops::max_pool3d(t, {3, 1, 3}, 1, {1, 0, 1}); }},
      {"avg k3 s2 p1 ceil no-pad", [](const Tensor& t) { return ops::avg_pool3d(t, 3, 2, 1, true, false); }},
      {"adaptive 1", [](const Tensor& t) { return ops::adaptive_avg_pool3d(t, 1); }},
      {"nearest x2", [](const Tensor& t) { return ops::upsample_nearest3d(t, {12, 18, 16}, {2, 2, 2}); }},
      {"trilinear (1,2,2)", [](const Tensor& t) { return ops::upsample_trilinear3d(t, {6, 18, 16}, false, {1, 2, 2}); }},
  };
  for (const Op& op : ops_) {
    const Shape ys = op.f(x).shape();
    const Tensor gy = Tensor::randn(ys, g);
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d})
        check_vs_cpu(op.name, x, gy, dt, f, op.f);
  }
}

CUDA_TEST_CASE("pool cuda errors: float64 on CUDA, bad padding") {
  const Tensor x = to_cuda(Tensor::zeros({1, 2, 4, 4, 4}));
  const Tensor x64 = to_cuda(Tensor::zeros({1, 2, 4, 4, 4}, kFloat64));
  testing::check_error([&] { ops::avg_pool3d(x64, 2); }, {"avg_pool3d", "float64"});
  testing::check_error([&] { ops::upsample_trilinear3d(x64, 8, false); }, {"upsample_trilinear3d", "float64"});
  testing::check_error([&] { ops::max_pool3d(x, 2, 2, 2); }, {"max_pool3d", "padding"});
}

}  // namespace halfgrad
