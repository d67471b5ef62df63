// instance_norm.h - InstanceNorm3d (torch.nn.InstanceNorm3d) over ops::instance_norm (ops/norm/norm.h).
//
//   x (N, C, D, H, W) -> y, same shape.  For each (n, c): mu, var = mean and biased variance over
//   (D, H, W);  y = (x - mu) / sqrt(var + eps) [* weight[c] + bias[c] when affine].
// Parameters (affine): "weight" (C) = 1, "bias" (C) = 0, Float32. No buffers.
// Defaults as PyTorch: eps 1e-5, affine FALSE (unlike BatchNorm3d), track_running_stats false (the
// running-statistics mode of InstanceNorm is not supported). The statistics are the same in training
// and eval. Output Float32 under autocast (FP32 list).
#pragma once
#include <cstdint>

#include "core/arg.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// InstanceNorm3dOptions(C).eps(1e-5).affine(false).
struct InstanceNorm3dOptions {
  explicit InstanceNorm3dOptions(int64_t num_features) : num_features_(num_features) {}
  HG_ARG(int64_t, num_features);
  HG_ARG(double, eps) = 1e-5;
  HG_ARG(bool, affine) = false;  // PyTorch's default for InstanceNorm (BatchNorm3d's is true)
};

/// Throws halfgrad::Error from the constructor for num_features < 1 or eps <= 0.
class InstanceNorm3d : public Module {
 public:
  explicit InstanceNorm3d(const InstanceNorm3dOptions& options);
  /// x (N, C, D, H, W); throws halfgrad::Error for a non-5-D input or C != num_features.
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;

  InstanceNorm3dOptions options;
  Tensor weight, bias;  // undefined unless affine
};

}  // namespace halfgrad::nn
