// upsample.h - 3-D resampling to a given output size: nearest and trilinear, as PyTorch's
// upsample_nearest3d / upsample_trilinear3d (what torch.nn.functional.interpolate calls for 5-D input).
//   x (N, C, D, H, W) -> y (N, C, od, oh, ow). Per axis (in -> out), with `scale` the optional scale
//   factor the caller asked for (nn::Upsample passes it when built from scale_factor, as
//   F.interpolate with recompute_scale_factor unset does):
//   ratio = 1 / scale when a scale is given, else in / out (PyTorch's compute_scales_value), in float
//   for float32 / float16 inputs.
//   nearest:   src(o) = min(floor(o * ratio), in - 1) (float arithmetic, PyTorch's
//              nearest_neighbor_compute_source_index; out == in is the identity, out == 2 in is o / 2).
//              y[o] = x[src(o)]; dx[i] = sum of dy[o] over the o with src(o) = i.
//   trilinear: per axis, align_corners: r = o * (in - 1) / (out - 1) (0 when out = 1; scale ignored);
//              else r = max(ratio * (o + 0.5) - 0.5, 0) (PyTorch's area_pixel_compute_source_index).
//              i0 = floor(r), i1 = min(i0 + 1, in - 1), l1 = r - i0, l0 = 1 - l1; out == in copies.
//              y = sum over the 8 corners of the product of the three axes' weights times x; dx
//              gets each weight times dy. Coefficients in float for float32 / float16 inputs and in
//              double for float64, as PyTorch's CPU kernels (opmath type).
//   Source: aten/src/ATen/native/UpSample.h and cpu/UpSampleKernel.cpp (PyTorch 1.13).
// Both are separable linear maps (ops/pool/separable_map.h). Sums in FP32 (double for float64).
// Dtype: both use the `upsample` row of autocast/autocast.h, PyTorch's fp32 list (which holds
// upsample_nearest3d as well as upsample_trilinear3d): under autocast an FP16 input is cast to FP32
// and the output is FP32; outside autocast the input's dtype. Device: CPU (NCDHW) or CUDA (float32 /
// float16, NCDHW or NDHWC; y and dx keep x's memory format).
// Errors (halfgrad::Error naming the op): x not 5-D or not floating; an output extent < 1; scales
// not empty and not 3 values > 0.
#pragma once
#include <vector>

#include "core/expanding_array.h"
#include "core/tensor.h"

namespace halfgrad::ops {

/// Nearest-neighbour resampling to output_size (od, oh, ow); `scales` is empty or 3 factors > 0.
Tensor upsample_nearest3d(const Tensor& x, const ExpandingArray<3>& output_size,
                          const std::vector<double>& scales = {});
/// Trilinear resampling to output_size; `scales` as for upsample_nearest3d (unused with align_corners).
Tensor upsample_trilinear3d(const Tensor& x, const ExpandingArray<3>& output_size, bool align_corners,
                            const std::vector<double>& scales = {});

/// F.interpolate's output size for a scale factor: floor(in * scale) per axis (throws when < 1).
Shape upsample_output_size(const char* op, const Shape& x_shape, const std::vector<double>& scales);

}  // namespace halfgrad::ops
