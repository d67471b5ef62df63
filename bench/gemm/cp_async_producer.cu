// cp_async_producer.cu - rung 18 of the GEMM ladder: the producer warpgroup loads the slices itself,
// all 128 of its threads issuing cp.async 16 bytes at a time, instead of one thread issuing TMA boxes
// (cp_async_producer.cuh: CpAsyncProducer, a producer policy of ops/matmul/gemm_tma.cuh; launched by
// lab_families.cuh's launch_tma_cp_async). Everything else is rung 12's unclustered
// 128 x w tile (w = 64 or 128 as tile_plan picks it without splits). Needs an sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one persistent CTA of 384 threads per SM (1 producer + 2 consumer warpgroups)
// walking 128 x w tiles in the grouped order. Producer thread t copies 16-byte chunks t, t + 128, ...
// of each operand's slice into the slot, in the 128-byte-swizzled layout a TMA box lands in
// (cp_async_operand), and arrives on the slot's full barrier through cp.async.mbarrier.arrive.noinc
// (the barrier expects 128 arrivals instead of one arrival plus a byte count); each consumer thread
// fences the async proxy after its wait, since cp.async writes through the generic proxy and wgmma
// reads through the async one. Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds, and why it should be faster where rows are not whole 32-byte sectors: ncu (README,
// "Row alignment") puts the 64-wide TMA kernel at 13.8 us and 61 MB of L2 traffic at 1000^3
// (2000-byte rows: every other row starts 16 bytes into a sector) against 9.7 us and 41 MB at 1008^3
// (2016-byte rows), and 1016^3 as slow as 1000^3. A 128-byte row that starts mid-sector touches 5
// sectors instead of 4, +12.5% over the tile; the measured +50% is what one would see if TMA fetched
// such a row 16 bytes (one sector access) at a time. A warp's cp.async covers 4 whole rows per
// instruction, which the load unit merges into the sectors the rows touch, 5 per misaligned row.
// What it costs: 12 (w 64) or 16 (w 128) cp.async and address computations per producer thread per
// slice instead of 1-3 TMA instructions by one thread, and a proxy fence per consumer thread per slice.
// Predicted on the H200 (written before the first run), kernel alone (ncu) and per launch
// (--dispatch), N/N, FP32 and FP16 out: 1000^3 cp_async_64 13.8 -> 10.0-10.8 us, L2 61 -> 43-47 MB,
// per launch 0.70x -> 0.80-0.86x cuBLAS (the best family there); cp_async_128 12.3 -> 11.2-11.8 us,
// 0.78x -> 0.80-0.84x. On sector-aligned rows (1024^3, 4096^3) it should lose to the TMA producer:
// 0-10% at 1024^3, 5-15% at 4096^3, where the producer's instruction issue competes with the
// consumers' for the SM's schedulers.
//
// Measured (H200, 2026-12-03, 37885a3; bench/results/2026-12-03_37885a3_h200_cp_async_producer.txt):
// the prediction failed on both counts. ncu, kernel alone, FP32 out: cp_async_128 29.7-30.6 us
// (1000^3) and 29.3-30.1 us (1024^3) against the TMA producer's 12.2-12.9 and 11.1; cp_async_64
// 19.7-20.0 and 19.7-20.3 us against 13.4-13.5 and 9.3. The time does not depend on the row
// alignment: the 128-thread cp.async producer is what limits (issue and latency; not analysed
// further). And the L2 traffic it was to cut rose: at 1000^3 52-58 MB (128 wide) and 70-72 MB (64
// wide) against TMA's 45 and 61, while at 1024^3 it is TMA's (32-35 / 34-37 MB): the cost of
// rows that start mid-sector is not a TMA artefact. --dispatch, 1000^3 N/N per launch: 0.34x /
// 0.50x cuBLAS against 0.79x / 0.71x. The same bits as the TMA producer (the test passed on the H200).
// Not used by gemm_f16.
//
// Edges: any M, N, K: cp.async's source size zero-fills what lies outside A or B, the same bits as
// TMA's zero fill (test: "the cp.async producer fills the tiles TMA fills"); stores as rung 12's.
// Any M; K, N multiples of 8 (16-byte aligned rows).
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/runtime.h"
#include "bench/gemm/lab_families.cuh"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_cp_async_producer(const DenseGemm& g) {
  const char* op = "cp_async_producer";
  namespace gt = cuda::gemm_tma;
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (16-byte aligned rows)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  const gt::TilePlan plan = gt::tile_plan(p, cuda::sm_count(), /*max_split=*/1, /*max_pair=*/1);
  // (The cp.async producer is built for widths 128 and 64.)
  cuda::gemm_lab::launch_tma_cp_async(p, false, false, plan.width == 256 ? 128 : plan.width, gt::Store::kTma, op);
  return nullptr;
}

}  // namespace halfgrad::bench
