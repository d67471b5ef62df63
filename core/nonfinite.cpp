// nonfinite.cpp - see nonfinite.h.
#include "core/nonfinite.h"

#include <algorithm>

#include "core/bfloat16.h"
#include "core/cuda/tensor_kernels.h"
#include "core/error.h"
#include "core/half.h"

namespace halfgrad {

namespace {

template <typename Bits>
bool any_nonfinite_bits(const Bits* p, int64_t n, Bits abs_mask, Bits inf_bits) {
  Bits m = 0;
#pragma omp parallel for reduction(max : m) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) m = std::max<Bits>(m, p[i] & abs_mask);
  return m >= inf_bits;
}

template <typename Bits>
void summarise(const Bits* p, int64_t n, Bits abs_mask, Bits inf_bits, NonFiniteSummary* s) {
  for (int64_t i = 0; i < n; ++i)
    if ((p[i] & abs_mask) >= inf_bits) {
      if (s->first < 0) s->first = i;
      ++s->count;
    }
}

}  // namespace

bool any_nonfinite(const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0 || !is_floating(t.dtype())) return false;
  if (t.is_cuda()) return cuda::count_nonfinite(t.raw_data(), t.dtype(), n) > 0;  // one sync per check
  switch (t.dtype()) {
    case kFloat32:
      return any_nonfinite_bits(static_cast<const uint32_t*>(t.raw_data()), n, uint32_t{0x7fffffffu}, uint32_t{0x7f800000u});
    case kFloat64:
      return any_nonfinite_bits(static_cast<const uint64_t*>(t.raw_data()), n, uint64_t{0x7fffffffffffffffull},
                                uint64_t{0x7ff0000000000000ull});
    case kFloat16:
      return any_nonfinite_bits(static_cast<const uint16_t*>(t.raw_data()), n, uint16_t{0x7fffu}, uint16_t{0x7c00u});
    case kBFloat16:  // same bits as a float's upper half: exponent field 0x7f80
      return any_nonfinite_bits(static_cast<const uint16_t*>(t.raw_data()), n, uint16_t{0x7fffu}, uint16_t{0x7f80u});
    case kInt64: return false;
  }
  return false;
}

NonFiniteSummary nonfinite_summary(const Tensor& t) {
  HG_CHECK(!t.defined() || t.device() == Device::CPU, "nonfinite_summary: expected a CPU tensor");
  NonFiniteSummary s;
  if (!t.defined() || t.numel() == 0) return s;
  const void* p = t.raw_data();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case kFloat32: summarise(static_cast<const uint32_t*>(p), n, uint32_t{0x7fffffffu}, uint32_t{0x7f800000u}, &s); break;
    case kFloat64:
      summarise(static_cast<const uint64_t*>(p), n, uint64_t{0x7fffffffffffffffull}, uint64_t{0x7ff0000000000000ull}, &s);
      break;
    case kFloat16: summarise(static_cast<const uint16_t*>(p), n, uint16_t{0x7fffu}, uint16_t{0x7c00u}, &s); break;
    case kBFloat16: summarise(static_cast<const uint16_t*>(p), n, uint16_t{0x7fffu}, uint16_t{0x7f80u}, &s); break;
    case kInt64: break;
  }
  if (s.first >= 0) {
    const int64_t i = s.first;
    switch (t.dtype()) {
      case kFloat32: s.value = static_cast<const float*>(p)[i]; break;
      case kFloat64: s.value = static_cast<const double*>(p)[i]; break;
      case kFloat16: s.value = half_bits_to_float(static_cast<const uint16_t*>(p)[i]); break;
      case kBFloat16: s.value = bfloat16_bits_to_float(static_cast<const uint16_t*>(p)[i]); break;
      case kInt64: break;
    }
  }
  return s;
}

}  // namespace halfgrad
