// Half conversion: bit-exact round trip of all 65,536 patterns, round-to-nearest-even, overflow at
// 65520, subnormals; the F16C bulk path agrees with the scalar path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"

using namespace halfgrad;

static uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

TEST_CASE("core: half all 65536 bit patterns round-trip through float") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    const uint16_t back = float_to_half_bits(f);
    const bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    if (is_nan) {
      CHECK(std::isnan(f));
      CHECK((back & 0x7c00u) == 0x7c00u);
      CHECK((back & 0x3ffu) != 0);
    } else {
      REQUIRE_MESSAGE(back == h, "pattern " << h << " -> " << f << " -> " << back);
    }
  }
}

TEST_CASE("core: half known values and rounding") {
  CHECK(float_to_half_bits(0.0f) == 0x0000);
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits(65519.996f) == 0x7bff);   // just below the midpoint: stays finite
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);     // the midpoint ties to even = inf
  CHECK(float_to_half_bits(1e6f) == 0x7c00);
  CHECK(float_to_half_bits(-1e6f) == 0xfc00);
  CHECK(float_to_half_bits(INFINITY) == 0x7c00);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -24)) == 0x0001);      // smallest subnormal
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);      // half of it: tie to even (0)
  CHECK(float_to_half_bits(std::ldexp(3.0f, -26)) == 0x0001);      // 0.75 ulp rounds up
  CHECK(float_to_half_bits(std::ldexp(3.0f, -25)) == 0x0002);      // 1.5 ulp: tie to even (2)
  CHECK(float_to_half_bits(std::ldexp(5.0f, -25)) == 0x0002);      // 2.5 ulp: tie to even (2)
  CHECK(float_to_half_bits(std::ldexp(1.0f, -14)) == 0x0400);      // smallest normal
  CHECK(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie between 1 and 1+2^-10 -> even
  CHECK(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie -> even (2)
  CHECK(std::isnan(half_bits_to_float(float_to_half_bits(NAN))));
  CHECK(half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_bits_to_float(0x3555) == doctest::Approx(0.333251953125));
}

TEST_CASE("core: half rounding matches exact nearest-even on random floats, bulk path equals scalar") {
  std::mt19937 rng(7);
  std::vector<float> src;
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns over the exponent range that reaches half (and a bit beyond).
    uint32_t u = (rng() & 0x807fffffu) | ((100u + rng() % 45u) << 23);
    src.push_back(float_of(u));
  }
  std::vector<uint16_t> bulk(src.size());
  float_to_half_array(src.data(), bulk.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    const float f = src[i];
    const uint16_t h = float_to_half_bits(f);
    REQUIRE(bulk[i] == h);
    // Nearest: no other half is closer; ties go to the even mantissa.
    const double v = f, got = half_bits_to_float(h);
    if (std::isinf(got)) { REQUIRE(std::fabs(v) >= 65520.0); continue; }
    const uint16_t up = static_cast<uint16_t>(h + 1), down = static_cast<uint16_t>(h - 1);
    for (uint16_t n : {up, down}) {
      if ((n & 0x7fffu) >= 0x7c00u || ((n ^ h) & 0x8000u)) continue;
      const double other = half_bits_to_float(n);
      REQUIRE(std::fabs(v - got) <= std::fabs(v - other));
      if (std::fabs(v - got) == std::fabs(v - other)) REQUIRE((h & 1u) == 0);
    }
  }
  (void)bits_of;
}

TEST_CASE("core: tensor to(float16) rounds, to(float32) is exact") {
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f, 65520.0f, 1e-8f, -2.5f, 0.1f}, {5});
  Tensor h = t.to(kFloat16);
  CHECK(h.dtype() == kFloat16);
  CHECK(h.item_at(0) == 1.0);
  CHECK(std::isinf(h.item_at(1)));
  CHECK(h.item_at(2) == 0.0);
  CHECK(h.item_at(3) == -2.5);
  CHECK(h.item_at(4) == 0.0999755859375);
  Tensor back = h.to(kFloat32);
  CHECK(back.item_at(4) == static_cast<double>(round_to_half(0.1f)));
}
