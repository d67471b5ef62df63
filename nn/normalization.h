// normalization.h - GroupNorm and LayerNorm (torch.nn.GroupNorm, torch.nn.LayerNorm) over
// ops::group_norm (ops/norm/norm.h) and ops::layer_norm (ops/norm/layer_norm.h).
//
// GroupNorm: x (N, C, *) -> y, same shape; statistics per (n, group of C/G channels), biased variance;
//   y = xhat * weight[c] + bias[c] when affine. Parameters (affine): "weight" (C) = 1, "bias" (C) = 0,
//   Float32. Defaults as PyTorch: eps 1e-5, affine true.
// LayerNorm: x (*, normalized_shape) -> y, same shape; statistics over the last
//   len(normalized_shape) dims; y = xhat * weight + bias elementwise when elementwise_affine.
//   Parameters: "weight" (normalized_shape) = 1, "bias" (normalized_shape) = 0, Float32. Defaults as
//   PyTorch: eps 1e-5, elementwise_affine true.
// Both: the same statistics in training and eval (no running statistics); autocast's FP32 list (an
// FP16 input gives an FP32 output under autocast, as PyTorch).
#pragma once
#include <cstdint>
#include <utility>

#include "core/arg.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// GroupNormOptions(num_groups, num_channels).eps(1e-5).affine(true), as torch::nn::GroupNormOptions.
struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  HG_ARG(int64_t, num_groups);
  HG_ARG(int64_t, num_channels);
  HG_ARG(double, eps) = 1e-5;
  HG_ARG(bool, affine) = true;
};

/// Throws halfgrad::Error from the constructor for num_groups < 1, num_channels not divisible by
/// num_groups (PyTorch's "num_channels must be divisible by num_groups"), eps <= 0.
class GroupNorm : public Module {
 public:
  explicit GroupNorm(const GroupNormOptions& options);
  /// x (N, C, *) with C = num_channels; throws halfgrad::Error for another C or fewer than 2 dims.
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;

  GroupNormOptions options;
  Tensor weight, bias;  // (C); undefined unless affine
};

/// LayerNormOptions({shape...}).eps(1e-5).elementwise_affine(true), as torch::nn::LayerNormOptions.
struct LayerNormOptions {
  LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  HG_ARG(Shape, normalized_shape);
  HG_ARG(double, eps) = 1e-5;
  HG_ARG(bool, elementwise_affine) = true;
};

/// Throws halfgrad::Error from the constructor for an empty normalized_shape, a dim < 1, eps <= 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options);
  /// x (*, normalized_shape); errors as ops::layer_norm.
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;

  LayerNormOptions options;
  Tensor weight, bias;  // normalized_shape; undefined unless elementwise_affine
};

}  // namespace halfgrad::nn
