// tile_width.cu - rung 12 of the GEMM ladder: rung 11 (persistent, warp-specialised, TMA loads and
// TMA stores) on a tile whose width fits the problem to the SM count: 128 x 256 where there are
// enough such tiles, else 128 x 128 or 128 x 64 (ops/matmul/gemm_tma.cuh's TmaTile; the width from
// gemm_tma::tile_plan without splits or pairs: gemm_f16's rule less rungs 13, 14 and 16). Needs an sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: rung 11's (one CTA per SM, 1 producer + 2 consumer warpgroups), tile 128 x w.
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over tma_store_epilogue: nothing inside a tile. A 1000^3 problem has 8 x 4 = 32
// tiles of 128 x 256 for 132 SMs: 100 SMs idle while 32 each do a 128 x 256 x 1000 tile (about 9
// us at the wgmma rate, the whole runtime). With 128 x 64 tiles it has 8 x 16 = 128, one per SM, each
// a quarter of the work. The narrow tile does the same MMAs as 128 x 256 with wgmma.m64n64k16 instead
// of m64n256k16: four times the instructions, barrier waits and A-tile bytes per FLOP (A's 128 x 64
// slice now feeds 64 columns, not 256), so per tile it runs below the wide one's rate; it wins only
// when it occupies SMs the wide tile leaves idle. The ring keeps 192 KiB: 4 slots of 48 KiB (256
// wide), 6 of 32 KiB (128), 8 of 24 KiB (64), so the narrow tiles keep more slices in flight.
// Predicted on H200: at 1000^3 and 1024^3, ~1.6x rung 11 (0.6x cuBLAS -> ~0.95x): 4x the SMs at an
// estimated 0.75 of the per-tile rate, less the fixed cost of the launch and pipeline fill that does
// not shrink; at 3072^3 (288 wide tiles: 2.2 waves, the last one 18% full) 128 x 128 (576 tiles,
// 4.4 waves) ~+10%; at 4096^3 and 8192^3 the 256-wide tile is kept: no change.
// Measured (H200, 2026-12-01, forced widths in --dispatch): 1000^3 0.60x -> 0.78x (128 wide; the
// 64-wide tile 0.70x: rows of 2000 bytes double its L2 traffic), 1024^3 0.57x -> 0.90x (64 wide),
// 3072^3 0.77x -> 0.81x (128), 1024 x 1024 x 16384 0.35x -> 0.72x (64); 4096^3 and up unchanged.
//
// Edges: rung 11's (TMA skips the parts of a box outside C); K and N multiples of 8 (TMA row strides).
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/runtime.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_tile_width(const DenseGemm& g) {
  const char* op = "tile_width";
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  const cuda::gemm_tma::TilePlan plan = cuda::gemm_tma::tile_plan(p, cuda::sm_count(), /*max_split=*/1, /*max_pair=*/1);
  cuda::gemm_tma::launch(p, false, false, cuda::gemm_tma::Schedule::kPersistent, op, cuda::gemm_tma::Store::kTma,
                         plan);
  return nullptr;
}

}  // namespace halfgrad::bench
