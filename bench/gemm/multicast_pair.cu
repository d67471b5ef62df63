// multicast_pair.cu - rung 14 of the GEMM ladder: rung 12 (persistent, warp-specialised, TMA loads
// and stores, the tile width fitted to the SM count) with the CTAs paired into 2-CTA clusters that
// take vertically adjacent tiles and share their B slices through TMA multicast: rung 10's idea on
// the production kernel (ops/matmul/gemm_tma.cuh, kPair = 2; TilePlan::pair). Needs an sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: clusters of 2 CTAs of 384 threads (1 producer + 2 consumer warpgroups), 128 x w
// tiles (w = 256 or 128: tile_plan's width without splits, 128 where it says 64), cluster c walking
// tile pairs c, c + #clusters, ...; pair q is tiles 2q (rank 0) and 2q + 1 (rank 1) of the grouped
// order: the same 128 x w column panel of C, rows 256q' and 256q' + 128.
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over tile_width: each producer loads its own A slice and HALF of the common B slice,
// multicast into both CTAs' slots (.multicast::cluster, completing on the full barrier at the same
// offset in each), so a slice costs L2 16 KiB of A + w * 64 bytes of B per CTA instead of
// 16 KiB + w * 128: at width 128, 24 KiB instead of 32 (-25%); at 256, 32 instead of 48 (-33%).
// The price is coupling: a slot is refilled only once the consumers of BOTH CTAs released it
// (every consumer arrives on its own empty barrier and, through mapa, on the peer's), and a cluster
// must fit in one GPC.
// Why it should help at 1000^3: 64 tiles of 128 x 128 for 132 SMs, ~13 us against ~4.5 us of wgmma
// work; ncu showed L2 -> SM traffic at 45-60 MB (the 2000-byte rows make every 128-byte box row
// touch an extra sector) against cuBLAS's 36 MB, which pairs its tiles in 4 x 2 clusters with
// multicast. Predicted on H200 (before the run): 1000^3 and 1024^3 +5-10% over tile_width (1000^3
// FP16 out 0.78x -> 0.82-0.86x cuBLAS); 4096^3 and 8192^3 within +-3% (rung 10's -18% there came
// with the register epilogue; here the stores leave by TMA).
// Measured (H200, 2026-12-02, forced pair_256 / pair_128 in --dispatch, FP16 out; results file
// bench/results/2026-12-02_5608d73_h200_pair_dispatch.txt): SLOWER on every shape, far outside the
// prediction. 1000^3: 98 TFLOP/s paired against 153 unpaired at width 128 (0.50x cuBLAS against
// 0.79x); 4096^3: width 128 326 against 635 (almost exactly half), width 256 538 against 744
// (0.72x against 0.99x; rung 10 lost the same 18-28% with its own kernel); 1024 x 1024 x 16384:
// 165 against 366. Every result was correct. The cause was candidate (1)'s cost in another form:
// each remote slot release was mbarrier.arrive.release.cluster, about a GPU-wide fence per K slice
// per consumer. A slot release only has to order this CTA's own (finished) wgmma reads of its
// slot before the peer's multicast overwrites it: CTA scope is enough, as in CUTLASS's
// ClusterBarrier::arrive(cta_id) (ops/tensor_core/tma.cuh, ArriveScope). Predicted: the pair back
// to the unpaired rate or slightly above (+0-5% at 1000^3). Measured with kCta (H200, 2026-12-02,
// results bench/results/2026-12-02_d9ac124_h200_gemm_dispatch.txt), FP16 out: 1000^3 150 (N/N;
// unpaired 151), 149 (N/T; unpaired 159); 4096^3 width 128 676 (unpaired 631), width 256 729
// (unpaired 737); 3072^3 width 128 626 against 572 unpaired (the one shape where a pair beat the
// plan, 0.87x cuBLAS against 0.80x). So the coupling now costs about what the saved L2 reads gain;
// gemm_f16's plan did not pair then (one winning shape is too few to fit a rule on). With the
// relaxed cluster barriers and the producer's tail (2026-12-04, gemm_tma.cuh) it pairs where the rows
// of A or B are not whole 32-byte sectors, the rule in gemm_tma_cuda.cu (tile_plan): 2008^3 width 256
// 0.96x cuBLAS against 0.73x unpaired, 3000^3 0.73x against 0.59x. This rung keeps the unpaired plan's
// width (tile_plan with max_pair 1) and pairs it on every shape.
//
// Edges: rung 12's; M must span an even number of 128-row tile-rows (else n/a), K, N multiples of 8.
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/runtime.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_multicast_pair(const DenseGemm& g) {
  const char* op = "multicast_pair";
  namespace gt = cuda::gemm_tma;
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA, clusters)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  if (gt::tile_count(g.M, 1, 1) % 2 != 0) return "needs an even number of 128-row tile-rows";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  gt::TilePlan plan = gt::tile_plan(p, cuda::sm_count(), /*max_split=*/1, /*max_pair=*/1);
  plan.width = plan.width == 64 ? 128 : plan.width;  // pairs are built for the 256- and 128-wide tiles
  plan.pair = 2;
  gt::launch(p, false, false, gt::Schedule::kPersistent, op, gt::Store::kTma, plan);
  return nullptr;
}

}  // namespace halfgrad::bench
