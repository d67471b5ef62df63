// avg_pool3d.h - 3-D average pooling and adaptive average pooling (torch.nn.functional.avg_pool3d,
// adaptive_avg_pool3d), NCDHW logical shape.
//
// avg_pool3d: x (N, C, D, H, W) -> y (N, C, Do, Ho, Wo), per axis (k, s, p):
//   Do = floor((D + 2p - k) / s) + 1, or with ceil_mode ceil(...) + 1, less one when that last window
//        would start in the right padding ((Do - 1) s >= D + p), as PyTorch (pooling_output_shape).
//   window of output z: start = z s - p, end = min(start + k, D + p); it sums x over the window's
//   elements inside [0, D) (padding adds zeros) and divides by
//     divisor_override, if given;
//     else count_include_pad:  (end - start) per axis, multiplied (k^3 without ceil_mode: the padding
//                              counts; with ceil_mode a window running past D + p counts less);
//     else:                    the number of elements inside [0, D) per axis, multiplied.
//   dx: each input element gets dy / divisor from every window holding it (summed where they overlap).
//   Source: PyTorch's aten/src/ATen/native/cpu/AvgPoolKernel.cpp and AveragePool3d.cpp (1.13).
// adaptive_avg_pool3d: x (N, C, D, H, W) -> y (N, C, od, oh, ow); output z averages the bin
//   [floor(z D / od), ceil((z + 1) D / od)) (bins may overlap or differ in size), per axis, as PyTorch's
//   adaptive pooling (AdaptiveAveragePooling3d.cpp, start_index / end_index). Output size 1 on every
//   axis is the global average pool; output = input size is the identity.
// Both are separable linear maps (ops/pool/separable_map.h): the divisor is applied as a product of
// per-axis reciprocals, which differs from PyTorch's sum-then-divide in the last bit at most.
// Dtype: on no autocast list, as in PyTorch (autocast/autocast.h rows avg_pool3d, adaptive_avg_pool3d):
// the input's dtype, FP32 sums inside, 16-bit rounded once. Device: CPU (NCDHW, float32 / float16 / bfloat16 /
// float64) or CUDA (float32 / float16 / bfloat16, NCDHW or NDHWC; y and dx keep x's memory format).
// Errors (halfgrad::Error naming the op): x not 5-D or not floating; kernel or stride < 1; padding < 0
// or > kernel / 2 (PyTorch's "pad should be at most half of kernel size"); an output extent < 1;
// divisor_override <= 0; output_size < 1.
#pragma once
#include <cstdint>
#include <optional>

#include "core/expanding_array.h"
#include "core/tensor.h"

namespace halfgrad::ops {

/// Average pooling with stride = kernel and no padding (PyTorch's defaults).
Tensor avg_pool3d(const Tensor& x, const ExpandingArray<3>& kernel);
/// Full form, argument order as torch.nn.functional.avg_pool3d.
Tensor avg_pool3d(const Tensor& x, const ExpandingArray<3>& kernel, const ExpandingArray<3>& stride,
                  const ExpandingArray<3>& padding, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
/// Adaptive average pooling to `output_size` (od, oh, ow), each >= 1.
Tensor adaptive_avg_pool3d(const Tensor& x, const ExpandingArray<3>& output_size);

}  // namespace halfgrad::ops
