// padded_volume.h - zero-padded copies of input samples for the direct convolution kernels (internal to
// ops/conv/). A padded sample xp is (Cin, D + 2pd, H + 2ph, W + 2pw), dense row-major, so the input
// position an output at (z, y, x) reads through tap (i, j, l) is xp[c, z + i, y + j, x + l] for stride 1
// and dilation 1: no bounds checks in the kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// The extents of a padded sample.
struct Padded {
  int64_t dp, hp, wp;
  int64_t plane() const { return hp * wp; }
  int64_t channel() const { return dp * hp * wp; }
  int64_t sample(int64_t cin) const { return cin * channel(); }
};

inline Padded padded_extents(const ConvGeometry& g) { return {g.d + 2 * g.p[0], g.h + 2 * g.p[1], g.w + 2 * g.p[2]}; }

/// A buffer of the calling thread (kept across calls, shared with its OpenMP team) holding `samples`
/// padded samples back to back: as many as fit in kPaddedGroupFloats (at least 1, at most N), so that
/// the planes of small volumes from several samples can be shared out among the threads.
struct PaddedGroup {
  float* xp;
  int64_t samples;
};
constexpr int64_t kPaddedGroupFloats = int64_t{4} << 20;  // 16 MiB
PaddedGroup padded_group(const ConvGeometry& g, const Padded& P);

/// Samples [n0, n0 + nb) of x (N, Cin, D, H, W) padded with zeros into xp. An orphaned `omp for`:
/// every thread of the enclosing parallel region must call it; it ends in a barrier.
void pad_samples(const ConvGeometry& g, const Padded& P, const float* x, int64_t n0, int64_t nb, float* xp);

/// A per-thread buffer of at least n floats (grown on demand, kept across calls; its first n floats
/// poisoned on every call when the allocator's poison is on, see core/allocator.h).
inline float* grow(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(n);
  cpu_poison_fill(buf.data(), sizeof(float) * static_cast<size_t>(n));
  return buf.data();
}

}  // namespace halfgrad::ops::conv
