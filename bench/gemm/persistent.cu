// persistent.cu - rung 9 of the GEMM ladder: a persistent kernel. The block function is rung 8's
// (ops/matmul/gemm_tma.cuh), launched with one CTA per SM instead of one per tile
// (Schedule::kPersistent); this is the kernel that gemm_f16 runs on sm_90. Needs an sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: min(#tiles, #SMs) CTAs of 384 threads (1 producer + 2 consumer warpgroups);
// CTA b computes tiles b, b + #CTAs, ... of the grouped order (8 tile-rows swept column by column).
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over warp_specialized:
//  * a tile scheduler: each CTA walks a list of tiles, and producer and consumers count K slices
//    over the whole list, so the ring of slots never drains between tiles: while the consumers run
//    the epilogue of tile i (128 accumulators to global memory), the producer is already loading the
//    first four slices of tile i + 1 into the slots they released.
//  * the grid is the machine: no second wave of CTAs launched into a partly busy GPU, no per-CTA
//    prologue (barrier init, tensor-map prefetch) repeated per tile.
//  * the grouped order keeps the ~132 tiles in flight on 8 tile-rows of A and ~17 tile-columns of B,
//    so most operand reads hit L2.
// Predicted on H200: ~700-760 TFLOP/s at 4096^3 and 8192^3 (0.95-1.05x cuBLAS). 4096^3 has 512 tiles
// for 132 SMs = 3.9 waves: the last wave's 116 tiles leave 16 SMs idle either way.
// Measured (H200, 2026-12-01): 686 TFLOP/s at 4096^3, 0.93x cuBLAS: +0.5% over rung 8 only.
//
// Edges: any M, N, K (TMA zero-fills); K and N multiples of 8 (TMA row strides of 16 bytes).
#include "bench/gemm/gemm_rungs.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

// Defined in warp_specialized.cu (rung 8): the same launch, another schedule.
const char* gemm_tma_schedule(const DenseGemm& g, cuda::gemm_tma::Schedule schedule, const char* name);

const char* gemm_persistent(const DenseGemm& g) {
  return gemm_tma_schedule(g, cuda::gemm_tma::Schedule::kPersistent, "persistent");
}

}  // namespace halfgrad::bench
