// clip_grad_cuda.h - clip_grad_norm_ over CUDA gradients: one multi-tensor reduction, one tiny
// kernel for the total norm and the clip coefficient (kept on the device), one multi-tensor scale.
// See clip_grad_cuda.cu; clip_grad.cpp calls it when every gradient is on CUDA.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace halfgrad::optim {

/// One gradient: `numel` elements of Float32, Float16 or BFloat16 (any layout: the norm and the scaling are
/// elementwise), scaled in place.
struct ClipGradCudaTensor {
  void* grad;
  int64_t numel;
  Dtype dtype;
};

/// The total norm (FP32, returned as double), with the semantics of the CPU clip_grad_norm_
/// (clip_grad.h): norm_type 2 or infinity. One device-to-host copy: of the norm, after the scaling
/// kernel is queued - or before it when error_if_nonfinite (the check must come before any change).
double clip_grad_norm_cuda(const std::vector<ClipGradCudaTensor>& grads, double max_norm, bool inf_norm,
                           bool error_if_nonfinite);

}  // namespace halfgrad::optim
