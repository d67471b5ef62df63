// grad_scaler_cuda.h - GradScaler's unscale_ for CUDA gradients: every gradient multiplied by
// 1/scale and checked for inf/NaN in one launch (see grad_scaler_cuda.cu). Plain C++.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace halfgrad::amp {

/// One gradient of `numel` elements: read from `src`, written (times inv_scale) to `dst`. In place
/// when dst == src; a Float16 src with a new Float32 dst is fp16_grads_to_fp32's FP32 master gradient.
struct UnscaleCudaTensor {
  const void* src;
  void* dst;
  int64_t numel;
  Dtype src_dtype, dst_dtype;  // Float32, Float16 or BFloat16 each
};

/// PyTorch's _amp_foreach_non_finite_check_and_unscale_: dst = src * inv_scale for every tensor, and
/// *found_inf = 1.0f if any src element is inf or NaN (the gradients are scaled either way). found_inf
/// is a 1-element FP32 device buffer the caller zeroed; it is only ever set, never cleared, so several
/// calls can share one flag. device_scale: null, or the scale S on the device (1 element), from which
/// the kernel forms inv_scale = float(1 / double(S)) itself (inv_scale is then ignored): the
/// capturable GradScaler's. Asynchronous: nothing waits for the kernel.
void unscale_and_check_cuda(const std::vector<UnscaleCudaTensor>& grads, float inv_scale, float* found_inf,
                            const float* device_scale = nullptr);

/// The found_inf flags of the optimizers of one iteration (1-element FP32 device buffers).
constexpr int kMaxScalerFlags = 8;
struct ScalerFlags {
  const float* flag[kMaxScalerFlags];
  int count;
};

/// The capturable GradScaler's device state (GradScaler::update on the device).
struct ScalerDeviceState {
  float* scale;       // S, 1 element
  int64_t* counters;  // [kGrowthTracker], [kSkippedSteps], [kConsecutiveSkipped], [kLastFoundInf]
};
constexpr int kGrowthTracker = 0, kSkippedSteps = 1, kConsecutiveSkipped = 2, kLastFoundInf = 3, kNumCounters = 4;

/// The update rule of grad_scaler.h (PyTorch's _amp_update_scale_ with halfgrad's max_scale), in one
/// thread on the device: found_inf = any flag nonzero; back off or grow S, reset or advance the growth
/// tracker; count the skipped iteration and the run of them; record found_inf. The factors in
/// double, the products rounded to float, as the host's update(). Asynchronous.
void update_scale_cuda(const ScalerDeviceState& state, const ScalerFlags& flags, double growth_factor,
                       double backoff_factor, int64_t growth_interval, float max_scale);

}  // namespace halfgrad::amp
