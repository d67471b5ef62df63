// init.h - the parameter initialisers the layers use, as torch.nn.init.
//
// PyTorch's Conv3d / ConvTranspose3d reset_parameters():
//   weight: kaiming_uniform_(w, a = sqrt(5))  ->  U(-b, b),  b = gain * sqrt(3 / fan_in),
//           gain = sqrt(2 / (1 + a^2)) = sqrt(1/3),  so  b = 1 / sqrt(fan_in)
//   bias:   U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in
// fan_in is computed from the weight's shape by _calculate_fan_in_and_fan_out:
//   fan_in = w.size(1) * (product of w's dims from 2 on),  fan_out = w.size(0) * (same product).
// For ConvTranspose3d the weight is (Cin, Cout, k, k, k), so its fan_in is Cout * k^3 (PyTorch's rule,
// kept for parity even though the "fan in" of a transposed conv is really Cin * k^3 / stride^3).
// Values are drawn in double from the given Generator and rounded to the tensor's dtype; they are not
// PyTorch's random numbers, only its distribution.
#pragma once
#include <utility>

#include "core/tensor.h"

namespace halfgrad::nn::init {

/// (fan_in, fan_out) of a weight shape with at least 2 dims (throws halfgrad::Error otherwise).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Shape& weight_shape);

/// Fills `t` in place with U[lo, hi) values from `gen` (not recorded on the tape; t's version goes up
/// by one, as for every in-place write: core/tensor.h).
void uniform_(const Tensor& t, double lo, double hi, Generator& gen);

/// kaiming_uniform_(t, a, mode='fan_in', nonlinearity='leaky_relu'): U(-b, b),
/// b = sqrt(2 / (1 + a^2)) * sqrt(3 / fan_in).
void kaiming_uniform_(const Tensor& t, double a, Generator& gen);

}  // namespace halfgrad::nn::init
