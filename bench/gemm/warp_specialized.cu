// warp_specialized.cu - rung 8 of the GEMM ladder: producer and consumer warpgroups. Its code is the
// production TMA kernel's (ops/matmul/gemm_tma.cuh, warp_specialized_gemm_block), launched here with
// one CTA per output tile (Schedule::kPerTile), so that it is measured the same way as the rungs
// below; rung 9 (persistent.cu) launches the same block function with one CTA per SM. Needs an sm_90
// GPU; the kernel is built for sm_90a in halfgrad_ops.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one 384-thread CTA per 128 x 256 tile of C: warpgroup 0 produces, warpgroups 1
// and 2 consume, each 64 x 256 with wgmma.m64n256k16; K in slices of 64 through a 4-slot ring.
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over tma_mbarrier_pipeline:
//  * warp specialisation: the loads have a warpgroup of their own. One thread of it waits on empty
//    barriers and issues TMA; no consumer ever waits for a slot to be released, only for data, so
//    the two consumer warpgroups keep the Tensor Cores fed from the four slots in flight.
//  * register reallocation (setmaxnreg): the kernel is compiled for 384 threads, at most 168
//    registers each; the producer gives its registers back (dec to 40) and the consumers take them
//    (inc to 232), so 128 accumulators plus addresses fit with room to spare and no spills.
//  * release by arrival: each consumer warpgroup's first thread arrives on the slot's empty barrier
//    (count 2) once wgmma.wait_group 1 says the slice's wgmmas are done.
// Predicted on H200: ~650-700 TFLOP/s at 4096^3 and 8192^3 (0.9-0.95x cuBLAS); what is left is the
// tail of each CTA (its epilogue runs while its SM loads nothing) and the launch of 512 / 2048 CTAs.
// Measured (H200, 2026-12-01): 682 TFLOP/s at 4096^3, 0.93x cuBLAS.
//
// Edges: any M, N, K (TMA zero-fills); K and N multiples of 8 (TMA row strides of 16 bytes).
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

/// Rungs 8 and 9: the TMA kernel over the dense N/N problem with the given schedule.
const char* gemm_tma_schedule(const DenseGemm& g, cuda::gemm_tma::Schedule schedule, const char* name) {
  if (!cuda::gemm_tma::device_supported(name)) return "needs an sm_90 GPU (wgmma, TMA)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  cuda::gemm_tma::launch(p, false, false, schedule, name);
  return nullptr;
}

const char* gemm_warp_specialized(const DenseGemm& g) {
  return gemm_tma_schedule(g, cuda::gemm_tma::Schedule::kPerTile, "warp_specialized");
}

}  // namespace halfgrad::bench
