// batch_norm.h - BatchNorm3d (torch.nn.BatchNorm3d) over ops::batch_norm (ops/norm/norm.h).
//
//   x (N, C, D, H, W) -> y, same shape.  y = weight * (x - mu) / sqrt(var + eps) + bias
//   training (or track_running_stats false): mu, var = batch statistics over (N, D, H, W) per channel;
//     running_mean <- (1 - momentum) running_mean + momentum mu,
//     running_var  <- (1 - momentum) running_var  + momentum var_unbiased,  num_batches_tracked += 1
//   eval: mu, var = running_mean, running_var.
// Parameters (affine): "weight" (C) = 1, "bias" (C) = 0, Float32.
// Buffers (track_running_stats): "running_mean" (C) = 0, "running_var" (C) = 1, Float32;
//   "num_batches_tracked" () = 0, Int64 (0-d, as PyTorch's state_dict).
// Defaults as PyTorch: eps 1e-5, momentum 0.1, affine true, track_running_stats true. The output is
// Float32 under autocast (BatchNorm is on autocast's FP32 list). momentum=None (cumulative average) is
// not supported.
#pragma once
#include <cstdint>

#include "core/arg.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// BatchNorm3dOptions(C).eps(1e-5).momentum(0.1).affine(true).track_running_stats(true).
struct BatchNorm3dOptions {
  explicit BatchNorm3dOptions(int64_t num_features) : num_features_(num_features) {}
  HG_ARG(int64_t, num_features);
  HG_ARG(double, eps) = 1e-5;
  HG_ARG(double, momentum) = 0.1;
  HG_ARG(bool, affine) = true;
  HG_ARG(bool, track_running_stats) = true;
};

/// Throws halfgrad::Error from the constructor for num_features < 1, eps <= 0, momentum outside [0, 1].
class BatchNorm3d : public Module {
 public:
  explicit BatchNorm3d(const BatchNorm3dOptions& options);
  /// x (N, C, D, H, W); throws halfgrad::Error for a non-5-D input ("expected 5D input") or a channel
  /// count other than num_features, and (from ops::batch_norm) for one value per channel in training.
  Tensor forward(const Tensor& x) override;
  /// running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();
  /// reset_running_stats(), weight = 1, bias = 0.
  void reset_parameters();
  std::string extra_repr() const override;

  BatchNorm3dOptions options;
  Tensor weight, bias;                                        // undefined unless affine
  Tensor running_mean, running_var, num_batches_tracked;      // undefined unless track_running_stats
};

}  // namespace halfgrad::nn
