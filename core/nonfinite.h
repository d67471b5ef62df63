// nonfinite.h - is there a NaN or an inf in a tensor, and where: the check behind anomaly mode
// (autograd/anomaly.h), the finite check of every loaded tensor (core/safetensors.h) and the check
// of a network's output before anything is written from it (halfgrad-unet3d eval, predict).
//
// An IEEE value is NaN or +-inf exactly when its exponent field is all ones, i.e. when its bits
// without the sign are >= the bits of +inf. A max over those integers vectorises (and splits over
// threads), unlike a per-element isnan/isinf with branches.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace halfgrad {

/// Whether any element of `t` (floating, CPU or CUDA, dense storage in either memory format) is NaN
/// or +-inf; false for integer dtypes and empty tensors. A CUDA tensor costs one kernel and one
/// synchronisation.
bool any_nonfinite(const Tensor& t);

/// Where the non-finite values of a CPU tensor are, in storage order.
struct NonFiniteSummary {
  int64_t first = -1;  // storage index of the first NaN/inf (-1: none)
  int64_t count = 0;   // how many there are
  double value = 0;    // the first one's value (NaN, inf or -inf)
};
/// Scans every element of a CPU tensor (any floating dtype; integer dtypes give {-1, 0}).
NonFiniteSummary nonfinite_summary(const Tensor& t);

}  // namespace halfgrad
