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
/// calls can share one flag. Asynchronous: nothing waits for the kernel.
void unscale_and_check_cuda(const std::vector<UnscaleCudaTensor>& grads, float inv_scale, float* found_inf);

}  // namespace halfgrad::amp
