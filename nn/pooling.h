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

#include "core/expanding_array.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// MaxPool3dOptions(k).stride(s).padding(p), as torch::nn::MaxPool3dOptions.
struct MaxPool3dOptions {
  MaxPool3dOptions(ExpandingArray<3> kernel_size)  // NOLINT(google-explicit-constructor): as libtorch
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  MaxPool3dOptions& kernel_size(ExpandingArray<3> k) { kernel_size_ = k; return *this; }
  MaxPool3dOptions& stride(ExpandingArray<3> s) { stride_ = s; return *this; }
  MaxPool3dOptions& padding(ExpandingArray<3> p) { padding_ = p; return *this; }
  const ExpandingArray<3>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<3>& stride() const { return stride_; }
  const ExpandingArray<3>& padding() const { return padding_; }

  ExpandingArray<3> kernel_size_;
  ExpandingArray<3> stride_;
  ExpandingArray<3> padding_ = 0;
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
  AvgPool3dOptions& kernel_size(ExpandingArray<3> k) { kernel_size_ = k; return *this; }
  AvgPool3dOptions& stride(ExpandingArray<3> s) { stride_ = s; return *this; }
  AvgPool3dOptions& padding(ExpandingArray<3> p) { padding_ = p; return *this; }
  AvgPool3dOptions& ceil_mode(bool b) { ceil_mode_ = b; return *this; }
  AvgPool3dOptions& count_include_pad(bool b) { count_include_pad_ = b; return *this; }
  AvgPool3dOptions& divisor_override(std::optional<int64_t> d) { divisor_override_ = d; return *this; }
  const ExpandingArray<3>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<3>& stride() const { return stride_; }
  const ExpandingArray<3>& padding() const { return padding_; }
  bool ceil_mode() const { return ceil_mode_; }
  bool count_include_pad() const { return count_include_pad_; }
  std::optional<int64_t> divisor_override() const { return divisor_override_; }

  ExpandingArray<3> kernel_size_;
  ExpandingArray<3> stride_;
  ExpandingArray<3> padding_ = 0;
  bool ceil_mode_ = false;
  bool count_include_pad_ = true;
  std::optional<int64_t> divisor_override_;
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
  AdaptiveAvgPool3dOptions& output_size(ExpandingArray<3> s) { output_size_ = s; return *this; }
  const ExpandingArray<3>& output_size() const { return output_size_; }

  ExpandingArray<3> output_size_;
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
