// warp_tile.cuh - one warp's share of an mma.sync.m16n8k16 block computation, written once for the
// GEMM (ops/matmul/gemm_mma_tiles.cuh) and the four implicit-GEMM convolutions (ops/conv/): the
// accumulator tile, the shared-memory tile layouts, the fragment loads by layout, and the mma loop.
// What stays with each kernel is what it alone knows: how a slice of its operands gets into shared
// memory (the GEMM's predicated tile copy, a convolution's gather or halo), its pipeline schedule's
// hooks (pipeline.cuh runs the schedules) and its epilogue.
//
// The warp tile: kMmaM x kMmaN instructions of 16 x 8, kMmaM * kMmaN * 4 FP32 accumulators per lane
// (WarpAccumulator). One k-step multiplies A's kMmaM fragments (16 m x 16 k each) by B's kMmaN (16 k x
// 8 n each): kMmaM * kMmaN mma.sync, each accumulator summed over k in k-step order, so two kernels
// that walk K in the same order get the same bits whatever their tiles.
//
// Shared-memory tiles are 16-bit words, `rows` x `cols` with cols contiguous, in one of two layouts:
//   PaddedRows<kPitch>   row r at r * kPitch words; kPitch = cols + 8 puts the eight 16-byte rows that
//                        one ldmatrix phase reads on eight different bank groups when kPitch * 2 is an
//                        odd multiple of 16 bytes (the convolutions).
//   SwizzledRows<kCols>  dense rows of kCols words, 16-byte chunk c of row r stored at chunk
//                        c ^ (r % 8) (rows of 128 bytes or more) or c ^ ((r / 2) % 4) (rows of 64
//                        bytes): no padding, every chunk still 16-byte aligned (the GEMM; the
//                        derivation is in gemm_mma_tiles.cuh).
// and either operand keeps K contiguous (rows are m or n: ldmatrix) or M / N contiguous (rows are k:
// ldmatrix.trans); fragment.cuh's LdmatrixX4 gives each lane's (row, col) for both.
//
// Internal: .cu / .cuh files only; sm_80 or newer.
#pragma once
#include <cstdint>

#include "ops/tensor_core/fragment.cuh"
#include "ops/tensor_core/ptx.cuh"

namespace halfgrad::cuda::tensor_core {

// ---- tile layouts ---------------------------------------------------------------------------------
/// Rows kPitch 16-bit words apart, unswizzled (file comment).
template <int kPitch>
struct PaddedRows {
  __device__ __forceinline__ static int offset(int row, int col) { return row * kPitch + col; }
};

/// Dense rows of kCols 16-bit words, 16-byte chunks XOR-swizzled by the row (file comment).
template <int kCols>
struct SwizzledRows {
  static constexpr int kChunks = kCols / 8;
  static_assert(kChunks == 4 || kChunks % 8 == 0, "swizzle defined for 64-byte rows or multiples of 128 bytes");
  __device__ __forceinline__ static int chunk(int row, int c) {
    if constexpr (kChunks == 4) return c ^ ((row >> 1) & 3);
    else return c ^ (row & 7);
  }
  /// Word offset of (row, col), col the first word of a 16-byte chunk (a multiple of 8: every
  /// ldmatrix row address and every cp.async destination is one).
  __device__ __forceinline__ static int offset(int row, int col) { return row * kCols + chunk(row, col >> 3) * 8; }
};

// ---- fragment loads by layout ---------------------------------------------------------------------
/// One operand tile in shared memory: Layout (PaddedRows or SwizzledRows) and whether its rows are m
/// (or n) with K contiguous (kKContiguous) or k with M (or N) contiguous.
template <class Layout, bool kKContiguous>
struct SmemOperand {
  /// The tile's (row, col) of element (mn, k): which of the two runs along a row.
  __device__ __forceinline__ static int offset(int mn, int k) {
    return kKContiguous ? Layout::offset(mn, k) : Layout::offset(k, mn);
  }
  /// A's fragment of the 16 x 16 piece at (m0, k0), tile at shared byte address `tile`; `at` is
  /// LdmatrixX4::a<kKContiguous>(lane).
  __device__ __forceinline__ static void load_a(uint32_t (&a)[4], uint32_t tile, int m0, int k0, LaneCoord at) {
    const int off = kKContiguous ? Layout::offset(m0 + at.row, k0 + at.col) : Layout::offset(k0 + at.row, m0 + at.col);
    LdmatrixX4::load_a<kKContiguous>(a, tile + 2 * off);
  }
  /// B's fragments of n8 blocks n0 (b0) and n0 + 8 (b1) at k0; `at` is LdmatrixX4::b_pair<kKContiguous>(lane).
  __device__ __forceinline__ static void load_b_pair(uint32_t (&b0)[2], uint32_t (&b1)[2], uint32_t tile, int n0, int k0,
                                                     LaneCoord at) {
    const int off = kKContiguous ? Layout::offset(n0 + at.row, k0 + at.col) : Layout::offset(k0 + at.row, n0 + at.col);
    LdmatrixX4::load_b_pair<kKContiguous>(b0, b1, tile + 2 * off);
  }
};

/// The fragments of one k-step of a kMmaM x kMmaN warp tile, loaded from operand tiles A and B
/// (SmemOperand types): a[i] is m16 tile i, b[j] n8 tile j.
template <int kMmaM, int kMmaN>
struct WarpFragments {
  static_assert(kMmaN % 2 == 0, "B fragments come two n8 tiles per ldmatrix.x4");
  uint32_t a[kMmaM][4];
  uint32_t b[kMmaN][2];

