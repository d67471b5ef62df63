// matmul_simt_cuda.cu - the FP32 SIMT GEMM behind matmul_simt_cuda.h (float32 matmul / linear on CUDA).
//
// Math: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C; op() is the identity for layout N
// and the transpose for layout T. No backward here: matmul.cpp builds dA = dC op(B)^T and
// dB = op(A)^T dC from this same call by choosing the layouts.
// Shapes and layout: row-major with leading dimensions (A: N (M, K) / T stored (K, M); B: N (K, N) /
// T stored (N, K); C (M, N)).
// Parallel mapping: the classic shared-memory tiled SGEMM. One 256-thread block per kBlockM x kBlockN
// = 64 x 64 tile of C; K in slices of kBlockK = 16. Each slice of op(A) (64 x 16) and op(B) (16 x 64)
// is staged in shared memory k-major (As[k][m], Bs[k][n]), zero-filled outside the matrices, so the
// inner loop needs no bounds checks. Thread (tx, ty) of the 16 x 16 grid owns the 4 x 4 outputs
// (ty + 16 i, tx + 16 j): in the inner loop a warp reads 2 distinct As words (broadcast) and 16
// consecutive Bs words (no bank conflict), and the final stores of a warp are 16 consecutive floats.
// This is a correct, simple kernel (about 10-20% of the H200's FP32 peak), not a tuned one: float32
// is the debugging / reference precision; the training path is FP16 on Tensor Cores (gemm_cuda.h).
// Precision: FP32 operands, FP32 fused multiply-adds, alpha/beta in FP32.
#include "core/cuda/check.cuh"
#include "ops/matmul/matmul_simt_cuda.h"

namespace halfgrad::cuda {
namespace {

constexpr int kBlockM = 64, kBlockN = 64, kBlockK = 16;
constexpr int kThreadsX = 16, kThreadsY = 16, kThreads = kThreadsX * kThreadsY;
constexpr int kPerThreadM = kBlockM / kThreadsY, kPerThreadN = kBlockN / kThreadsX;  // 4 x 4 outputs
static_assert(kBlockM * kBlockK % kThreads == 0 && kBlockN * kBlockK % kThreads == 0, "tile loads split evenly");
// Shared rows padded by one float: a K-contiguous operand (A in layout N, B in layout T) is written
// to the k-major tile with a stride of kBlockM + 1 words between consecutive k, which spreads a
// warp's 16 consecutive k over different banks instead of one.
constexpr int kPad = 1;

struct Problem {
  int64_t M, N, K;
  const float* A;
  int64_t lda;
  bool a_trans;
  const float* B;
  int64_t ldb;
  bool b_trans;
  float* C;
  int64_t ldc;
  float alpha, beta;
};

__global__ void __launch_bounds__(kThreads) sgemm_tiled_kernel(Problem p) {
  __shared__ float As[kBlockK][kBlockM + kPad];
  __shared__ float Bs[kBlockK][kBlockN + kPad];
  const int tx = threadIdx.x % kThreadsX, ty = threadIdx.x / kThreadsX;
  const int64_t m0 = int64_t(blockIdx.y) * kBlockM, n0 = int64_t(blockIdx.x) * kBlockN;
  float acc[kPerThreadM][kPerThreadN] = {};
  for (int64_t k0 = 0; k0 < p.K; k0 += kBlockK) {
#pragma unroll
    for (int l = 0; l < kBlockM * kBlockK / kThreads; ++l) {
      const int idx = threadIdx.x + l * kThreads;
      // Consecutive threads walk the operand's contiguous direction (coalesced global reads).
      const int m = p.a_trans ? idx % kBlockM : idx / kBlockK;
      const int k = p.a_trans ? idx / kBlockM : idx % kBlockK;
      const int64_t gm = m0 + m, gk = k0 + k;
      float v = 0.f;
      if (gm < p.M && gk < p.K) v = p.a_trans ? p.A[gk * p.lda + gm] : p.A[gm * p.lda + gk];
      As[k][m] = v;
    }
#pragma unroll
    for (int l = 0; l < kBlockN * kBlockK / kThreads; ++l) {
      const int idx = threadIdx.x + l * kThreads;
      const int n = p.b_trans ? idx / kBlockK : idx % kBlockN;
      const int k = p.b_trans ? idx % kBlockK : idx / kBlockN;
      const int64_t gn = n0 + n, gk = k0 + k;
      float v = 0.f;
      if (gn < p.N && gk < p.K) v = p.b_trans ? p.B[gn * p.ldb + gk] : p.B[gk * p.ldb + gn];
      Bs[k][n] = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBlockK; ++kk) {
      float a[kPerThreadM], b[kPerThreadN];
#pragma unroll
      for (int i = 0; i < kPerThreadM; ++i) a[i] = As[kk][ty + kThreadsY * i];
#pragma unroll
      for (int j = 0; j < kPerThreadN; ++j) b[j] = Bs[kk][tx + kThreadsX * j];
#pragma unroll
      for (int i = 0; i < kPerThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kPerThreadN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kPerThreadM; ++i) {
    const int64_t gm = m0 + ty + kThreadsY * i;
    if (gm >= p.M) continue;
#pragma unroll
    for (int j = 0; j < kPerThreadN; ++j) {
      const int64_t gn = n0 + tx + kThreadsX * j;
      if (gn >= p.N) continue;
      float* c = p.C + gm * p.ldc + gn;
      *c = p.beta == 0.f ? p.alpha * acc[i][j] : p.alpha * acc[i][j] + p.beta * *c;
    }
  }
}

}  // namespace

void gemm_f32_simt(const GemmF32Args& a) {
  const bool at = a.a_layout == GemmLayout::T, bt = a.b_layout == GemmLayout::T;
  HG_CHECK(a.M >= 1 && a.N >= 1 && a.K >= 1, a.op << ": GEMM extents must be >= 1, got M " << a.M << ", N " << a.N
                                                   << ", K " << a.K);
  HG_CHECK(a.A && a.B && a.C, a.op << ": null operand pointer");
  HG_CHECK(a.lda >= (at ? a.M : a.K) && a.ldb >= (bt ? a.K : a.N) && a.ldc >= a.N,
           a.op << ": leading dimensions too small for M " << a.M << ", N " << a.N << ", K " << a.K << " (lda " << a.lda
                << ", ldb " << a.ldb << ", ldc " << a.ldc << ")");
  const int64_t grid_m = (a.M + kBlockM - 1) / kBlockM, grid_n = (a.N + kBlockN - 1) / kBlockN;
  HG_CHECK(grid_m <= 65535 && grid_n < (int64_t{1} << 31), a.op << ": M " << a.M << " x N " << a.N
                                                                 << " is too large for one launch");
  const Problem p{a.M, a.N, a.K, a.A, a.lda, at, a.B, a.ldb, bt, a.C, a.ldc, a.alpha, a.beta};
  sgemm_tiled_kernel<<<dim3(static_cast<unsigned>(grid_n), static_cast<unsigned>(grid_m)), kThreads, 0, stream()>>>(p);
  HG_CUDA_LAUNCH_CHECK(a.op);
}

}  // namespace halfgrad::cuda
