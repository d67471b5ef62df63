// max_pool3d.h - 3-D max pooling (torch.nn.functional.max_pool3d, dilation 1, ceil_mode false).
//   x (N, C, D, H, W) -> y (N, C, Do, Ho, Wo), per axis (k, s, p): Do = (D + 2p - k) / s + 1 (floor).
//   The window of output z covers [z s - p, z s - p + k); the padding counts as -inf (it is skipped),
//   so y = max over the window's elements inside the input; dx gets dy at the argmax of each window
//   (first maximum on ties), accumulated where windows overlap. A NaN beats every number, and of
//   several NaNs in a window the last (in d, h, w order) is the argmax, as PyTorch's
//   `val > max || isnan(val)`; an all -inf window gives -inf at its first element inside the input.
//   kernel, stride and padding are per axis (D, H, W); one integer fills all three (ExpandingArray).
// Dtype: runs in the input's dtype (outside autocast's lists). Device: CPU (NCDHW) or CUDA (NCDHW or
// NDHWC; y and dx keep x's memory format). The U-Net's 2x2x2 stride-2 unpadded case has its own
// unrolled path on both devices.
// Errors: x not 5-D, kernel or stride < 1, padding < 0 or > kernel / 2 (as PyTorch), a window larger
// than the padded input.
#pragma once
#include "core/expanding_array.h"
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor max_pool3d(const Tensor& x, const ExpandingArray<3>& kernel, const ExpandingArray<3>& stride,
                  const ExpandingArray<3>& padding = 0);

}  // namespace halfgrad::ops
