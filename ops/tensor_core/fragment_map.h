// fragment_map.h - where each lane's share of a Tensor Core instruction lies, as plain functions
// that host code can call too (tests/ops/fragment_map_test.cpp checks them against the PTX ISA's
// fragment figures on the CPU). The maps and their sources are described in fragment.cuh, which adds
// the loads that use them. No CUDA headers: HG_FRAGMENT_FN is __host__ __device__ under nvcc.
#pragma once

#if defined(__CUDACC__)
#define HG_FRAGMENT_FN __host__ __device__ constexpr
#else
#define HG_FRAGMENT_FN constexpr
#endif

namespace halfgrad::cuda::tensor_core {

/// A lane's position in a tile: row and column (elements) in the tile's stored layout.
struct LaneCoord {
  int row, col;
};

/// mma.sync.m16n8k16's FP32 accumulator (4 registers per lane), as fragment.cuh's file comment maps it.
struct Mma16816Accumulator {
  /// Row of pair h (0: registers 0, 1; 1: registers 2, 3) within the 16 x 8 tile.
  HG_FRAGMENT_FN static int pair_row(int lane, int h) { return lane / 4 + 8 * h; }
  /// Column of both pairs' first value (the second is the next column).
  HG_FRAGMENT_FN static int pair_col(int lane) { return 2 * (lane % 4); }
  /// Row and column of register e (0..3).
  HG_FRAGMENT_FN static int row(int lane, int e) { return pair_row(lane, e / 2); }
  HG_FRAGMENT_FN static int col(int lane, int e) { return pair_col(lane) + e % 2; }
};

/// mma.sync.m16n8k16's B operand (16 k x 8 n) in registers (2 registers of two 16-bit values per
/// lane), for kernels that build it from scalar loads instead of ldmatrix: half c (0: low, 1: high) of
/// register r of lane l holds B(2 (l % 4) + c + 8 r, l / 4) (PTX ISA, "Matrix Fragments for
/// mma.m16n8k16", the B figure).
struct Mma16816BFragment {
  HG_FRAGMENT_FN static int col(int lane) { return lane / 4; }
  HG_FRAGMENT_FN static int row(int lane, int r, int c) { return 2 * (lane % 4) + c + 8 * r; }
};

/// wgmma.m64nNk16's FP32 accumulator (N / 2 registers per lane), warp `warp` (0..3) of the warpgroup.
struct WgmmaAccumulator {
  /// Row of the pairs with h (0 or 1) within the 64-row tile.
  HG_FRAGMENT_FN static int pair_row(int warp, int lane, int h) { return 16 * warp + lane / 4 + 8 * h; }
  /// Column of the first value of pair (j, h): registers 4j + 2h and 4j + 2h + 1 (the second is the
  /// next column). The same for both h.
  HG_FRAGMENT_FN static int pair_col(int lane, int j) { return 8 * j + 2 * (lane % 4); }
};

/// The lane addresses of ldmatrix.x4 for m16n8k16's operands (fragment.cuh's table).
struct LdmatrixX4Map {
  /// A (16 m x 16 k): where lane's row address lies, the tile keeping K contiguous (kKContiguous) or M.
  template <bool kKContiguous>
  HG_FRAGMENT_FN static LaneCoord a(int lane) {
    if constexpr (kKContiguous) return {lane % 16, 8 * (lane / 16)};
    else return {8 * (lane / 16) + lane % 8, 8 * ((lane / 8) % 2)};
  }
  /// The B fragments of two adjacent n8 column blocks (16 n x 16 k): where lane's row address lies,
  /// the tile keeping K contiguous (kKContiguous) or N.
  template <bool kKContiguous>
  HG_FRAGMENT_FN static LaneCoord b_pair(int lane) {
    if constexpr (kKContiguous) return {8 * (lane / 16) + lane % 8, 8 * ((lane / 8) % 2)};
    else return {lane % 16, 8 * (lane / 16)};
  }
};

}  // namespace halfgrad::cuda::tensor_core
