#include "core/bfloat16.h"

#include "core/error.h"

namespace halfgrad {

void float_to_bfloat16_array(const float* src, bfloat16_bits* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i].bits = float_to_bfloat16_bits(src[i]);
}

void bfloat16_to_float_array(const bfloat16_bits* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bfloat16_bits_to_float(src[i].bits);
}

void reduced_to_float_array(Dtype d, const void* src, float* dst, size_t n) {
  if (d == kFloat16) return half_to_float_array(static_cast<const uint16_t*>(src), dst, n);
  if (d == kBFloat16) return bfloat16_to_float_array(static_cast<const bfloat16_bits*>(src), dst, n);
  HG_FAIL("reduced_to_float_array: dtype " << dtype_name(d) << " is not float16 or bfloat16");
}

void float_to_reduced_array(Dtype d, const float* src, void* dst, size_t n) {
  if (d == kFloat16) return float_to_half_array(src, static_cast<uint16_t*>(dst), n);
  if (d == kBFloat16) return float_to_bfloat16_array(src, static_cast<bfloat16_bits*>(dst), n);
  HG_FAIL("float_to_reduced_array: dtype " << dtype_name(d) << " is not float16 or bfloat16");
}

}  // namespace halfgrad
