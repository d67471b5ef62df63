// half.h - IEEE 754 binary16 <-> binary32 conversion, bit-exact, with round-to-nearest-even.
//
// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
//   normal:     (-1)^s * 2^(e-15) * 1.m      e in 1..30, largest 65504
//   subnormal:  (-1)^s * 2^-14   * 0.m      e == 0, smallest 2^-24 ~ 5.96e-8
//   inf / NaN:  e == 31
// float -> half rounds to nearest, ties to even; |x| >= 65520 (halfway between 65504 and the next,
// non-existent, value 65536) becomes inf. This is the rounding of CUDA's __float2half_rn and of
// numpy's float16 cast.
#pragma once
#include <cstddef>
#include <cstdint>

namespace halfgrad {

/// Convert a float to the nearest binary16 bit pattern (ties to even). NaN stays NaN (quiet).
uint16_t float_to_half_bits(float f);
/// Convert a binary16 bit pattern to float (exact: every half is representable as a float).
float half_bits_to_float(uint16_t h);

/// Bulk conversions; n elements each. Vectorised with F16C where the compiler allows.
void float_to_half_array(const float* src, uint16_t* dst, size_t n);
void half_to_float_array(const uint16_t* src, float* dst, size_t n);

/// Round a float through half precision and back: the value an FP16 tensor would store.
inline float round_to_half(float f) { return half_bits_to_float(float_to_half_bits(f)); }

constexpr float kHalfMax = 65504.0f;          // largest finite half
constexpr float kHalfMinNormal = 6.103515625e-05f;  // 2^-14
constexpr float kHalfMinSubnormal = 5.960464477539063e-08f;  // 2^-24

}  // namespace halfgrad
