// multicast_a_pair.cu - rung 16 of the GEMM ladder: rung 14's 2-CTA clusters turned sideways. The two
// CTAs of a cluster take horizontally adjacent 128 x w tiles (w = 64 or 128), which need the same A
// slices, and share those through TMA multicast (ops/matmul/gemm_tma.cuh, kPair = 2 with kShareA;
// TilePlan::share_a). Needs an sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: clusters of 2 CTAs of 384 threads (1 producer + 2 consumer warpgroups), cluster c
// walking 128 x 2w units c, c + #clusters, ... in the grouped order of width 2w; rank r computes the
// unit's columns r * w .. r * w + w - 1. w: 64 where tile_plan (without splits) picks 64 or 128, 128
// where it picks 256 (pairs of 128 x 256 tiles sharing A would be 128 x 512 units: not built).
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over rung 14: the operand shared is the one the tile reads most of. A 128 x 64 tile's
// slice is 16 KiB of A and 8 KiB of B; rung 14 (sharing B between vertically adjacent tiles) would
// save 4 KiB of it, this rung saves 8: each producer multicasts half of the A slice (K-major: 64 of
// its 128 rows; MN-major: one of its two 64-wide panels) into both CTAs and loads its own B, 16 KiB
// per slice instead of 24 (-33%). On a one-wave problem the narrow tile then costs L2 what a 128 x
// 128 tile does, on twice the SMs: 1000^3 is 64 tiles of 128 x 128 (64 SMs busy, 32 KiB a slice
// each) or 128 tiles of 128 x 64 (128 SMs, 24 KiB, or 16 KiB paired). What the pair costs is rung
// 14's coupling: a slot is refilled only when both CTAs' consumers have released it.
// Why it should help at 1000^3: ncu (2026-12-01) put rung 12's kernels at 12.4 us (width 128, 45 MB
// of L2 traffic) and 13.1 us (width 64, 60 MB) against cuBLAS's 8.6 us (34 MB; 128 x 72 tiles in
// 4 x 2 clusters with multicast), where at 1024^3 (128-byte rows) width 64 takes 8.8 us for 37 MB:
// on the misaligned rows the time follows the L2 traffic, and this rung cuts the narrow tile's by a
// third. Predicted on H200 (before the run), FP16 out, per launch: 1000^3 N/N pair_a_64 +5-15% over
// tile_plan's 128-wide kernel (0.79x -> 0.83-0.90x cuBLAS); 1024^3 +0-10% over the 64-wide plan;
// 4096^3 pair_a_64 +20-30% over tma_store_64 but still below 128 x 256's rate.
// Measured (H200, 2026-12-03, commit 907f61f, forced in --dispatch; results file
// bench/results/2026-12-03_907f61f_h200_pair_a_dispatch.txt, bench/gemm/README.md rung 16): pair_a_64
// under its prediction on all three shapes. 1000^3 N/N per launch: 153 TFLOP/s against 149 for the
// plan's 128-wide tile with FP32 out (0.80x against 0.79x cuBLAS), 152 against 154 with FP16 out
// (0.77x against 0.78x); N/T 0.79x / 0.78x against the plan's 0.81x / 0.83x. ncu, FP32 out: 11.3-11.5
// us against 12.2-12.4 (128 wide) and 13.8 (64 wide, unpaired), cuBLAS 8.7-9.3: the kernel gained
// 6-7%, the launch -1% to +3%. 1024^3: 8% below tma_store_64 (0.81x / 0.79x against 0.88x / 0.86x).
// 4096^3: +6% over tma_store_64 (0.60x / 0.59x against 0.57x / 0.56x). pair_a_128: +4% over
// tma_store_128 at 4096^3 (0.89x / 0.88x against 0.85x) but below rung 14's pair_128 (0.92x / 0.91x);
// -14% / -24% on the U-Net's 147456 x 128 x 32 GEMM (one tile-column: every pair's second tile lies
// outside C). ncu's lts__t_bytes did not fall by the A reads saved (1000^3 pair_a_64 54 MB against
// 61 unpaired, where about 17 MB less was expected; 4096^3 pair_a_128 2.05 GB against 1.90, a rise): either
// the counter counts each multicast delivery or other traffic dominates; which, not established.
// gemm_f16's tile_plan did not share A then: no rule the data supported. With the relaxed cluster
// barriers and the producer's tail (2026-12-04, gemm_tma.cuh) pair_a_64 ran 1000^3 N/N at 0.85x /
// 0.83x cuBLAS, and tile_plan takes it where the rows are not whole sectors and one wave of 128 x 64
// pairs beats the wider tiles (gemm_tma_cuda.cu). This rung keeps the unpaired plan's width
// (tile_plan with max_pair 1) as its starting point.
//
// Edges: rung 12's (TMA skips the parts of a box outside C); where the tile-columns are odd, the last
// unit of a tile-row has a second tile wholly outside C, whose loads are zero fill and whose stores
// are dropped. Any M; K, N multiples of 8.
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/runtime.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_multicast_a_pair(const DenseGemm& g) {
  const char* op = "multicast_a_pair";
  namespace gt = cuda::gemm_tma;
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA, clusters)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  gt::TilePlan plan = gt::tile_plan(p, cuda::sm_count(), /*max_split=*/1, /*max_pair=*/1);
  plan.width = plan.width == 256 ? 128 : 64;  // A-sharing pairs are built for the 128- and 64-wide tiles
  plan.pair = 2;
  plan.share_a = true;
  gt::launch(p, false, false, gt::Schedule::kPersistent, op, gt::Store::kTma, plan);
  return nullptr;
}

}  // namespace halfgrad::bench
