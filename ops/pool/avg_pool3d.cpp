// avg_pool3d.cpp - avg_pool3d and adaptive_avg_pool3d (math, sources and errors in avg_pool3d.h):
// each builds its per-axis index and weight tables and runs the separable map of separable_map.h
// (CPU loop or CUDA kernel, forward and backward).
#include "ops/pool/avg_pool3d.h"

#include <algorithm>
#include <memory>

#include "autocast/autocast.h"
#include "ops/common.h"
#include "ops/pool/pool_shape.h"
#include "ops/pool/separable_map.h"

namespace halfgrad::ops {

namespace {

// One axis of avg_pool3d: output z sums [max(start, 0), min(start + k, in)), start = z s - p, with this
// axis' share of 1 / divisor (avg_pool3d.h), or `fixed_weight` when set (divisor_override).
detail::AxisMap avg_axis(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool count_include_pad,
                         std::optional<double> fixed_weight) {
  detail::AxisMapBuilder b(in, out);
  for (int64_t z = 0; z < out; ++z) {
    const int64_t start = z * s - p, end = std::min(start + k, in + p);
    const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(end, in);
    const double w = fixed_weight ? *fixed_weight : 1.0 / static_cast<double>(count_include_pad ? end - start : hi - lo);
    for (int64_t i = lo; i < hi; ++i) b.add(i, w);
    b.end_row();
  }
  return b.finish();
}

Tensor run_in_policy(const char* name, amp::OpKind kind, const Tensor& x_in,
                     const std::shared_ptr<const detail::VolumeMap>& map) {
  // On no autocast list: the input's dtype, unless --fp32-op / amp::set_op_fp32 moved the op to FP32.
  const Tensor x = x_in.to(amp::autocast_dtype(kind, {x_in.dtype()}));
  return detail::apply_volume_map(name, x, map);
}

}  // namespace

Tensor avg_pool3d(const Tensor& x, const ExpandingArray<3>& kernel) { return avg_pool3d(x, kernel, kernel, 0); }

Tensor avg_pool3d(const Tensor& x, const ExpandingArray<3>& kernel, const ExpandingArray<3>& stride,
                  const ExpandingArray<3>& padding, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  check_floating_tensor("avg_pool3d", "input", x);
  check_dim("avg_pool3d", "input", x, 5, "(N, C, D, H, W)");
  const Shape& xs = x.shape();
  detail::check_pool_args("avg_pool3d", xs, kernel, stride, padding);
  HG_CHECK(!divisor_override || *divisor_override > 0,
           "avg_pool3d: divisor_override must be > 0, got " << *divisor_override);
  auto map = std::make_shared<detail::VolumeMap>();
  for (size_t a = 0; a < 3; ++a) {
    const int64_t out = detail::pool_output_size("avg_pool3d", xs, a, kernel[a], stride[a], padding[a], ceil_mode);
    // divisor_override: the whole 1 / divisor on the D axis, weight 1 on H and W.
    std::optional<double> fixed;
    if (divisor_override) fixed = a == 0 ? 1.0 / static_cast<double>(*divisor_override) : 1.0;
    (*map)[a] = avg_axis(xs[2 + a], out, kernel[a], stride[a], padding[a], count_include_pad, fixed);
  }
  return run_in_policy("avg_pool3d", amp::OpKind::AvgPool3d, x, map);
}

Tensor adaptive_avg_pool3d(const Tensor& x, const ExpandingArray<3>& output_size) {
  check_floating_tensor("adaptive_avg_pool3d", "input", x);
  check_dim("adaptive_avg_pool3d", "input", x, 5, "(N, C, D, H, W)");
  const Shape& xs = x.shape();
  auto map = std::make_shared<detail::VolumeMap>();
  for (size_t a = 0; a < 3; ++a) {
    const int64_t in = xs[2 + a], out = output_size[a];
    HG_CHECK(out >= 1, "adaptive_avg_pool3d: output_size must be >= 1 on every axis, got " << output_size.str());
    HG_CHECK(in >= 1, "adaptive_avg_pool3d: input " << shape_str(xs) << " has an empty spatial axis");
    detail::AxisMapBuilder b(in, out);
    for (int64_t z = 0; z < out; ++z) {
      // PyTorch's start_index / end_index in exact integer arithmetic.
      const int64_t start = (z * in) / out, end = ((z + 1) * in + out - 1) / out;
      for (int64_t i = start; i < end; ++i) b.add(i, 1.0 / static_cast<double>(end - start));
      b.end_row();
    }
    (*map)[a] = b.finish();
  }
  return run_in_policy("adaptive_avg_pool3d", amp::OpKind::AdaptiveAvgPool3d, x, map);
}

}  // namespace halfgrad::ops
