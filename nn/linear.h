// linear.h - Linear (torch.nn.Linear) over ops::linear (ops/matmul/matmul.h), and Flatten
// (torch.nn.Flatten) over ops::flatten (ops/shape/shape.h).
//
// Linear: x (*, in) -> y (*, out) = x weight^T + bias, any number of leading dims (also none: a 1-D
//   input (in) gives (out)); the leading dims are flattened to one batch dim for ops::linear and
//   restored after, as torch.nn.functional.linear does.
//   Parameters: "weight" (out, in), "bias" (out) when options.bias, Float32.
//   Init as PyTorch's Linear.reset_parameters: weight kaiming_uniform_(a = sqrt(5)) = U(-1/sqrt(in),
//   1/sqrt(in)), bias U(-1/sqrt(in), 1/sqrt(in)), drawn from the given Generator (PyTorch's
//   distribution, not its random numbers: nn/init.h).
//   Autocast: ops::linear is on the FP16 list (autocast/autocast.h's row "linear").
// Flatten: ops::flatten(x, start_dim, end_dim); defaults start_dim 1, end_dim -1 as torch.nn.Flatten.
#pragma once
#include <cstdint>

#include "core/arg.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// LinearOptions(in_features, out_features).bias(true), as torch::nn::LinearOptions.
struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  HG_ARG(int64_t, in_features);
  HG_ARG(int64_t, out_features);
  HG_ARG(bool, bias) = true;
};

/// Throws halfgrad::Error from the constructor for in_features or out_features < 1.
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options, Generator& gen = default_generator());
  /// x (*, in) -> (*, out). Throws halfgrad::Error for an undefined or 0-d input, or a last dim != in.
  Tensor forward(const Tensor& x) override;
  /// Redraws weight and bias from PyTorch's init distribution.
  void reset_parameters(Generator& gen = default_generator());
  std::string extra_repr() const override;

  LinearOptions options;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out); undefined when options.bias_ is false
};

/// FlattenOptions().start_dim(1).end_dim(-1), as torch::nn::FlattenOptions.
struct FlattenOptions {
  HG_ARG(int64_t, start_dim) = 1;
  HG_ARG(int64_t, end_dim) = -1;
};

/// No parameters. Errors as ops::flatten (at forward: the dims are checked against the input's rank).
class Flatten : public Module {
 public:
  explicit Flatten(const FlattenOptions& options = FlattenOptions());
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  FlattenOptions options;
};

}  // namespace halfgrad::nn
