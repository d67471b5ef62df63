// multicast_a_cluster.cu - rung 17 of the GEMM ladder: rung 16's A-sharing pair widened to a cluster
// of 4 (or 8) horizontally adjacent 128 x 64 tiles that share A's slices through TMA multicast
// (ops/matmul/gemm_tma.cuh, kPair = 4 or 8 with kShareA; lab_families.cuh launch_tma_cluster). Needs an
// sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: clusters of 4 CTAs of 384 threads (1 producer + 2 consumer warpgroups), cluster c
// walking 128 x 256 units c, c + #clusters, ... in the grouped order of width 256; rank r computes the
// unit's columns 64 r .. 64 r + 63. (gemm_bench --dispatch times the 8-CTA cluster too: oct_a_64.)
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over rung 16: each CTA multicasts a quarter of the 16 KiB A slice (K-major: 32 of its
// 128 rows; MN-major: 32 of the 64 k-rows of one of its two panels) into all four CTAs and loads its
// own 8 KiB of B: 12 KiB of L2 reads per slice instead of rung 16's 16 and rung 12's 24 (8 CTAs: 10).
// cuBLAS's 1000^3 kernel (nvjet 128 x 72 tiles in 4 x 2 clusters) reads about 2 + 8 KiB per slice of
// a comparable tile. What it costs: a slot is refilled only when all 4 CTAs' consumers have released
// it (every release is 1 local + 3 remote arrives), so one slow CTA stalls its cluster; and a
// cluster of 4 must fit in one GPC, which can leave SMs idle (cudaOccupancyMaxActiveClusters; the
// 32 clusters 1000^3 needs are about what 132 SMs hold).
// Why it should help at 1000^3: ncu (2026-12-03, H200) put the 128 x 64 kernel at 13.8 us unpaired
// (24 KiB a slice) and 11.4 us paired (rung 16, 16 KiB), against cuBLAS's 8.6-9.3 us: on this
// one-wave problem the kernel's time falls with the bytes each CTA reads, about 0.3 us per KiB of
// slice. Predicted on the H200 (before the run), per launch, N/N: 1000^3 quad_a_64 +5-10% over
// pair_a_64 (0.80x -> 0.84-0.88x cuBLAS, f32 and f16 out), oct_a_64 within -10..+5% of quad (the
// coupling over 8 CTAs and the 8-CTA clusters that fit may eat the 2 KiB it saves); 1024^3 quad
// between pair_a_64 and tma_store_64 (0.80-0.88x); 4096^3 quad_a_64 +0-10% over pair_a_64, still far
// below 128 x 256 (a 64-wide tile is not the shape for a many-wave problem).
//
// Measured (H200, 2026-12-03, c7d68c7; bench/gemm/README.md, rung 17): the prediction failed. The
// H200 holds 30 clusters of 4 and 15 of 8 (120 CTAs: resident_ctas), 1000^3 and 1024^3 make 32 units
// of 4 (16 of 8), so the persistent grid runs two rounds: 1000^3 0.60x / 0.60x cuBLAS (FP32 / FP16
// out) against pair_a_64's 0.79x / 0.77x, ncu 15.9-16.2 against 11.2-11.3 us; 1024 x 1024 x 16384
// 0.34x, half of pair_a_64's rate. Where one round fits (896 x 1024 x 1024: 28 clusters of 4) the
// quad takes 10.1 us, the pair 10.0 and the unclustered 64-wide kernel 9.2. Not used by gemm_f16.
//
// Edges: rung 16's; where the tile-columns are not a multiple of 4, the last unit of a tile-row has
// tiles wholly right of C, whose B loads are zero fill and whose stores are dropped, while their
// CTAs still multicast their part of A. Any M; K, N multiples of 8.
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/runtime.h"
#include "bench/gemm/lab_families.cuh"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_multicast_a_cluster(const DenseGemm& g) {
  const char* op = "multicast_a_cluster";
  namespace gt = cuda::gemm_tma;
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA, clusters)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  cuda::gemm_lab::launch_tma_cluster(p, false, false, 4, gt::Store::kTma, op);
  return nullptr;
}

}  // namespace halfgrad::bench
