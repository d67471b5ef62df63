// philox.h - the Philox4x32-10 counter-based random number generator (Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the Random123 library's philox4x32 with
// 10 rounds), shared by CPU loops and CUDA kernels (HALFGRAD_HD).
//
// A counter-based generator is a keyed bijection: philox4x32_10(counter, key) gives 4 random 32-bit
// words for any 128-bit counter, with no state carried from one call to the next. A kernel that
// numbers its random draws (voxel i takes counter i) therefore gets the same numbers whatever its
// launch configuration, thread count or scheduling, and the CPU reference gets them too.
//
// One round: (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2 (32 x 32 -> 64-bit products), then
// c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0); between rounds the key grows by the Weyl constants
// (W0, W1). Checked against Random123's known-answer vectors (kat_vectors; tests/core/philox_test.cpp).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace halfgrad::philox {

struct Words4 {
  uint32_t v[4];
};

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // the round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // the key schedule's increments (golden ratio, sqrt(3) - 1)

/// The 4 words of Philox4x32-10 for `counter` under the 64-bit key (k0, k1).
HALFGRAD_HD inline Words4 philox4x32_10(Words4 c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.v[0], p1 = static_cast<uint64_t>(kM1) * c.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = Words4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
  }
  return c;
}

/// The words of element `index` of stream `stream` under a 64-bit `key`: counter (index's low and
/// high 32 bits, stream, 0), key (key's low and high 32 bits).
HALFGRAD_HD inline Words4 draw(uint64_t key, uint32_t stream, uint64_t index) {
  return philox4x32_10(Words4{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), stream, 0u}},
                       static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
}

/// A double uniform in (0, 1) from two words: 52 random bits (the top 26 of each) plus half a step,
/// exact in a double, so that it is never 0 or 1 (the logarithm of Box-Muller stays finite).
HALFGRAD_HD inline double uniform_open(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a >> 6) << 26) | (b >> 6);
  return (static_cast<double>(bits) + 0.5) * (1.0 / 4503599627370496.0);  // 2^-52
}

/// A double uniform in [-1, 1) from two words (53 random bits), as 2 u - 1 of a uniform u in [0, 1).
HALFGRAD_HD inline double uniform_signed(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a >> 5) << 26) | (b >> 6);
  return static_cast<double>(bits) * (2.0 / 9007199254740992.0) - 1.0;
}

/// One standard normal from the 4 words (Box-Muller, Box and Muller 1958, cosine branch):
/// sqrt(-2 ln u1) cos(2 pi u2), u1 from words 0-1 and u2 from words 2-3, in double precision.
HALFGRAD_HD inline double normal(const Words4& w) {
  const double u1 = uniform_open(w.v[0], w.v[1]), u2 = uniform_open(w.v[2], w.v[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

}  // namespace halfgrad::philox
