// adamw_cuda.h - the fused AdamW update of every CUDA parameter in one launch (see adamw_cuda.cu).
// Plain C++: adamw.cpp fills one AdamWCudaTensor per parameter, with that parameter's own
// hyperparameters and step, so every parameter group goes into the same launch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace halfgrad::optim {

/// The per-step scalars of one parameter, each computed in double and rounded once to float
/// exactly as the CPU AdamW does (adamw.cpp, AdamWScalars<float>).
struct AdamWStepScalars {
  float decay;                   // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;   // sqrt(1 - beta2^t)
  float eps;
  float neg_step_size;           // -lr / (1 - beta1^t)
};

/// Capturable AdamW (AdamWOptions().capturable(true)): the step's learning rate and the parameter's
/// step count are read from device memory, and the scalars above are computed from them on the device
/// (in double, in the host's order, rounded once to float), so that a captured step (core/cuda/graph.h)
/// replays with the current lr and step instead of the ones it was captured with.
struct AdamWDeviceScalars {
  const double* lr;   // the group's lr (1 element, device); null: not capturable, `s` holds the scalars
  int64_t* step;      // the parameter's steps so far (1 element, device); advanced by the launch unless skipped
  double weight_decay, beta1, beta2, eps;
};

/// One parameter. Every buffer has `numel` elements in the parameter's memory format.
struct AdamWCudaTensor {
  void* param;            // Float32, Float16 or BFloat16
  float* master;          // FP32 master of a Float16 / BFloat16 parameter; null for Float32 and for pure FP16
  const void* grad;       // Float32, Float16 or BFloat16
  void* exp_avg;          // m: Float32, or Float16 in pure FP16 (master_weights(false))
  void* exp_avg_sq;       // v: same dtype as exp_avg
  int64_t numel;
  Dtype param_dtype, grad_dtype, moment_dtype;
  AdamWStepScalars s;       // not capturable: this step's scalars, from the host
  AdamWDeviceScalars dev;   // capturable: where the device finds lr and step (dev.lr == null otherwise)
};

/// One launch updating every tensor in place, then (when any entry is capturable) one small launch
/// advancing each capturable entry's device step. found_inf: null, or a 1-element FP32 device flag
/// (GradScaler's); when it holds a nonzero value neither launch changes anything.
void adamw_step_cuda(const std::vector<AdamWCudaTensor>& tensors, const float* found_inf);

}  // namespace halfgrad::optim
