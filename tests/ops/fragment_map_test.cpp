// ops/tensor_core/fragment_map.h: where each lane's share of a Tensor Core instruction lies, checked on
// the CPU against the PTX ISA's fragment figures (PTX ISA 8.x, "Matrix Fragments for mma.m16n8k16
// with floating point type" and "Register Fragments and Shared Memory Matrix Layouts" of wgmma
// .m64nNk16; ldmatrix: "Warp-level matrix load instruction: ldmatrix"). Each map must cover its tile
// exactly once over the 32 lanes, and agree with the figures' rule for the registers' order, which
// the kernels' epilogues and fragment loads now take from these functions alone.
#include <doctest/doctest.h>

#include <cstddef>
#include <set>
#include <utility>

#include "ops/tensor_core/fragment_map.h"

using namespace halfgrad::cuda::tensor_core;

TEST_CASE("tensor_core: the m16n8k16 accumulator map covers the 16 x 8 tile once; register e of lane l is (l/4 + 8(e/2), 2(l%4) + e%2)") {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 4; ++e) {
      const int r = Mma16816Accumulator::row(lane, e), c = Mma16816Accumulator::col(lane, e);
      CHECK(r >= 0);
      CHECK(r < 16);
      CHECK(c >= 0);
      CHECK(c < 8);
      seen.insert({r, c});
      // The figure: "groupID = %laneid >> 2, threadID_in_group = %laneid % 4; row = groupID for c0, c1
      // and groupID + 8 for c2, c3; col = threadID_in_group * 2 + (i & 0x1)".
      CHECK(r == (lane >> 2) + (e >= 2 ? 8 : 0));
      CHECK(c == (lane % 4) * 2 + (e & 1));
    }
    // The pairs the epilogues store: registers 2h, 2h + 1 at (pair_row(h), pair_col) and the next column.
    for (int h = 0; h < 2; ++h) {
      CHECK(Mma16816Accumulator::pair_row(lane, h) == Mma16816Accumulator::row(lane, 2 * h));
      CHECK(Mma16816Accumulator::pair_col(lane) + 1 == Mma16816Accumulator::col(lane, 2 * h + 1));
    }
  }
  CHECK(seen.size() == 16 * 8);
}

TEST_CASE("tensor_core: the m16n8k16 B register map covers the 16 x 8 operand once; half c of register r of lane l is B(2(l%4) + c + 8r, l/4)") {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) {
        const int k = Mma16816BFragment::row(lane, r, c), n = Mma16816BFragment::col(lane);
        // The figure: "row = threadID_in_group * 2 + (i & 0x1) for b0, b1 and + 8 for b2, b3; col = groupID".
        CHECK(k == (lane % 4) * 2 + c + (r == 1 ? 8 : 0));
        CHECK(n == (lane >> 2));
        seen.insert({k, n});
      }
  CHECK(seen.size() == 16 * 8);
}

TEST_CASE("tensor_core: the wgmma m64nNk16 accumulator map covers the 64 x N tile once (N = 64, 128, 256)") {
  for (int n_cols : {64, 128, 256}) {
    std::set<std::pair<int, int>> seen;
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < n_cols / 8; ++j)
          for (int h = 0; h < 2; ++h)
            for (int c = 0; c < 2; ++c) {
              const int r = WgmmaAccumulator::pair_row(warp, lane, h), col = WgmmaAccumulator::pair_col(lane, j) + c;
              // The figure: row = 16 * warp + lane / 4 (+ 8 for the second pair of each group of
              // four registers), col = 8 * (register / 4) + 2 * (lane % 4) + register % 2.
              const int reg = 4 * j + 2 * h + c;
              CHECK(r == 16 * warp + lane / 4 + 8 * ((reg / 2) % 2));
              CHECK(col == 8 * (reg / 4) + 2 * (lane % 4) + reg % 2);
              seen.insert({r, col});
            }
    CHECK(seen.size() == static_cast<std::size_t>(64 * n_cols));
  }
}

namespace {
// ldmatrix.x4: lanes 8q .. 8q + 7 give the row addresses of matrix q, and matrix q lands in register q
// of every lane. For mma.m16n8k16 the A registers a0..a3 are the quarters (rows 0-7, k 0-7), (rows
// 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15); a B pair's registers are b0, b1 of column
// block n0 (k 0-7, k 8-15) then of n0 + 8. The quarter (m or n offset, k offset) matrix q must cover:
std::pair<int, int> a_quarter(int q) { return {8 * (q % 2), 8 * (q / 2)}; }
std::pair<int, int> b_pair_quarter(int q) { return {8 * (q / 2), 8 * (q % 2)}; }
}  // namespace

TEST_CASE("tensor_core: ldmatrix.x4 lane addresses put matrix q on the quarter mma.m16n8k16's register q takes, in both layouts") {
  for (int lane = 0; lane < 32; ++lane) {
    const int q = lane / 8, i = lane % 8;  // matrix q, its row i
    // A, K contiguous: lane points at stored row (m) quarter.m + i, column (k) quarter.k.
    const LaneCoord ak = LdmatrixX4Map::a<true>(lane);
    CHECK(ak.row == a_quarter(q).first + i);
    CHECK(ak.col == a_quarter(q).second);
    // A, M contiguous (stored rows are k; .trans): row (k) quarter.k + i, column (m) quarter.m.
    const LaneCoord am = LdmatrixX4Map::a<false>(lane);
    CHECK(am.row == a_quarter(q).second + i);
    CHECK(am.col == a_quarter(q).first);
    // B pair, K contiguous (stored rows are n): row (n) quarter.n + i, column (k) quarter.k.
    const LaneCoord bk = LdmatrixX4Map::b_pair<true>(lane);
    CHECK(bk.row == b_pair_quarter(q).first + i);
    CHECK(bk.col == b_pair_quarter(q).second);
    // B pair, N contiguous (stored rows are k; .trans): row (k) quarter.k + i, column (n) quarter.n.
    const LaneCoord bn = LdmatrixX4Map::b_pair<false>(lane);
    CHECK(bn.row == b_pair_quarter(q).second + i);
    CHECK(bn.col == b_pair_quarter(q).first);
  }
}
