#include "core/half.h"

#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace halfgrad {

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // keep payload, force quiet
  }
  // 0x477ff000 is 65520.0f: the midpoint between 65504 (max half) and 65536; it and above round to inf.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {  // below 2^-14: result is subnormal (or zero)
    // 0x33000000 is 2^-25, half of the smallest subnormal; at or below it rounds to zero (tie -> even 0).
    if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exp = abs >> 23;                 // biased float exponent, 102..112
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // with the implicit leading 1
    const uint32_t shift = 126 - exp;               // value = mant * 2^(exp-150); half unit is 2^-24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal range: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  uint32_t h = ((abs >> 13) - ((127u - 15u) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t hbits) {
  const uint32_t h = hbits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0x1fu) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    x = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
    x = sign | ((127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void float_to_half_array(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  // vcvtps2ph with imm 0 = round to nearest even; bit-identical to the scalar path (tested).
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
}

void half_to_float_array(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
  }
#endif
  for (; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}

}  // namespace halfgrad
