// norm_cuda.h - batch_norm, instance_norm and group_norm on the GPU (plain C++: no CUDA types or headers).
// Math, layouts and the parallel mapping are in norm_cuda.cu; the ops and their autograd are in norm.cpp.
//
// x (N, C, *spatial) float32, float16 or bfloat16, CUDA, NCDHW or (5-D only) NDHWC; y / dx come back in x's dtype
// and memory format. Per-channel tensors (weight, bias, running_mean, running_var) are float32 CUDA
// tensors of shape [C] or undefined; the caller converts weight / bias to float32 first.
// A "group" shares one mean and variance: channel c (batch_norm), (n, c) (instance_norm) or (n, the
// channels_per_group channels of one group) (group_norm).
#pragma once
#include "core/tensor.h"

namespace halfgrad::cuda {

struct NormCudaArgs {
  const char* op = "batch_norm";
  bool per_sample = false;   // instance_norm / group_norm: groups within a sample; batch_norm: one per channel
  int64_t channels_per_group = 1;  // per_sample: C / G (group_norm), 1 (instance_norm); C must divide by it
  bool batch_stats = true;   // normalise with the batch's statistics (training) or the running ones
  double momentum = 0.1;     // running-stat update (batch_norm in training, when the stats are defined)
  double eps = 1e-5;
};

struct NormCudaForward {
  Tensor y;      // x's shape, dtype and memory format
  Tensor saved;  // (2, G) float32: mean and invstd = 1/sqrt(var + eps) per group, what backward needs
};

/// y = (x - mean) * weight * invstd + bias; with batch_stats also updates running_mean / running_var
/// in place (when defined) with momentum and the unbiased variance. Without batch_stats, running_mean
/// and running_var must be defined.
NormCudaForward norm_forward(const NormCudaArgs& a, const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var);

struct NormCudaGrads {
  Tensor dx;       // x's shape, dtype and format (undefined unless need_x)
  Tensor dweight;  // [C] float32 (undefined unless need_w)
  Tensor dbias;    // [C] float32 (undefined unless need_b)
};

/// dx, dweight, dbias from dy (x's shape; any format, converted to x's) and the forward's `saved`.
NormCudaGrads norm_backward(const NormCudaArgs& a, const Tensor& x, const Tensor& weight, const Tensor& saved,
                            const Tensor& dy, bool need_x, bool need_w, bool need_b);

}  // namespace halfgrad::cuda
