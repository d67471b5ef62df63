// bfloat16.h - bfloat16 <-> binary32 conversion, bit-exact, with round-to-nearest-even; and the
// 16-bit-float helpers that dispatch between FP16 (core/half.h) and BF16 by Dtype.
//
// bfloat16: 1 sign bit, 8 exponent bits (bias 127, as FP32), 7 mantissa bits - the top half of an
// FP32 bit pattern.
//   normal:     (-1)^s * 2^(e-127) * 1.m      e in 1..254, largest (2 - 2^-7) * 2^127 ~ 3.3895e38
//   subnormal:  (-1)^s * 2^-126    * 0.m      e == 0, smallest 2^-133 ~ 9.18e-41
//   inf / NaN:  e == 255
// bf16 -> float is exact (append 16 zero bits). float -> bf16 rounds to nearest, ties to even, as
// c10::BFloat16's round_to_nearest_even (c10/util/BFloat16.h): add 0x7fff plus the lowest kept bit,
// then truncate. A carry rounds into the exponent, so a float at or above the midpoint between the
// largest bf16 and 2^128 becomes inf; subnormals round the same way (the formula never special-cases
// them). Every NaN becomes the quiet NaN 0x7fc0 (c10 drops sign and payload too). CUDA's
// __float2bfloat16_rn rounds the same way except that it keeps a NaN's sign.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/half.h"

namespace halfgrad {

/// Storage type of a BFloat16 element (Tensor::data<bfloat16_bits>()): a distinct type, so that
/// DtypeOf<uint16_t> can keep meaning Float16 and a bf16 buffer is never read as half by accident.
struct bfloat16_bits {
  uint16_t bits;
};
static_assert(sizeof(bfloat16_bits) == 2, "bfloat16_bits is the raw 2-byte element");

/// The nearest bfloat16 bit pattern of f (ties to even); NaN -> 0x7fc0 (quiet).
inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN
  const uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding_bias) >> 16);
}
/// A bfloat16 bit pattern as float (exact).
inline float bfloat16_bits_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
/// Round a float through bfloat16 and back: the value a BFloat16 tensor would store.
inline float round_to_bfloat16(float f) { return bfloat16_bits_to_float(float_to_bfloat16_bits(f)); }

/// Bulk conversions; n elements each (plain loops the compiler vectorises).
void float_to_bfloat16_array(const float* src, bfloat16_bits* dst, size_t n);
void bfloat16_to_float_array(const bfloat16_bits* src, float* dst, size_t n);

constexpr float kBFloat16Max = 3.38953138925153547590e38f;  // (2 - 2^-7) * 2^127, largest finite bf16
constexpr float kBFloat16Eps = 0.0078125f;                  // 2^-7, the gap above 1.0

// ---- the two 16-bit floats by Dtype (d must satisfy is_reduced_float) -------------------------------

/// src (n Float16 or BFloat16 elements, as raw bits) -> float. Throws halfgrad::Error for another d.
void reduced_to_float_array(Dtype d, const void* src, float* dst, size_t n);
/// float -> n elements of d (Float16 or BFloat16), rounded to nearest even. Throws for another d.
void float_to_reduced_array(Dtype d, const float* src, void* dst, size_t n);
/// One 16-bit pattern of d as float.
inline float reduced_bits_to_float(Dtype d, uint16_t bits) {
  return d == kBFloat16 ? bfloat16_bits_to_float(bits) : half_bits_to_float(bits);
}
/// f rounded to d and back (identity for Float32 / Float64): the value a d tensor would store.
inline float round_to_dtype(float f, Dtype d) {
  return d == kBFloat16 ? round_to_bfloat16(f) : d == kFloat16 ? round_to_half(f) : f;
}

}  // namespace halfgrad
