// wgmma_hopper.cu - rung 6 (top) of the GEMM ladder: Hopper's warpgroup MMA. Its code is the lab's
// cp.async wgmma kernel (wgmma_cp_async.cuh, wgmma_gemm_block; gemm_f16's Hopper path until the TMA
// kernel replaced it); this file launches it for
// the ladder's dense N/N, FP32-output problem so that it is measured the same way as the rungs below.
// Needs an sm_90 GPU and the sm_90a build target (CMake: its own object library, 90a-real).
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one 256-thread block per 128x256 tile of C = 2 warpgroups (4 warps each) of
// 64x256, one wgmma.m64n256k16 per warpgroup and 16-wide k-step (128 FP32 accumulators per thread);
// K in slices of 64 through a 4-stage cp.async pipeline (192 KiB of shared memory), one block per SM.
// Precision: FP16 operands, FP32 accumulation in the wgmma accumulators, FP32 output.
//
// What it adds over mma_warp_tiled:
//  * warpgroup-wide asynchronous MMA, wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16: 128
//    threads issue one instruction for a 64x256x16 product, where mma.sync needs 4x32 m16n8k16 per
//    warp and the fragments of each loaded by ldmatrix. mma.sync on Hopper runs at about half the
//    Tensor Core rate; wgmma is the only way to the rest.
//  * operands read by the Tensor Cores straight from shared memory through 64-bit matrix
//    descriptors (start address, leading / stride byte offsets, swizzle mode): no ldmatrix, no
//    operand registers, so the 128 accumulators fit at ~220 registers without spills.
//  * the 128-byte swizzle the descriptor names: 16-byte chunk c of each 128-byte row r is stored
//    at c ^ (r % 8), with K slices of 64 halfs = one row. The MN-contiguous B tile (layout N) uses
//    the descriptor's transpose bit instead of ldmatrix.trans.
//  * asynchrony made explicit: wgmma.fence before issuing, commit_group after the four k-steps of a
//    slice, wait_group 1 so that one slice's wgmmas run while the next slice's barrier and loads
//    are issued; fence.proxy.async makes the cp.async writes visible to the Tensor Cores' proxy.
// Predicted on H200: ~550-650 TFLOP/s at 4096^3 and 8192^3 (0.75-0.85x cuBLAS); cuBLAS also uses TMA
// loads, producer/consumer warp specialisation and clusters, which this rung does not.
//
// Edges: predicated cp.async (zero-fill past M, N, K) and stores; needs M, N, K multiples of 8.
#include <cuda_runtime.h>

#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/check.cuh"
#include "bench/gemm/wgmma_cp_async.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_wgmma_hopper(const DenseGemm& g) {
  if (!cuda::gemm_tma::device_supported("wgmma_hopper")) return "needs an sm_90 GPU (wgmma)";
  if (g.M % 8 != 0 || g.N % 8 != 0 || g.K % 8 != 0) return "needs M, N, K multiples of 8";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  cuda::gemm_wgmma::launch(p, false, false, "wgmma_hopper");
  return nullptr;
}

}  // namespace halfgrad::bench