  /// Loads k-step k0's fragments: the warp tile's corner is (warp_m0, warp_n0) of the tiles at shared
  /// byte addresses a_tile and b_tile.
  template <class A, class B>
  __device__ __forceinline__ void load(uint32_t a_tile, uint32_t b_tile, int warp_m0, int warp_n0, int k0, LaneCoord a_at,
                                       LaneCoord b_at) {
#pragma unroll
    for (int i = 0; i < kMmaM; ++i) A::load_a(a[i], a_tile, warp_m0 + i * Mma16816::kM, k0, a_at);
#pragma unroll
    for (int j = 0; j < kMmaN; j += 2) B::load_b_pair(b[j], b[j + 1], b_tile, warp_n0 + j * Mma16816::kN, k0, b_at);
  }
};

// ---- the accumulator tile -------------------------------------------------------------------------
/// One warp's kMmaM x kMmaN tiles of mma.sync.m16n8k16 FP32 accumulators (file comment); the (row,
/// col) of each register is Mma16816Accumulator's (fragment_map.h).
template <int kMmaM, int kMmaN>
struct WarpAccumulator {
  static constexpr int kM = kMmaM, kN = kMmaN;
  float v[kMmaM][kMmaN][4];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < kMmaN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[i][j][e] = 0.f;
  }
  /// v[i][j] += a * b, one instruction (T: __half or __nv_bfloat16 operands).
  template <typename T>
  __device__ __forceinline__ void mma(int i, int j, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_m16n8k16<T>(v[i][j], a, b);
  }
  /// Row i of the tile: v[i][j] += a * b[j] for every j (one A fragment against the k-step's B).
  template <typename T>
  __device__ __forceinline__ void mma_row(int i, const uint32_t (&a)[4], const uint32_t (&b)[kMmaN][2]) {
#pragma unroll
    for (int j = 0; j < kMmaN; ++j) mma_m16n8k16<T>(v[i][j], a, b[j]);
  }
  /// The whole k-step: v[i][j] += a[i] * b[j].
  template <typename T>
  __device__ __forceinline__ void mma(const uint32_t (&a)[kMmaM][4], const uint32_t (&b)[kMmaN][2]) {
#pragma unroll
    for (int i = 0; i < kMmaM; ++i) mma_row<T>(i, a[i], b);
  }
  template <typename T>
  __device__ __forceinline__ void mma(const WarpFragments<kMmaM, kMmaN>& f) {
    mma<T>(f.a, f.b);
  }
  /// f(i, j, h, row, col, v0, v1) for every accumulator pair of the lane: pair h (registers 2h, 2h + 1)
  /// of tile (i, j), at (row, col) and (row, col + 1) of the warp tile.
  template <class F>
  __device__ __forceinline__ void for_each_pair(int lane, F&& f) const {
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < kMmaN; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          f(i, j, h, i * Mma16816::kM + Mma16816Accumulator::pair_row(lane, h),
            j * Mma16816::kN + Mma16816Accumulator::pair_col(lane), v[i][j][2 * h], v[i][j][2 * h + 1]);
  }
  /// f(row, col, value) for every accumulator of the lane, (row, col) in the warp tile.
  template <class F>
  __device__ __forceinline__ void for_each(int lane, F&& f) const {
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < kMmaN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          f(i * Mma16816::kM + Mma16816Accumulator::row(lane, e), j * Mma16816::kN + Mma16816Accumulator::col(lane, e),
            v[i][j][e]);
  }
};

}  // namespace halfgrad::cuda::tensor_core
