// The Hopper TMA GEMM (ops/matmul/gemm_tma.cuh) through the public ops, against the CPU ops: on a
// compute capability 9.0 GPU, FP16 products with beta == 0 and TMA-describable operands run on it
// with the TMA-store epilogue (gemm_cuda.cu, hopper_path), so these shapes take it there and the
// mma.sync kernels elsewhere; the same check holds either way. 1288 x 72 x 2568: an edge tile in M (1288 = 10 x 128 + 8) and N (2568 = 10 x 256 + 8),
// K = 72 not a multiple of the 64-wide slice (TMA zero-fills the rest of the boxes). matmul is the
// N/N layout (B MN-major), linear's forward the N/T one (weight (out, in): B K-major); their
// gradients are the N/T and T/N products with K = 2568 and 1288 (the TMA kernel too where their
// operands and beta allow it). bench/gemm/gemm_bench checks every layout,
// alpha/beta and FP16 output of the kernel directly.
#include "ops/matmul/matmul.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
// K = 72 products per output: FP32 sums in another order than Eigen's, then one FP16 rounding.
const Tolerance kHalfGemm{3e-3, 2e-2};
}  // namespace

CUDA_TEST_CASE("gemm tma cuda f16 matmul (M,K)x(K,N) 1288x72x2568, edge tiles in M, N, K, with gradients") {
  compare_with_cpu("matmul f16 1288x72x2568", {{{1288, 72}}, {{72, 2568}}}, kFloat16,
                   [](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1]); }, kHalfGemm, kHalfGemm);
}

CUDA_TEST_CASE("gemm tma cuda f16 linear (B,in)x(out,in)^T + b 1288x72x2568 (N/T layout), with gradients") {
  compare_with_cpu("linear f16 1288x72x2568", {{{1288, 72}}, {{2568, 72}}, {{2568}}}, kFloat16,
                   [](const std::vector<Tensor>& x) { return ops::linear(x[0], x[1], x[2]); }, kHalfGemm, kHalfGemm);
}
