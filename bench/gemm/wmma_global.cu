// wmma_global.cu - rung 1 of the GEMM ladder: the textbook WMMA kernel.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one warp per 16x16 tile of C; a block of 4 warps covers a 32x32 patch (2x2
// tiles). Each warp walks K in steps of 16, loading a 16x16 A fragment and a 16x16 B fragment
// straight from global memory (wmma::load_matrix_sync) and accumulating with wmma::mma_sync, then
// stores its FP32 accumulator fragment straight to C.
// Precision: FP16 operands, FP32 accumulation in the fragment, FP32 output.
//
// What it shows: the Tensor Core API at its simplest. What it costs: no reuse. Every warp reads its
// own 16-row strip of A and 16-column strip of B from global memory (L2 at best): for 16x16x16 of
// math (8 KFLOP) it moves 1 KiB, so it is starved by memory long before the Tensor Cores are busy.
// Expected on H200: a few percent of cuBLAS (the reference measured ~28 TFLOP/s at 4096^3).
//
// Needs M, N, K multiples of 16 (fragments are read whole from global memory, and load_matrix_sync
// needs 32-byte aligned fragment starts, i.e. lda, ldb multiples of 16 halfs).
#include <mma.h>

#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/check.cuh"

namespace halfgrad::bench {
namespace {

constexpr int kTile = 16;        // WMMA m16n16k16
constexpr int kWarpsPerSide = 2;  // a block is 2 x 2 warps = a 32x32 patch of C

__global__ void wmma_global_kernel(int M, int N, int K, const __half* A, const __half* B, float* C) {
  using namespace nvcuda;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int tile_m = (blockIdx.y * kWarpsPerSide + warp / kWarpsPerSide) * kTile;
  const int tile_n = (blockIdx.x * kWarpsPerSide + warp % kWarpsPerSide) * kTile;
  if (tile_m >= M || tile_n >= N) return;  // whole warp leaves together

  wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> acc;
  wmma::fill_fragment(acc, 0.f);
  for (int k = 0; k < K; k += kTile) {
    wmma::load_matrix_sync(a, A + static_cast<int64_t>(tile_m) * K + k, K);
    wmma::load_matrix_sync(b, B + static_cast<int64_t>(k) * N + tile_n, N);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(C + static_cast<int64_t>(tile_m) * N + tile_n, acc, N, wmma::mem_row_major);
}

}  // namespace

const char* gemm_wmma_global(const DenseGemm& g) {
  if (g.M % kTile != 0 || g.N % kTile != 0 || g.K % kTile != 0) return "needs M, N, K multiples of 16";
  const int patch = kTile * kWarpsPerSide;
  const dim3 grid(static_cast<unsigned>((g.N + patch - 1) / patch), static_cast<unsigned>((g.M + patch - 1) / patch));
  wmma_global_kernel<<<grid, 32 * kWarpsPerSide * kWarpsPerSide, 0, cuda::stream()>>>(
      static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), reinterpret_cast<const __half*>(g.A),
      reinterpret_cast<const __half*>(g.B), g.C);
  HG_CUDA_LAUNCH_CHECK("wmma_global");
  return nullptr;
}

}  // namespace halfgrad::bench
