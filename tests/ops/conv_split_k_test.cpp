// conv_split_k_test.cpp - the split-K rule of the conv implicit GEMM (ops/conv/conv_split_k.h) and the
// ForceSplitK switch the CUDA tests use for their oracle (1 slice) and for chosen slice counts. Host
// logic: runs without a GPU. The figures are the rule's, worked in the header comment; the properties
// (one wave, slices of >= kMinSliceKBlocks, <= 64 MiB of partials) are checked over a grid.
#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "ops/conv/conv_split_k.h"
#include "tests/check_error.h"

using namespace halfgrad;
using halfgrad::ops::conv::forced_split_k;
using halfgrad::ops::conv::ForceSplitK;
using halfgrad::ops::conv::kMaxPartialFloats;
using halfgrad::ops::conv::kMinSliceKBlocks;
using halfgrad::ops::conv::split_k_slices;

namespace {

// The implicit GEMM's tiles for an M x N output: 128 rows; 16, 32, 64 or 128 columns by N.
int64_t tiles_for(int64_t M, int64_t N) {
  const int64_t bn = N <= 16 ? 16 : N <= 32 ? 32 : N <= 64 ? 64 : 128;
  return ((M + 127) / 128) * ((N + bn - 1) / bn);
}
// K-blocks of 32 of a 3x3x3 convolution gathering c channels.
int64_t k_blocks_3x3x3(int64_t c) { return (27 * c + 31) / 32; }

}  // namespace

TEST_CASE("conv split-K rule: the header's worked figures on a 132-SM H200") {
  // (batch, spatial extent S, channels c) of a c -> c 3x3x3 layer: M = batch * S^3, N = c, K = 27 c;
  // wave = 132 SMs x the blocks one SM holds (2 of the 128 x 128 kernel, 3 of the 128 x 64 one, 4 of
  // the 128 x 16 one: sm_90 ptxas register counts, header).
  struct Want {
    int64_t batch, extent, channels, wave;
    int slices;
  };
  const Want cases[] = {
      {4, 4, 256, 264, 27},    // 4 tiles: min(264 / 4 = 66, 216 / 8 = 27)
      {16, 4, 256, 264, 16},   // 16 tiles: min(16, 27)
      {4, 8, 128, 264, 13},    // 16 tiles, 108 K-blocks: min(16, 13)
      {16, 8, 128, 264, 4},    // 64 tiles: min(4, 13)
      {4, 16, 64, 396, 3},     // 128 tiles of 128 x 64, 54 K-blocks: min(3, 6)
      {16, 16, 64, 396, 1},    // 512 tiles: more than a wave, no split
      {16, 64, 16, 528, 1},    // the level-0 layers: thousands of tiles
  };
  for (const Want& c : cases) {
    const int64_t M = c.batch * c.extent * c.extent * c.extent;
    CAPTURE(M);
    CAPTURE(c.channels);
    CHECK(split_k_slices(tiles_for(M, c.channels), k_blocks_3x3x3(c.channels), M, c.channels, c.wave) == c.slices);
  }
}

TEST_CASE("conv split-K rule: at most one wave, slices of at least kMinSliceKBlocks, at most 64 MiB of partials") {
  for (int64_t wave : {1, 16, 78, 132, 264, 528}) {
    for (int64_t M : {1, 100, 256, 1024, 2048, 8192, 1 << 20}) {
      for (int64_t N : {3, 16, 24, 64, 256, 1024}) {
        for (int64_t kb : {1, 7, 8, 15, 34, 108, 216, 5000}) {
          const std::string what = "wave " + std::to_string(wave) + " M " + std::to_string(M) + " N " + std::to_string(N) +
                                   " k_blocks " + std::to_string(kb);
          CAPTURE(what);
          const int64_t tiles = tiles_for(M, N);
          const int s = split_k_slices(tiles, kb, M, N, wave);
          REQUIRE(s >= 1);
          CHECK(split_k_slices(tiles, kb, M, N, 2 * wave) >= s);  // a larger wave never splits less
          if (s == 1) continue;
          CHECK(tiles * s <= wave);                    // one wave
          CHECK(kb / s >= kMinSliceKBlocks);           // every slice long enough
          CHECK(s * M * N <= kMaxPartialFloats);       // the workspace bound
          CHECK(split_k_slices(tiles, kb, M, N, wave) == s);  // pure
        }
      }
    }
  }
  // A full wave of tiles, or a K of fewer than two minimal slices, is never split.
  CHECK(split_k_slices(132, 1000, 132 * 128, 128, 132) == 1);
  CHECK(split_k_slices(1, 2 * kMinSliceKBlocks - 1, 128, 128, 132) == 1);
  CHECK(split_k_slices(1, 2 * kMinSliceKBlocks, 128, 128, 132) == 2);
}

TEST_CASE("conv split-K rule: arguments below 1 are refused, naming them") {
  testing::check_error([] { split_k_slices(0, 8, 1, 1, 132); }, {"conv split-K", "tiles 0", "wave 132"});
  testing::check_error([] { split_k_slices(4, 8, 256, 256, 0); }, {"conv split-K", "wave 0"});
  testing::check_error([] { ForceSplitK f(0); }, {"ForceSplitK", "0 slices", "1..65535"});
  testing::check_error([] { ForceSplitK f(65536); }, {"ForceSplitK", "65536"});
}

TEST_CASE("conv split-K: ForceSplitK sets the slice count on its own thread only, and nests") {
  REQUIRE(forced_split_k() == 0);
  {
    ForceSplitK outer(1);
    CHECK(forced_split_k() == 1);
    int other_thread = -1;
    std::thread t([&] { other_thread = forced_split_k(); });
    t.join();
    CHECK(other_thread == 0);  // thread-local: another thread still follows the rule
    {
      ForceSplitK inner(7);
      CHECK(forced_split_k() == 7);
    }
    CHECK(forced_split_k() == 1);  // the inner guard restored the outer count
  }
  CHECK(forced_split_k() == 0);
}
