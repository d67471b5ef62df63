// norm.h - batch, instance and group normalisation. Under autocast batch_norm and instance_norm are on
// no list (autocast/autocast.h's table, as in PyTorch): they run in their input's dtype, FP16 in gives FP16
// out, while the statistics are summed in FP32 and the affine weights and running statistics stay
// FP32 inside the op. group_norm is on the FP32 list (below).
//
// batch_norm, x (N, C, *spatial); statistics over (N, spatial) per channel c:
//   training:  mu = mean(x), var = mean((x - mu)^2) (biased), xhat = (x - mu) / sqrt(var + eps),
//              y = weight * xhat + bias; running_mean = (1 - m) running_mean + m mu,
//              running_var = (1 - m) running_var + m var * n / (n - 1)  (unbiased, as PyTorch)
//              dx = weight / sqrt(var + eps) * (dy - mean(dy) - xhat * mean(dy * xhat))
//   evaluation: y = weight * (x - running_mean) / sqrt(running_var + eps) + bias
// instance_norm, x (N, C, *spatial): statistics per (n, c) over spatial, as batch_norm in training
//   mode on each sample, no running statistics (torch.nn.functional.instance_norm).
// group_norm, x (N, C, *spatial), G groups (C divisible by G): statistics per (n, g) over the C/G
//   channels of the group and spatial (M = C/G * S values, biased variance), affine per channel
//   (torch.nn.functional.group_norm; Wu and He 2018). instance_norm is group_norm with G = C, and both
//   run the same code. dx = w_c invstd dy - invstd/M sum_g(w dy) - invstd^3 (x - mu)/M sum_g(w dy (x - mu)).
//   Unlike the two above it is on autocast's FP32 list, as in PyTorch: under autocast an FP16 input is
//   cast to FP32 and the output is FP32; outside autocast the output has the input's dtype. No check
//   on the group size (a group of one value gives y = bias, as PyTorch).
// Device: CPU (NCDHW) or CUDA (NCDHW or NDHWC, float32 / float16 / bfloat16; y and dx keep x's memory format; on
// CUDA running stats must be float32 CUDA tensors and are updated on the device).
// weight/bias (C) may be undefined (no affine). running_mean/var (C) float32, updated in place
// (not on the tape; each one's version, core/tensor.h, goes up by one) when training and defined.
// Backward reads x and weight: modifying either in place before it throws (autograd/node.h).
// Non-finite inputs as PyTorch: a NaN in a group makes its mean, var, y (the whole group), dx and
// dweight NaN (dbias = sum dy stays finite); a +-inf among finite values gives mean +-inf and var NaN,
// so y is NaN over the group, running_mean +-inf and running_var NaN. Evaluation with a NaN running
// stat gives NaN over the channel.
// Errors: x with fewer than 2 dims, C mismatching weight/bias/running stats, training with one value
// per channel (PyTorch's "Expected more than 1 value per channel when training"); group_norm: C not
// divisible by num_groups, num_groups < 1.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

struct BatchNormParams {
  bool training_ = true;
  double momentum_ = 0.1;
  double eps_ = 1e-5;
  BatchNormParams& training(bool t) { training_ = t; return *this; }
  BatchNormParams& momentum(double m) { momentum_ = m; return *this; }
  BatchNormParams& eps(double e) { eps_ = e; return *this; }
};

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, const BatchNormParams& p = BatchNormParams());
Tensor instance_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
/// torch.nn.functional.group_norm(x, num_groups, weight, bias, eps); weight / bias (C) may be undefined.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

}  // namespace halfgrad::ops
