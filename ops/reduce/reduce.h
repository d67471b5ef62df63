// reduce.h - sums and means (autocast FP32 list).
//   sum(x)                 -> 0-d, y = sum_i x_i                 dx_i = dy
//   sum(x, dims, keepdim)  -> x's shape with `dims` removed (or kept as 1)   dx = broadcast(dy)
//   mean = sum / (number of reduced elements)                    dx = broadcast(dy) / count
// Accumulation is in FP64 on the CPU for every input dtype (so FP16 inputs get at least the FP32
// accumulation PyTorch gives them), in an order fixed by the shape (never by the thread count); the
// output has the input's dtype, or FP32 under autocast.
// Errors: a dim out of range or repeated names the op, the dim and the shape.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace halfgrad::ops {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

/// Index of the largest value along `dim` (first on ties), int64, dim removed. Not differentiable.
/// NaN counts as larger than everything: a slice holding NaN gives its first NaN (torch.argmax).
Tensor argmax(const Tensor& x, int64_t dim);

}  // namespace halfgrad::ops
