// gemm_cuda.h - halfgrad's FP16 / BF16 Tensor Core GEMM on the GPU (plain C++: no CUDA types or headers).
//
//   C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C
//
// Operands are IEEE half bit patterns (halfgrad stores FP16 as uint16_t), or bfloat16 bit patterns
// when `bf16` is set (both A and B; sm_80+), products are summed in FP32, and C is written as FP32 or
// rounded once to the operands' 16-bit type (c_half: FP16, or BF16 with bf16). Every matrix is row-major with a leading
// dimension (elements between the starts of two rows):
//   A, layout N: (M, K), lda >= K          A, layout T: stored (K, M), lda >= M   (op(A) = stored^T)
//   B, layout N: (K, N), ldb >= N          B, layout T: stored (N, K), ldb >= K   (op(B) = stored^T)
//   C:           (M, N), ldc >= N, FP32 (float*) or 16-bit (uint16_t*) as c_half says
// Any M, N, K >= 1. When lda and ldb are multiples of 8 and A and B are 16-byte aligned, tiles are
// copied with 16-byte asynchronous loads (on sm_90: by TMA); otherwise with 2-byte loads (same result,
// slower).
// beta == 0 never reads C. C must not overlap A or B. Runs on halfgrad::cuda::stream() and returns
// once queued; on sm_90 the TMA kernel is queued by programmatic dependent launch (its CTAs may
// start their set-up while the kernel before it runs, and wait for that kernel to complete before
// touching memory: stream order holds as for any launch). Errors (halfgrad::Error) name `op` and the
// shapes.
#pragma once
#include <cstdint>

namespace halfgrad::cuda {

/// How an operand is stored: N as written (row-major), T transposed (the row-major transpose).
enum class GemmLayout { N, T };

struct GemmArgs {
  int64_t M, N, K;
  const uint16_t* A;
  int64_t lda;
  GemmLayout a_layout;
  const uint16_t* B;
  int64_t ldb;
  GemmLayout b_layout;
  void* C;
  int64_t ldc;
  bool c_half;        // C is 16-bit (FP16, or BF16 when bf16) rather than FP32
  float alpha = 1;
  float beta = 0;
  const char* op = "gemm";
  bool bf16 = false;  // A, B (and a 16-bit C) hold bfloat16 bit patterns instead of FP16 ones (last:
                      // callers fill the fields above positionally)
};

/// C (M x N, row-major) = alpha * op(A) * op(B) + beta * C, FP16 (or, with args.bf16, BF16) operands,
/// FP32 accumulation. (The name predates BF16; the Hopper wgmma kernel serves FP16 only, BF16 runs
/// on the mma.sync kernels.)
void gemm_f16(const GemmArgs& args);

}  // namespace halfgrad::cuda
