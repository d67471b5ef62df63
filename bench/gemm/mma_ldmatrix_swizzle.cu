// mma_ldmatrix_swizzle.cu - rung 4 of the GEMM ladder: ldmatrix from XOR-swizzled shared memory.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: as mma_cp_async_pipeline - one 256-thread block per 128x128 tile of C, 8 warps
// in a 2x4 grid, each warp 64x32 = 4x4 mma.sync.m16n8k16 tiles, K in slices of 32 - with
// kStages = 4 slots of [128][32] A + [32][128] B halfs = 64 KiB of dynamic shared memory.
// Precision: FP16 operands, FP32 accumulation in the mma registers, FP32 output.
//
// What it adds over mma_cp_async_pipeline:
//  * ldmatrix.x4: one instruction gives a warp a whole 16x16 A fragment (4 registers per lane),
//    or the B fragments of two 8-column mma tiles; ldmatrix.x4.trans transposes on the fly, so the
//    N-contiguous B tile yields the "col" B operand directly. A warp's k-step now needs 4 + 2
//    ldmatrix instead of 16 32-bit + 32 16-bit loads.
//  * XOR swizzle (SwizzledRows in ops/tensor_core/warp_tile.cuh): the 16-byte chunk c of row r is
//    stored at chunk c ^ f(r), so the eight rows an ldmatrix reads fall on eight different bank
//    positions - conflict-free reads and writes with no padding.
//  * a 4th stage: one more slice in flight to cover the global-memory latency.
// Expected on H200: ~300-400 TFLOP/s; what is left is the ratio of shared-memory reads to math
// (a 64x32 warp tile reads 6 ldmatrix per 16 mma) and the loop overhead, fixed by the next rung.
//
// Edges: predicated cp.async (zero-fill past M, N, K); needs K and N multiples of 8.
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
constexpr int kStages = 4;
constexpr int kMmaM = kWarpM / kInstrM, kMmaN = kWarpN / kInstrN;  // 4 x 4
constexpr int kATileHalfs = kBlockM * kBlockK, kBTileHalfs = kBlockK * kBlockN;
constexpr int kStageHalfs = kATileHalfs + kBTileHalfs;
constexpr int kSmemBytes = kStages * kStageHalfs * 2;

__global__ void __launch_bounds__(kThreads) mma_ldmatrix_swizzle_kernel(int M, int N, int K, const uint16_t* A,
                                                                        const uint16_t* B, float* C) {
  extern __shared__ __align__(128) uint16_t smem[];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int block_m = static_cast<int>(blockIdx.y) * kBlockM;
  const int block_n = static_cast<int>(blockIdx.x) * kBlockN;
  const int warp_m = (warp / kWarpsN) * kWarpM;
  const int warp_n = (warp % kWarpsN) * kWarpN;

  float acc[kMmaM][kMmaN][4] = {};
  const int k_tiles = (K + kBlockK - 1) / kBlockK;
  auto load_slice = [&](int slot, int kt) {
    uint16_t* stage = smem + slot * kStageHalfs;
    load_tile<kBlockM, kBlockK, kThreads, true, true>(stage, A, K, block_m, kt * kBlockK, M, K);
    load_tile<kBlockK, kBlockN, kThreads, true, true>(stage + kATileHalfs, B, N, kt * kBlockK, block_n, K, N);
  };

  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_slice(s, s);
    cp_async_commit();
  }
  const uint32_t smem_base = shared_address(smem);
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < k_tiles) load_slice((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();

    const uint32_t a_tile = smem_base + (kt % kStages) * kStageHalfs * 2;
    const uint32_t b_tile = a_tile + kATileHalfs * 2;
#pragma unroll
    for (int ks = 0; ks < kBlockK / kInstrK; ++ks) {
      uint32_t a[kMmaM][4];
      uint32_t b[kMmaN][2];
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi)
        load_a_fragment<false, kBlockM, kBlockK>(a[mi], a_tile, warp_m + mi * kInstrM, ks, lane);
#pragma unroll
      for (int nj = 0; nj < kMmaN / 2; ++nj)
        load_b_fragments<false, kBlockN, kBlockK>(b[2 * nj], b[2 * nj + 1], b_tile, warp_n + nj * 2 * kInstrN, ks, lane);
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
        for (int ni = 0; ni < kMmaN; ++ni) mma_m16n8k16<__half>(acc[mi][ni], a[mi], b[ni]);
    }
  }
  cp_async_wait<0>();

  const int g = lane >> 2, t = lane & 3;
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

const char* gemm_mma_ldmatrix_swizzle(const DenseGemm& g) {
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (16-byte cp.async)";
  // Opt in to more than 48 KiB of dynamic shared memory, once.
  static const bool configured = [] {
    HG_CUDA_CHECK("mma_ldmatrix_swizzle", cudaFuncSetAttribute(mma_ldmatrix_swizzle_kernel,
                                                               cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((g.N + kBlockN - 1) / kBlockN), static_cast<unsigned>((g.M + kBlockM - 1) / kBlockM));
  mma_ldmatrix_swizzle_kernel<<<grid, kThreads, kSmemBytes, cuda::stream()>>>(
      static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), g.A, g.B, g.C);
  HG_CUDA_LAUNCH_CHECK("mma_ldmatrix_swizzle");
  return nullptr;
}

}  // namespace halfgrad::bench
