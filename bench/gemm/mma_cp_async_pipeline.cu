// mma_cp_async_pipeline.cu - rung 3 of the GEMM ladder: a multi-stage cp.async pipeline feeding
// raw mma.sync.m16n8k16 instructions.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one 256-thread block per 128x128 tile of C, 8 warps in a 2x4 grid, each warp a
// 64x32 tile = 4x4 mma tiles of 16x8 (64 FP32 accumulators per thread). K in slices of 32.
// Shared memory: kStages = 3 slots of [128][32] A + [32][128] B halfs, stored plainly (no swizzle,
// no skew) = 3 x 16 KiB = 48 KiB, dynamic.
// Precision: FP16 operands, FP32 accumulation in the mma registers, FP32 output.
//
// What it adds over wmma_smem_tiled:
//  * cp.async (global -> shared without passing through registers, asynchronous): the block keeps
//    kStages-1 = 2 slices in flight while it multiplies the current one, so the global-memory
//    latency hides behind the math instead of stalling it (one __syncthreads per slice, not two).
//  * mma.sync PTX instead of the WMMA API: the register layout of every fragment is known (see
//    mma_m16n8k16 in ops/tensor_core/ptx.cuh), so fragments are read from shared memory with
//    plain 32-bit (A: two adjacent k of one row) and 16-bit (B: one k, one n) loads.
// What it still lacks: those loads are many (B needs two 16-bit loads per register) and collide in
// shared-memory banks (rows 64 bytes apart: rows r and r+2 of A share banks; B rows are 256 bytes
// apart, so the 4 lanes reading 4 k-rows of one column all hit the same bank). The next rung fixes
// both. Expected on H200: ~150-250 TFLOP/s.
//
// Edges: predicated cp.async (zero-fill past M, N, K); needs K and N multiples of 8 (lda, ldb
// multiples of 8 halfs: 16-byte aligned row starts for cp.async).
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/check.cuh"
#include "ops/matmul/gemm_mma_tiles.cuh"
#include "ops/tensor_core/ptx.cuh"

namespace halfgrad::bench {
namespace {

using namespace cuda::gemm_tiles;   // the tile loaders, swizzle, instruction shape
using namespace cuda::tensor_core;  // the PTX wrappers (ops/tensor_core/ptx.cuh)

constexpr int kBlockM = 128, kBlockN = 128, kBlockK = 32;
constexpr int kWarpM = 64, kWarpN = 32;
constexpr int kWarpsN = kBlockN / kWarpN;  // 4 (2 x 4 warps)
constexpr int kThreads = 32 * (kBlockM / kWarpM) * kWarpsN;
constexpr int kStages = 3;
constexpr int kMmaM = kWarpM / kInstrM, kMmaN = kWarpN / kInstrN;  // 4 x 4
constexpr int kATileHalfs = kBlockM * kBlockK, kBTileHalfs = kBlockK * kBlockN;
constexpr int kStageHalfs = kATileHalfs + kBTileHalfs;
constexpr int kSmemBytes = kStages * kStageHalfs * 2;

__device__ __forceinline__ uint32_t pack_halves(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

__global__ void __launch_bounds__(kThreads) mma_cp_async_pipeline_kernel(int M, int N, int K, const uint16_t* A,
                                                                         const uint16_t* B, float* C) {
  extern __shared__ __align__(128) uint16_t smem[];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int block_m = static_cast<int>(blockIdx.y) * kBlockM;
  const int block_n = static_cast<int>(blockIdx.x) * kBlockN;
  const int warp_m = (warp / kWarpsN) * kWarpM;
  const int warp_n = (warp % kWarpsN) * kWarpN;
  const int g = lane >> 2, t = lane & 3;  // mma fragment coordinates (gemm_mma_tiles.cuh)

  float acc[kMmaM][kMmaN][4] = {};
  const int k_tiles = (K + kBlockK - 1) / kBlockK;
  auto load_slice = [&](int slot, int kt) {
    uint16_t* stage = smem + slot * kStageHalfs;
    load_tile<kBlockM, kBlockK, kThreads, false, true>(stage, A, K, block_m, kt * kBlockK, M, K);
    load_tile<kBlockK, kBlockN, kThreads, false, true>(stage + kATileHalfs, B, N, kt * kBlockK, block_n, K, N);
  };

  // Prologue: slices 0 .. kStages-2 in flight; one commit group per slice (empty ones too).
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_slice(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // slice kt has landed (this thread's copies) ...
    __syncthreads();               // ... everyone's, and slice kt-1 is no longer read
    if (kt + kStages - 1 < k_tiles) load_slice((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();

    const uint16_t* a_tile = smem + (kt % kStages) * kStageHalfs;  // [kBlockM][kBlockK]
    const uint16_t* b_tile = a_tile + kATileHalfs;                   // [kBlockK][kBlockN]
#pragma unroll
    for (int ks = 0; ks < kBlockK; ks += kInstrK) {
      uint32_t a[kMmaM][4];
      uint32_t b[kMmaN][2];
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi) {
        const uint16_t* p = a_tile + (warp_m + mi * kInstrM + g) * kBlockK + ks + 2 * t;
        a[mi][0] = *reinterpret_cast<const uint32_t*>(p);
        a[mi][1] = *reinterpret_cast<const uint32_t*>(p + 8 * kBlockK);
        a[mi][2] = *reinterpret_cast<const uint32_t*>(p + 8);
        a[mi][3] = *reinterpret_cast<const uint32_t*>(p + 8 * kBlockK + 8);
      }
#pragma unroll
      for (int ni = 0; ni < kMmaN; ++ni) {
        const uint16_t* p = b_tile + (ks + 2 * t) * kBlockN + warp_n + ni * kInstrN + g;
        b[ni][0] = pack_halves(p[0], p[kBlockN]);
        b[ni][1] = pack_halves(p[8 * kBlockN], p[9 * kBlockN]);
      }
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaN; ++ni) mma_m16n8k16<__half>(acc[mi][ni], a[mi], b[ni]);
    }
  }
  cp_async_wait<0>();

  const Epilogue out{C, N, 1.f, 0.f, false, N % 2 == 0};
#pragma unroll
  for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
    for (int ni = 0; ni < kMmaN; ++ni) {
      const int row = block_m + warp_m + mi * kInstrM + g;
      const int col = block_n + warp_n + ni * kInstrN + 2 * t;
      store_pair(out, M, N, row, col, acc[mi][ni][0], acc[mi][ni][1]);
      store_pair(out, M, N, row + 8, col, acc[mi][ni][2], acc[mi][ni][3]);
    }
}

}  // namespace

const char* gemm_mma_cp_async_pipeline(const DenseGemm& g) {
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (16-byte cp.async)";
  // Opt in to more than 48 KiB of dynamic shared memory, once.
  static const bool configured = [] {
    HG_CUDA_CHECK("mma_cp_async_pipeline", cudaFuncSetAttribute(mma_cp_async_pipeline_kernel,
                                                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((g.N + kBlockN - 1) / kBlockN), static_cast<unsigned>((g.M + kBlockM - 1) / kBlockM));
  mma_cp_async_pipeline_kernel<<<grid, kThreads, kSmemBytes, cuda::stream()>>>(
      static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), g.A, g.B, g.C);
  HG_CUDA_LAUNCH_CHECK("mma_cp_async_pipeline");
  return nullptr;
}

}  // namespace halfgrad::bench
