// sgd_cuda.h - the fused SGD update of every CUDA parameter in one launch (see sgd_cuda.cu).
// Plain C++: sgd.cpp fills one SGDCudaTensor per parameter with its own group's hyperparameters,
// so every parameter group goes into the same launch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace halfgrad::optim {

/// One parameter's hyperparameters, each double rounded once to float as the CPU SGD does (sgd.cpp).
struct SGDStepScalars {
  float weight_decay;
  float momentum;
  float one_minus_dampening;
  float neg_lr;
  bool decay;          // weight_decay != 0
  bool use_momentum;   // momentum != 0 (then momentum_buffer is set)
  bool nesterov;
  bool first;          // the buffer's first step: buf = d instead of buf * momentum + (1 - dampening) * d
};

/// One parameter. Every buffer has `numel` elements in the parameter's memory format.
struct SGDCudaTensor {
  void* param;              // Float32, Float16 or BFloat16
  float* master;            // FP32 master of a Float16 / BFloat16 parameter; null for Float32
  const void* grad;         // Float32, Float16 or BFloat16
  float* momentum_buffer;   // FP32; null when momentum == 0
  int64_t numel;
  Dtype param_dtype, grad_dtype;
  SGDStepScalars s;
};

/// One launch updating every tensor in place. found_inf: null, or a 1-element FP32 device flag
/// (GradScaler's); when it holds a nonzero value the kernel changes nothing.
void sgd_step_cuda(const std::vector<SGDCudaTensor>& tensors, const float* found_inf);

}  // namespace halfgrad::optim
