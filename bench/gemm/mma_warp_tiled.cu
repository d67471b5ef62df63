// mma_warp_tiled.cu - rung 5 (top) of the GEMM ladder: full warp tiling. Its code is the production
// kernel's (ops/matmul/gemm_mma_tiles.cuh, warp_tiled_gemm_block); this file launches it for the
// ladder's dense N/N, FP32-output problem so that it is measured the same way as the rungs below.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one 256-thread block per 128x256 tile of C, 8 warps in a 2x4 grid, each warp
// 64x64 = 4x8 mma.sync.m16n8k16 tiles (128 FP32 accumulators per thread); K in slices of 32
// through a 4-stage cp.async pipeline (96 KiB of swizzled shared memory); ~250 registers, so one
// block per SM.
// Precision: FP16 operands, FP32 accumulation in the mma registers, FP32 output.
//
// What it adds over mma_ldmatrix_swizzle:
//  * a 64x64 warp tile (was 64x32): per k-step a warp issues 4 + 4 ldmatrix.x4 for 32 mma (was
//    4 + 2 for 16), so shared-memory bandwidth per FLOP drops by a third, and a 128x256 block tile
//    halves the global/L2 traffic per FLOP for B.
//  * register double buffering: the ldmatrix of k-step s+1 are issued before the mma of k-step s,
//    so the Tensor Cores never wait on shared-memory latency; the one __syncthreads per slice sits
//    between the two k-steps where it costs least.
//  * block rasterisation: consecutive blocks sweep 8 tile-rows before moving right, so the blocks
//    resident at one time share their A and B panels in L2.
// Expected on H200: ~400-480 TFLOP/s at 4096^3 and 8192^3 (0.55-0.65x cuBLAS). mma.sync on Hopper
// cannot reach cuBLAS, which uses wgmma (asynchronous warpgroup MMA) and TMA.
//
// Edges: predicated cp.async (zero-fill past M, N, K); this launcher takes the 16-byte path only,
// so it needs K and N multiples of 8 - the production gemm_f16 also has the scalar-load path.
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/check.cuh"
#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::bench {
namespace {

using cuda::gemm_tiles::GemmProblem;
using cuda::gemm_tiles::WarpTiledShape;

__global__ void __launch_bounds__(WarpTiledShape::kThreads, 1) mma_warp_tiled_kernel(GemmProblem p) {
  extern __shared__ __align__(128) uint16_t smem[];
  cuda::gemm_tiles::warp_tiled_gemm_block<WarpTiledShape, false, false, true>(p, smem);
}

}  // namespace

const char* gemm_mma_warp_tiled(const DenseGemm& g) {
  using S = WarpTiledShape;
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (16-byte cp.async)";
  // Opt in to more than 48 KiB of dynamic shared memory, once.
  static const bool configured = [] {
    HG_CUDA_CHECK("mma_warp_tiled", cudaFuncSetAttribute(mma_warp_tiled_kernel,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes));
    return true;
  }();
  (void)configured;
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  const int64_t blocks = ((g.M + S::kBlockM - 1) / S::kBlockM) * ((g.N + S::kBlockN - 1) / S::kBlockN);
  mma_warp_tiled_kernel<<<static_cast<unsigned>(blocks), S::kThreads, S::kSmemBytes, cuda::stream()>>>(p);
  HG_CUDA_LAUNCH_CHECK("mma_warp_tiled");
  return nullptr;
}

}  // namespace halfgrad::bench
