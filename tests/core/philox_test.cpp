// philox_test.cpp - core/philox.h against Random123's known-answer vectors (kat_vectors, the
// philox4x32 10 lines: counter, key, expected output, all hex 32-bit words), and the uniform and
// normal maps built on it.
#include <doctest/doctest.h>

#include <cmath>

#include "core/philox.h"

using namespace halfgrad;

TEST_CASE("philox4x32_10 matches Random123's known-answer vectors") {
  struct Kat {
    philox::Words4 counter;
    uint32_t k0, k1;
    philox::Words4 expected;
  };
  const Kat kats[] = {
      {{{0u, 0u, 0u, 0u}}, 0u, 0u, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const philox::Words4 got = philox::philox4x32_10(k.counter, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) CHECK(got.v[i] == k.expected.v[i]);
  }
  // draw(): counter (index low, index high, stream, 0), key (low, high).
  const philox::Words4 d = philox::draw(0x299f31d0a4093822ull, 0x13198a2eu, 0x85a308d3243f6a88ull);
  const philox::Words4 want = philox::philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0u}}, 0xa4093822u, 0x299f31d0u);
  for (int i = 0; i < 4; ++i) CHECK(d.v[i] == want.v[i]);
}

TEST_CASE("philox uniform_open stays inside (0, 1), uniform_signed inside [-1, 1)") {
  CHECK(philox::uniform_open(0u, 0u) > 0.0);
  CHECK(philox::uniform_open(0xffffffffu, 0xffffffffu) < 1.0);
  CHECK(philox::uniform_signed(0u, 0u) == -1.0);
  CHECK(philox::uniform_signed(0xffffffffu, 0xffffffffu) < 1.0);
  CHECK(philox::uniform_signed(0x80000000u, 0u) == 0.0);
}

TEST_CASE("philox normal(): mean 0 and sd 1 over 200000 draws of one key") {
  const int64_t n = 200000;
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = philox::normal(philox::draw(12345, 0, static_cast<uint64_t>(i)));
    sum += v;
    sq += v * v;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  CHECK(std::fabs(mean) < 5.0 / std::sqrt(static_cast<double>(n)));  // 5 standard errors
  CHECK(std::fabs(sd - 1.0) < 0.01);
}
