// pooling.h - the pooling layers: MaxPool3d, AvgPool3d and AdaptiveAvgPool3d (torch.nn.MaxPool3d,
// AvgPool3d, AdaptiveAvgPool3d) over ops/pool/max_pool3d.h and ops/pool/avg_pool3d.h (the math,
// shapes, dtypes and errors are there). No parameters.
//   MaxPool3d:         x (N, C, D, H, W) -> y (N, C, Do, Ho, Wo), Do = (D + 2p - k) / s + 1 (floor),
//                      y = max over each window (padding counts as -inf).
//   AvgPool3d:         the window average; ceil_mode, count_include_pad, divisor_override as PyTorch.
//   AdaptiveAvgPool3d: averages over PyTorch's adaptive bins to output_size (1 = global average).
// kernel_size, stride, padding and output_size are per axis (D, H, W); one integer fills all three
// (ExpandingArray, as libtorch): MaxPool3dOptions(2) is (2, 2, 2), MaxPool3dOptions({1, 2, 2}) pools
// in-plane only. stride defaults to kernel_size, as PyTorch. Not supported: dilation, return_indices
// and ceil_mode of MaxPool3d (its options have no setter for them).
#pragma once
#include <cstdint>
#include <optional>

#include "core/arg.h"
#include "core/expanding_array.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// MaxPool3dOptions(k).stride(s).padding(p), as torch::nn::MaxPool3dOptions.
struct MaxPool3dOptions {
  MaxPool3dOptions(ExpandingArray<3> kernel_size)  // NOLINT(google-explicit-constructor): as libtorch
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  HG_ARG(ExpandingArray<3>, kernel_size);
  HG_ARG(ExpandingArray<3>, stride);
  HG_ARG(ExpandingArray<3>, padding) = 0;
};

/// Throws halfgrad::Error from the constructor for kernel_size or stride < 1, or padding outside
/// [0, kernel_size / 2].
class MaxPool3d : public Module {
 public:
  explicit MaxPool3d(const MaxPool3dOptions& options);
  /// Errors as ops::max_pool3d (non-5-D input, window larger than the padded input).
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  MaxPool3dOptions options;
};

/// AvgPool3dOptions(k).stride(s).padding(p).ceil_mode(b).count_include_pad(b).divisor_override(d),
/// as torch::nn::AvgPool3dOptions.
struct AvgPool3dOptions {
  AvgPool3dOptions(ExpandingArray<3> kernel_size)  // NOLINT(google-explicit-constructor): as libtorch
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  HG_ARG(ExpandingArray<3>, kernel_size);
  HG_ARG(ExpandingArray<3>, stride);
  HG_ARG(ExpandingArray<3>, padding) = 0;
  HG_ARG(bool, ceil_mode) = false;
  HG_ARG(bool, count_include_pad) = true;
  HG_ARG(std::optional<int64_t>, divisor_override);
};

/// Throws halfgrad::Error from the constructor for kernel_size or stride < 1, padding outside
/// [0, kernel_size / 2], or divisor_override <= 0.
class AvgPool3d : public Module {
 public:
  explicit AvgPool3d(const AvgPool3dOptions& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  AvgPool3dOptions options;
};

/// AdaptiveAvgPool3dOptions({d, h, w}) or AdaptiveAvgPool3dOptions(1), as libtorch's (which also
/// allows "None" per axis, meaning the input's extent: not supported here).
struct AdaptiveAvgPool3dOptions {
  AdaptiveAvgPool3dOptions(ExpandingArray<3> output_size)  // NOLINT(google-explicit-constructor)
      : output_size_(output_size) {}
  HG_ARG(ExpandingArray<3>, output_size);
};

/// Throws halfgrad::Error from the constructor for an output_size < 1.
class AdaptiveAvgPool3d : public Module {
 public:
  explicit AdaptiveAvgPool3d(const AdaptiveAvgPool3dOptions& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  AdaptiveAvgPool3dOptions options;
};

}  // namespace halfgrad::nn
