// upsample.cpp - upsample_nearest3d and upsample_trilinear3d (math, sources and errors in upsample.h):
// per-axis source indices and weights computed as PyTorch computes them, then the separable map of
// separable_map.h (CPU loop or CUDA kernel, forward and backward).
#include "ops/pool/upsample.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "autocast/autocast.h"
#include "ops/common.h"
#include "ops/pool/separable_map.h"

namespace halfgrad::ops {

namespace {

void check_args(const char* op, const Tensor& x, const ExpandingArray<3>& size, const std::vector<double>& scales) {
  check_floating_tensor(op, "input", x);
  check_dim(op, "input", x, 5, "(N, C, D, H, W)");
  for (size_t a = 0; a < 3; ++a) {
    HG_CHECK(size[a] >= 1, op << ": output size must be >= 1 on every axis, got " << size.str() << " for input "
                              << shape_str(x.shape()));
    HG_CHECK(x.shape()[2 + a] >= 1, op << ": input " << shape_str(x.shape()) << " has an empty spatial axis");
  }
  HG_CHECK(scales.empty() || scales.size() == 3, op << ": scales must be empty or 3 values, got " << scales.size());
  for (double s : scales) HG_CHECK(s > 0 && std::isfinite(s), op << ": scale factors must be finite and > 0, got " << s);
}

// PyTorch's compute_scales_value<S>: 1 / scale when the caller gave one, else in / out.
template <typename S>
S scale_ratio(const std::vector<double>& scales, size_t a, int64_t in, int64_t out) {
  return !scales.empty() ? static_cast<S>(1.0 / scales[a]) : static_cast<S>(in) / static_cast<S>(out);
}

detail::AxisMap nearest_axis(int64_t in, int64_t out, const std::vector<double>& scales, size_t a) {
  detail::AxisMapBuilder b(in, out);
  const float ratio = scale_ratio<float>(scales, a, in, out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t src;
    if (out == in) src = o;
    else if (out == 2 * in) src = o >> 1;
    else src = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * ratio)), in - 1);
    b.add(src, 1.0);
    b.end_row();
  }
  return b.finish();
}

// S: the coefficient type (float for float32 / float16 inputs, double for float64).
template <typename S>
detail::AxisMap linear_axis(int64_t in, int64_t out, bool align_corners, const std::vector<double>& scales, size_t a) {
  detail::AxisMapBuilder b(in, out);
  S ratio;
  if (align_corners) ratio = out > 1 ? static_cast<S>(in - 1) / static_cast<S>(out - 1) : S(0);
  else ratio = scale_ratio<S>(scales, a, in, out);
  for (int64_t o = 0; o < out; ++o) {
    if (out == in) {  // PyTorch copies (compute_source_index_and_lambda)
      b.add(o, 1.0);
      b.add(o, 0.0);
      b.end_row();
      continue;
    }
    S r = align_corners ? ratio * static_cast<S>(o) : ratio * (static_cast<S>(o) + S(0.5)) - S(0.5);
    if (!align_corners && r < S(0)) r = S(0);
    const int64_t i0 = static_cast<int64_t>(r);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const S l1 = std::min(std::max(r - static_cast<S>(i0), S(0)), S(1));
    const S l0 = S(1) - l1;
    b.add(i0, static_cast<double>(l0));
    b.add(i1, static_cast<double>(l1));
    b.end_row();
  }
  return b.finish();
}

}  // namespace

Shape upsample_output_size(const char* op, const Shape& xs, const std::vector<double>& scales) {
  HG_CHECK(xs.size() == 5, op << ": input must be 5-D (N, C, D, H, W), got " << shape_str(xs));
  HG_CHECK(scales.size() == 3, op << ": scale_factor must hold 3 values, got " << scales.size());
  Shape out(3);
  for (size_t a = 0; a < 3; ++a) {
    HG_CHECK(scales[a] > 0 && std::isfinite(scales[a]), op << ": scale factors must be finite and > 0, got " << scales[a]);
    out[a] = static_cast<int64_t>(std::floor(static_cast<double>(xs[2 + a]) * scales[a]));
    HG_CHECK(out[a] >= 1, op << ": scale factor " << scales[a] << " gives output extent " << out[a]
                             << " on spatial axis " << a << " of input " << shape_str(xs));
  }
  return out;
}

Tensor upsample_nearest3d(const Tensor& x_in, const ExpandingArray<3>& size, const std::vector<double>& scales) {
  check_args("upsample_nearest3d", x_in, size, scales);
  // PyTorch's fp32 list: an FP16 input runs in FP32 under autocast (autocast/autocast.h, row upsample).
  const Tensor x = x_in.to(amp::autocast_dtype(amp::OpKind::Upsample, {x_in.dtype()}));
  auto map = std::make_shared<detail::VolumeMap>();
  for (size_t a = 0; a < 3; ++a) (*map)[a] = nearest_axis(x.shape()[2 + a], size[a], scales, a);
  return detail::apply_volume_map("upsample_nearest3d", x, map);
}

Tensor upsample_trilinear3d(const Tensor& x_in, const ExpandingArray<3>& size, bool align_corners,
                            const std::vector<double>& scales) {
  check_args("upsample_trilinear3d", x_in, size, scales);
  const Tensor x = x_in.to(amp::autocast_dtype(amp::OpKind::Upsample, {x_in.dtype()}));
  auto map = std::make_shared<detail::VolumeMap>();
  for (size_t a = 0; a < 3; ++a) {
    const int64_t in = x.shape()[2 + a];
    (*map)[a] = x.dtype() == kFloat64 ? linear_axis<double>(in, size[a], align_corners, scales, a)
                                      : linear_axis<float>(in, size[a], align_corners, scales, a);
  }
  return detail::apply_volume_map("upsample_trilinear3d", x, map);
}

}  // namespace halfgrad::ops
