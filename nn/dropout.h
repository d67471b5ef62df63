// dropout.h - Dropout and Dropout3d (torch.nn.Dropout, torch.nn.Dropout3d) over ops::dropout and
// ops::dropout3d (ops/dropout/dropout.h): inverted dropout in training mode (kept values scaled by
// 1 / (1 - p)), the identity in eval() (nn/module.h's train / eval). No parameters, no buffers.
// The mask comes from the Generator given at construction (one 64-bit draw per forward); it is not
// PyTorch's mask, only its distribution (see ops/dropout/dropout.h). libtorch's `inplace` option is
// not offered: the output is always a new tensor.
#pragma once
#include "core/arg.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// DropoutOptions(p = 0.5), as torch::nn::DropoutOptions (without inplace).
struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // implicit, as libtorch's: Dropout(0.2) reads naturally
  HG_ARG(double, p);
};
using Dropout3dOptions = DropoutOptions;

/// Throws halfgrad::Error from the constructor for p outside [0, 1]. `gen` must outlive the module.
class Dropout : public Module {
 public:
  explicit Dropout(const DropoutOptions& options = DropoutOptions(), Generator& gen = default_generator());
  /// Any shape; ops::dropout(x, p, is_training(), gen).
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  DropoutOptions options;

 private:
  Generator* gen_;
};

/// Zeroes whole channels of (N, C, D, H, W). Same errors and generator rule as Dropout.
class Dropout3d : public Module {
 public:
  explicit Dropout3d(const Dropout3dOptions& options = Dropout3dOptions(), Generator& gen = default_generator());
  /// x (N, C, D, H, W); ops::dropout3d(x, p, is_training(), gen).
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Dropout3dOptions options;

 private:
  Generator* gen_;
};

}  // namespace halfgrad::nn
