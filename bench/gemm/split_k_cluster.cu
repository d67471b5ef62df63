// split_k_cluster.cu - rung 13 of the GEMM ladder: rung 12 with K split over the two CTAs of a
// thread-block cluster, the partial sums added through distributed shared memory. The block function
// is the production one (ops/matmul/gemm_tma.cuh, warp_specialized_gemm_block with kSplit = 2), on the
// plan gemm_f16 uses (gemm_tma::tile_plan, which may still pick no split). Needs an sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: clusters of 2 CTAs (cudaLaunchKernelEx with a cluster dimension), one CTA per SM,
// each cluster walking 128 x 128 or 128 x 64 tiles; rank r of the cluster computes slices
// [r * ceil(k/2), ...) of the tile's K. Precision: FP16 operands, FP32 accumulation; the two halves
// are added in FP32 in a fixed order (rank 0's + rank 1's): the same bits every run, not the bits of
// the unsplit kernel (another order of the same sums).
//
// What it adds over tile_width: where even 128 x 64 tiles leave SMs idle, or K is long for few tiles
// (1024 x 1024 x 16384: 64 tiles of 128 x 128 for 132 SMs), a second CTA per tile halves each CTA's
// slices. cuBLAS does this with a separate reduction kernel over an FP32 workspace (`splitKreduce_kernel`
// beside its `..._splitK_...` GEMM in the ncu profile of 1024 x 1024 x 16384); here the second CTA
// writes its 64 x w partial per consumer straight into the first CTA's shared memory
// (st.shared::cluster), an mbarrier at cluster scope hands it over, and the first CTA adds and
// stores: no workspace, no second launch. The cost is a 64 (32) KiB reduce buffer taken from the
// ring (4 slots instead of 6 at width 128) and one partial's trip per tile.
// Predicted on H200: 1000^3 and 1024^3 ~+15-25% over rung 12 (128 x 128 split: 128 CTAs of 8 slices
// instead of 64 of 16; the fixed ~6 us of launch, fill and epilogue measured by ncu stay), to
// ~0.9x cuBLAS; 1024 x 1024 x 16384 ~1.6x rung 12's 128 x 64 (0.72x -> ~1.0x).
// Measured (H200, 2026-12-01): 1024 x 1024 x 16384 0.70x -> 0.91x (+30%); everywhere else slower
// than the best unsplit tile (1000^3 0.69x against 0.79x, 4096^3 0.73x against 0.99x), so tile_plan
// splits only from K > 4032 (README, rung 13).
//
// Edges: rung 11's; K and N multiples of 8 (TMA row strides). A cluster's second CTA with no slices
// (K <= 64 would give it none; tile_plan splits only from 64 slices) contributes zeros.
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/runtime.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_split_k_cluster(const DenseGemm& g) {
  const char* op = "split_k_cluster";
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA, clusters)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  // The plan of rungs 12-13 (width and split), without production's pairs (rungs 14 and 16).
  const cuda::gemm_tma::TilePlan plan = cuda::gemm_tma::tile_plan(p, cuda::sm_count(), /*max_split=*/2, /*max_pair=*/1);
  cuda::gemm_tma::launch(p, false, false, cuda::gemm_tma::Schedule::kPersistent, op, cuda::gemm_tma::Store::kTma,
                         plan);
  return nullptr;
}

}  // namespace halfgrad::bench
