// conv_split_k.h - how many slices of K the Tensor Core implicit GEMM of conv3d's fprop and dgrad
// (tc_igemm, conv3d_fprop_cuda.cu) splits its reduction into, and the test switch that forces a count.
// Plain C++ (conv_split_k.cpp), so the rule is testable without a GPU. Private to ops/conv/, tests/
// and bench/: programs call conv3d (ops/conv/conv3d.h) and never choose.
//
// Why: the deepest U-Net layer (256 -> 256 channels at 4^3, batch 4) is a GEMM of M = 256 rows,
// N = 256 columns and K = 27 * 256 = 6912. With 128 x 128 tiles that is 4 blocks on a 132-SM H200,
// each walking all 216 K-blocks alone, latency-bound (bench/NOTES.md). Split-K gives each of S
// slices of K its own block (gridDim.z), which writes its FP32 partial tile to a workspace; a second
// kernel adds the S partials in slice order (deterministic) and applies the epilogue (bias, output
// dtype, scatter). The weight gradient splits its long M the same way (conv3d_wgrad_cuda.cu).
//
// The rule (split_k_slices), for `tiles` output tiles of a K of `k_blocks` 32-wide K-blocks, on a GPU
// that holds `wave` blocks of the kernel at once (SM count x the blocks one SM holds, which
// tc_igemm_slices asks the occupancy calculator for):
//   S = min(floor(wave / tiles), floor(k_blocks / kMinSliceKBlocks), floor(kMaxPartialFloats / (M N)))
//   and S = 1 (no split) when that is < 2.
//   * floor(wave / tiles): at most one wave of resident blocks, so no slice waits for another to end.
//     More resident blocks is the point: this kernel is latency-bound, each warp reaching about the
//     same rate whatever its block (bench/NOTES.md), so an SM's rate grows with its warps.
//   * kMinSliceKBlocks = 8 (256 of K): a slice's fixed costs (the row table, the two-slice cp.async
//     prologue, storing a 128 x 128 FP32 partial of 64 KiB) stay below ~1/4 of its main loop.
//   * at most kMaxPartialFloats = 16 Mi FP32 (64 MiB) of partials, as the weight gradient's splits.
// Worked figures (H200: 132 SMs; sm_90 ptxas: the 128 x 128 kernel uses 125-128 registers for 256
// threads, so 2 blocks an SM, wave 264; the 128 x 64 one 160-168 for 128 threads, 3 an SM, wave 396):
//   256 -> 256 at 4^3, batch 4:  M = 256,  tiles 2 x 2 = 4,  k_blocks 216: min(66, 27) = 27 slices of
//                                8 K-blocks, 108 blocks, partials 27 x 256 x 256 x 4 B = 7.1 MB
//   256 -> 256 at 4^3, batch 16: M = 1024, tiles 8 x 2 = 16, k_blocks 216: min(16, 27) = 16 slices
//   128 -> 128 at 8^3, batch 4:  M = 2048, tiles 16,          k_blocks 108: min(16, 13) = 13 slices
//   128 -> 128 at 8^3, batch 16: M = 8192, tiles 64,          k_blocks 108: min(4, 13) = 4 slices
//   64 -> 64 at 16^3, batch 4:   M = 16384, 128 tiles of 128 x 64, k_blocks 54: min(3, 6) = 3 slices
//   64 -> 64 at 16^3, batch 16:  512 tiles > 396: no split.
#pragma once
#include <cstdint>

namespace halfgrad::ops::conv {

constexpr int kMinSliceKBlocks = 8;                       // K-blocks (of 32) a slice walks at least
constexpr int64_t kMaxPartialFloats = int64_t{16} << 20;  // FP32 partials a split may allocate (64 MiB)

/// The number of K slices S >= 1 for a GEMM of `tiles` output tiles, `k_blocks` K-blocks and an
/// M x N output on a GPU that holds `wave` of its blocks at once, by the rule of the file comment.
/// Pure arithmetic; throws halfgrad::Error naming the arguments where any of them is < 1.
int split_k_slices(int64_t tiles, int64_t k_blocks, int64_t M, int64_t N, int64_t wave);

/// The slice count a ForceSplitK on this thread asks for, or 0 when none lives (the rule decides).
int forced_split_k();

/// While an instance lives, tc_igemm on the constructing thread splits K into exactly `slices` slices
/// (1: the unsplit kernel, the oracle of the split one; more slices than K-blocks leaves some slices
/// empty, which is legal and tested). Nests (restores the previous state on destruction). Throws
/// halfgrad::Error where slices is outside 1..65535 (the grid's z extent).
class ForceSplitK {
 public:
  explicit ForceSplitK(int slices);
  ~ForceSplitK();
  ForceSplitK(const ForceSplitK&) = delete;
  ForceSplitK& operator=(const ForceSplitK&) = delete;

 private:
  int previous_;
};

}  // namespace halfgrad::ops::conv
