// CUDA matmul / linear against the CPU ops: float16 on the Tensor Core GEMM, float32 on the SIMT FP32
// GEMM; odd sizes (1x1x1, 17x33x5, 64x3x27, 100x70x90, and one above a 128x256 tile); forward and
// every gradient (the backward GEMMs use the transposed layouts); linear with and without bias, and
// under autocast (float32 weights cast to float16 once, gradients back in float32).
#include "autocast/autocast.h"
#include "ops/matmul/matmul.h"
#include "tests/check_error.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
// K <= 300 products per output: FP32 sums in another order than Eigen's, then (f16) one rounding.
Tolerance gemm_tol(Dtype d) { return d == kFloat16 ? Tolerance{3e-3, 2e-2} : Tolerance{1e-5, 2e-4}; }
}  // namespace

CUDA_TEST_CASE("matmul cuda f32/f16 (M,K)x(K,N) 1x1x1, 17x33x5, 64x3x27, 100x70x90, 130x300x260 with gradients") {
  struct Mkn {
    int64_t m, k, n;
  };
  for (Dtype dt : {kFloat32, kFloat16})
    for (const Mkn& s : {Mkn{1, 1, 1}, Mkn{17, 33, 5}, Mkn{64, 3, 27}, Mkn{100, 70, 90}, Mkn{130, 300, 260}}) {
      const std::string what = std::string(dtype_name(dt)) + " " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                               std::to_string(s.n);
      SUBCASE(what.c_str()) {
        compare_with_cpu("matmul " + what, {{{s.m, s.k}}, {{s.k, s.n}}}, dt,
                         [](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1]); }, gemm_tol(dt), gemm_tol(dt));
      }
    }
}

CUDA_TEST_CASE("matmul cuda f32/f16 linear (B,in)x(out,in)^T + b: 1x1x1, 17x33x5, 64x3x27, 100x70x90, no bias") {
  struct Bio {
    int64_t b, in, out;
  };
  for (Dtype dt : {kFloat32, kFloat16})
    for (const Bio& s : {Bio{1, 1, 1}, Bio{17, 33, 5}, Bio{64, 3, 27}, Bio{100, 70, 90}}) {
      const std::string what = std::string(dtype_name(dt)) + " " + std::to_string(s.b) + "x" + std::to_string(s.in) + "x" +
                               std::to_string(s.out);
      SUBCASE(what.c_str()) {
        compare_with_cpu("linear " + what, {{{s.b, s.in}}, {{s.out, s.in}}, {{s.out}}}, dt,
                         [](const std::vector<Tensor>& x) { return ops::linear(x[0], x[1], x[2]); }, gemm_tol(dt),
                         gemm_tol(dt));
        compare_with_cpu("linear no bias " + what, {{{s.b, s.in}}, {{s.out, s.in}}}, dt,
                         [](const std::vector<Tensor>& x) { return ops::linear(x[0], x[1]); }, gemm_tol(dt), gemm_tol(dt));
      }
    }
}

CUDA_TEST_CASE("matmul cuda linear under autocast: f32 weights run as f16 on Tensor Cores, f32 gradients") {
  amp::AutocastGuard guard;
  const Tensor y = compare_with_cpu("autocast linear", {{{17, 33}}, {{5, 33}}, {{5}}}, kFloat32,
                                    [](const std::vector<Tensor>& x) { return ops::linear(x[0], x[1], x[2]); },
                                    gemm_tol(kFloat16), gemm_tol(kFloat16));
  CHECK(y.dtype() == amp::autocast_dtype(amp::OpKind::Linear, {kFloat32}));
}

CUDA_TEST_CASE("matmul cuda errors: mixed devices name the op, float64 on cuda") {
  const Tensor a = random_tensor({3, 4}, 1), b = random_tensor({4, 2}, 2);
  check_error([&] { ops::matmul(to_cuda(a), b); }, {"matmul", "cuda", "cpu"});
  check_error([&] { ops::linear(to_cuda(a), random_tensor({2, 4}, 3)); }, {"linear", "cuda", "cpu"});
  check_error([&] { ops::matmul(to_cuda(a.cast_copy(kFloat64)), to_cuda(b.cast_copy(kFloat64))); }, {"matmul", "float64"});
}
