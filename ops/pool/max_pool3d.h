// max_pool3d.h - 3-D max pooling, NCDHW.
//   x (N, C, D, H, W) -> y (N, C, Do, Ho, Wo), Do = (D - k) / s + 1 (floor, no padding)
//   y = max over the k^3 window; dx gets dy at the argmax of each window (first maximum on ties),
//   accumulated where windows overlap. A NaN beats every number, and of several NaNs in a window the
//   last (in d, h, w order) is the argmax, as PyTorch's `val > max || isnan(val)`; an all -inf window
//   gives -inf at its first element.
// Dtype: runs in the input's dtype (outside autocast's lists). Device: CPU (NCDHW) or CUDA (NCDHW or
// NDHWC; y and dx keep x's memory format).
// Errors: x not 5-D, kernel or stride < 1, a window larger than the input.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor max_pool3d(const Tensor& x, int64_t kernel, int64_t stride);

}  // namespace halfgrad::ops
