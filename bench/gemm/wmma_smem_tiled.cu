// wmma_smem_tiled.cu - rung 2 of the GEMM ladder: shared-memory block tiling, still WMMA.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one 256-thread block per 128x128 tile of C; 8 warps in a 2x4 grid, each warp a
// 64x32 tile = 4x2 WMMA 16x16 accumulator fragments. K is walked in slices of kBlockK = 32: the
// block copies a 128x32 slice of A and a 32x128 slice of B into shared memory (16-byte loads, one
// chunk of 8 halfs per thread per pass), synchronises, and every warp runs its 4x2x2 WMMA products
// from shared memory.
// Precision: FP16 operands, FP32 accumulation in the fragments, FP32 output.
//
// What it adds over wmma_global: reuse. Each element of A brought from global memory now serves
// 128 columns of C (was 16), each element of B 128 rows, so global traffic drops 8x and the
// kernel becomes limited by the Tensor Cores' feed from shared memory and by the fact that the
// loads are synchronous: while the block waits for a slice to arrive nothing multiplies (one slot,
// load -> __syncthreads -> compute -> __syncthreads). Expected on H200: ~100-150 TFLOP/s.
//
// Edges: rows/columns past M, N, K are zero-filled in shared memory and not stored (predication);
// needs K and N multiples of 8 so that every 16-byte chunk is either wholly inside or wholly outside.
#include <mma.h>

#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/check.cuh"

namespace halfgrad::bench {
namespace {

constexpr int kBlockM = 128, kBlockN = 128, kBlockK = 32;
constexpr int kWarpM = 64, kWarpN = 32;
constexpr int kWarpsN = kBlockN / kWarpN;  // 4 (2 x 4 warps)
constexpr int kThreads = 32 * (kBlockM / kWarpM) * kWarpsN;
constexpr int kTile = 16;  // WMMA m16n16k16
constexpr int kFragM = kWarpM / kTile, kFragN = kWarpN / kTile;
// Skew of 8 halfs (16 bytes) per shared row. WMMA reads 8x8 sub-matrices row by row; unskewed rows
// of 64 bytes (A) or 256 bytes (B) put rows r, r+2 (A) or all eight rows (B) on the same banks.
// +16 bytes moves each row to the next 16-byte position of the 128-byte bank line, so eight
// consecutive rows hit eight different positions. 16 bytes (not 2 or 4) keeps every row start
// 16-byte aligned for the vector stores and every fragment start 32-byte aligned, as WMMA requires.
constexpr int kSkew = 8;
constexpr int kALd = kBlockK + kSkew;  // 40 halfs
constexpr int kBLd = kBlockN + kSkew;  // 136 halfs
constexpr int kChunk = 8;              // halfs per 16-byte load
static_assert((kTile * kALd * 2) % 32 == 0 && (kTile * kBLd * 2) % 32 == 0, "fragment starts 32-byte aligned");

/// Copies the rows x cols window at (row0, col0) of a row-major matrix (ld) into a shared tile of
/// leading dimension tile_ld, zero-filling what lies outside; whole 16-byte chunks only.
template <int kRows, int kCols, int kTileLd>
__device__ void load_tile(__half* tile, const __half* g, int64_t ld, int row0, int col0, int rows, int cols) {
  constexpr int kChunksPerRow = kCols / kChunk;
  for (int chunk = threadIdx.x; chunk < kRows * kChunksPerRow; chunk += kThreads) {
    const int r = chunk / kChunksPerRow;
    const int c = (chunk % kChunksPerRow) * kChunk;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < rows && col0 + c < cols) v = *reinterpret_cast<const uint4*>(g + (row0 + r) * ld + col0 + c);
    *reinterpret_cast<uint4*>(tile + r * kTileLd + c) = v;
  }
}

__global__ void __launch_bounds__(kThreads) wmma_smem_tiled_kernel(int M, int N, int K, const __half* A,
                                                                   const __half* B, float* C) {
  using namespace nvcuda;
  __shared__ __align__(128) __half a_tile[kBlockM * kALd];
  __shared__ __align__(128) __half b_tile[kBlockK * kBLd];
  // Per-warp staging of one accumulator fragment for the guarded store at the edges.
  __shared__ __align__(128) float c_stage[kThreads / 32][kTile * kTile];

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int block_m = static_cast<int>(blockIdx.y) * kBlockM;
  const int block_n = static_cast<int>(blockIdx.x) * kBlockN;
  const int warp_m = (warp / kWarpsN) * kWarpM;
  const int warp_n = (warp % kWarpsN) * kWarpN;

  wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> acc[kFragM][kFragN];
  for (int i = 0; i < kFragM; ++i)
    for (int j = 0; j < kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  for (int k0 = 0; k0 < K; k0 += kBlockK) {
    load_tile<kBlockM, kBlockK, kALd>(a_tile, A, K, block_m, k0, M, K);
    load_tile<kBlockK, kBlockN, kBLd>(b_tile, B, N, k0, block_n, K, N);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBlockK; kk += kTile) {
      wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __half, wmma::row_major> a[kFragM];
      wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __half, wmma::row_major> b[kFragN];
#pragma unroll
      for (int i = 0; i < kFragM; ++i) wmma::load_matrix_sync(a[i], a_tile + (warp_m + i * kTile) * kALd + kk, kALd);
#pragma unroll
      for (int j = 0; j < kFragN; ++j) wmma::load_matrix_sync(b[j], b_tile + kk * kBLd + warp_n + j * kTile, kBLd);
#pragma unroll
      for (int i = 0; i < kFragM; ++i)
#pragma unroll
        for (int j = 0; j < kFragN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // the slice is consumed before the next one overwrites it
  }

  // Epilogue: each fragment goes through the warp's staging tile so that lanes can store it
  // element by element with a bounds check.
  float* stage = c_stage[warp];
  for (int i = 0; i < kFragM; ++i) {
    for (int j = 0; j < kFragN; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], kTile, wmma::mem_row_major);
      __syncwarp();
      const int row0 = block_m + warp_m + i * kTile;
      const int col0 = block_n + warp_n + j * kTile;
      for (int e = lane; e < kTile * kTile; e += 32) {
        const int row = row0 + e / kTile, col = col0 + e % kTile;
        if (row < M && col < N) C[static_cast<int64_t>(row) * N + col] = stage[e];
      }
      __syncwarp();
    }
  }
}

}  // namespace

const char* gemm_wmma_smem_tiled(const DenseGemm& g) {
  if (g.K % kChunk != 0 || g.N % kChunk != 0) return "needs K, N multiples of 8 (whole 16-byte chunks)";
  const dim3 grid(static_cast<unsigned>((g.N + kBlockN - 1) / kBlockN), static_cast<unsigned>((g.M + kBlockM - 1) / kBlockM));
  wmma_smem_tiled_kernel<<<grid, kThreads, 0, cuda::stream()>>>(
      static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), reinterpret_cast<const __half*>(g.A),
      reinterpret_cast<const __half*>(g.B), g.C);
  HG_CUDA_LAUNCH_CHECK("wmma_smem_tiled");
  return nullptr;
}

}  // namespace halfgrad::bench
