// activation.h - pointwise activations (run in the input's dtype) and channel concatenation.
//   relu:        y = max(x, 0);                 dx = dy * (x > 0)
//   leaky_relu:  y = x > 0 ? x : slope * x;     dx = dy * (x > 0 ? 1 : slope)
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
