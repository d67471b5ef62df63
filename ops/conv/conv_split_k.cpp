// conv_split_k.cpp - the split-K rule and the test switch of conv_split_k.h (plain C++, so the tests
// compile and link without CUDA too).
#include "ops/conv/conv_split_k.h"

#include <algorithm>

#include "core/error.h"

namespace halfgrad::ops::conv {
namespace {

thread_local int forced_slices = 0;  // 0: no ForceSplitK lives on this thread

}  // namespace

int split_k_slices(int64_t tiles, int64_t k_blocks, int64_t M, int64_t N, int64_t wave) {
  HG_CHECK(tiles >= 1 && k_blocks >= 1 && M >= 1 && N >= 1 && wave >= 1,
           "conv split-K: tiles " << tiles << ", K-blocks " << k_blocks << ", M " << M << ", N " << N << " and wave "
                                  << wave << " (resident blocks) must all be >= 1");
  const int64_t one_wave = wave / tiles;                    // every slice's block resident at once
  const int64_t long_slices = k_blocks / kMinSliceKBlocks;  // each slice at least kMinSliceKBlocks
  const int64_t workspace = kMaxPartialFloats / (M * N);    // at most 64 MiB of partials
  const int64_t s = std::min({one_wave, long_slices, workspace, int64_t{65535}});
  return s >= 2 ? static_cast<int>(s) : 1;
}

int forced_split_k() { return forced_slices; }

ForceSplitK::ForceSplitK(int slices) : previous_(forced_slices) {
  HG_CHECK(slices >= 1 && slices <= 65535, "ForceSplitK: " << slices << " slices; expected 1..65535 (the grid's z extent)");
  forced_slices = slices;
}
ForceSplitK::~ForceSplitK() { forced_slices = previous_; }

}  // namespace halfgrad::ops::conv
