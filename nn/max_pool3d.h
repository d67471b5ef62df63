// max_pool3d.h - MaxPool3d layer (torch.nn.MaxPool3d) over ops::max_pool3d (ops/pool/max_pool3d.h).
//   x (N, C, D, H, W) -> y (N, C, Do, Ho, Wo),  Do = (D - k) / s + 1 (floor), y = max over each k^3 window.
// stride defaults to kernel_size, as PyTorch. No parameters. Not supported: padding, dilation,
// ceil_mode, return_indices, non-cubic windows.
#pragma once
#include <cstdint>

#include "nn/module.h"

namespace halfgrad::nn {

/// MaxPool3dOptions(k).stride(s); stride 0 (the default) means stride = kernel_size.
struct MaxPool3dOptions {
  explicit MaxPool3dOptions(int64_t kernel_size) : kernel_size_(kernel_size) {}
  MaxPool3dOptions& stride(int64_t s) { stride_ = s; return *this; }
  int64_t kernel_size() const { return kernel_size_; }
  int64_t stride() const { return stride_; }

  int64_t kernel_size_;
  int64_t stride_ = 0;
};

/// Throws halfgrad::Error from the constructor for kernel_size < 1 or stride < 0.
class MaxPool3d : public Module {
 public:
  explicit MaxPool3d(const MaxPool3dOptions& options);
  /// Errors as ops::max_pool3d (non-5-D input, window larger than the input).
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  MaxPool3dOptions options;
};

}  // namespace halfgrad::nn
