// activation.h - pointwise activations (run in the input's dtype) and channel concatenation.
//   relu:        y = x < 0 ? 0 : x;             dx = y <= 0 ? 0 : dy
//   leaky_relu:  y = x > 0 ? x : slope * x;     dx = x > 0 ? dy : slope * dy
// NaN as PyTorch: relu(NaN) = NaN and its gradient passes dy (threshold_backward: NaN <= 0 is false);
// leaky_relu(NaN) = NaN with gradient slope * dy; relu's dx is exactly 0 at x <= 0 even for dy = inf.
//   cat(xs, dim): concatenation along dim; every other extent equal; dx_i = the slice of dy
//                 (autocast promote list: inputs cast to the widest dtype).
// Errors: cat of an empty list, different ranks, mismatched extents off `dim` (names both shapes).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace halfgrad::ops {

Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);

}  // namespace halfgrad::ops
