// pool_shape.h - the argument checks and output extents the pooling ops share (max_pool3d,
// avg_pool3d), as PyTorch's pool3d_shape_check and pooling_output_shape (aten/src/ATen/native/Pool.h),
// dilation 1. Internal to ops/pool/.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/expanding_array.h"
#include "core/tensor.h"

namespace halfgrad::ops::detail {

/// kernel, stride >= 1 and 0 <= padding <= kernel / 2 on every axis; throws naming `op` and the input.
inline void check_pool_args(const char* op, const Shape& xs, const ExpandingArray<3>& kernel,
                            const ExpandingArray<3>& stride, const ExpandingArray<3>& padding) {
  for (size_t a = 0; a < 3; ++a) {
    HG_CHECK(kernel[a] >= 1 && stride[a] >= 1,
             op << ": kernel_size and stride must be >= 1, got kernel_size " << kernel.str() << ", stride "
                << stride.str() << " for input " << shape_str(xs));
    HG_CHECK(padding[a] >= 0 && padding[a] <= kernel[a] / 2,
             op << ": padding must be in [0, kernel_size / 2] on every axis (PyTorch's \"pad should be at most "
                   "half of kernel size\"), got padding "
                << padding.str() << " for kernel_size " << kernel.str());
  }
}

/// The output extent of spatial axis `axis` (0, 1, 2 = D, H, W) of a 5-D input: floor or ceil of
/// (in + 2p - k) / s, plus 1; with ceil_mode, less one if the last window would start in the right
/// padding. Throws naming `op` when it is < 1 (the window does not fit).
inline int64_t pool_output_size(const char* op, const Shape& xs, size_t axis, int64_t k, int64_t s, int64_t p,
                                bool ceil_mode) {
  const int64_t in = xs[2 + axis];
  const int64_t span = in + 2 * p - k;
  int64_t out = span < 0 ? 0 : (span + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && out >= 1 && (out - 1) * s >= in + p) --out;
  HG_CHECK(out >= 1, op << ": the window (kernel_size " << k << ", padding " << p << ") is larger than the padded input "
                        << "extent " << in << " on spatial axis " << axis << " of input " << shape_str(xs));
  return out;
}

}  // namespace halfgrad::ops::detail
