// activation.h - the activation layers, no parameters (torch.nn.ReLU, LeakyReLU, Sigmoid, Tanh, SiLU,
// GELU):
//   ReLU:       y = max(x, 0)
//   LeakyReLU:  y = x > 0 ? x : negative_slope * x   (negative_slope 0.01, as PyTorch)
//   Sigmoid, Tanh, SiLU (x * sigmoid(x)), GELU (x * Phi(x), or its tanh approximation): the math and
//   sources in ops/activation/smooth.h.
// Any shape; the output has the input's shape and dtype (ops/activation/activation.h, smooth.h). PyTorch's
// inplace=True has no counterpart: the output is always a new tensor.
#pragma once
#include <string>

#include "core/arg.h"
#include "nn/module.h"

namespace halfgrad::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

/// LeakyReLUOptions().negative_slope(0.2).
struct LeakyReLUOptions {
  HG_ARG(double, negative_slope) = 0.01;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(const LeakyReLUOptions& options = LeakyReLUOptions())
      : Module("LeakyReLU"), options(options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  LeakyReLUOptions options;
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};

class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};

/// GELUOptions().approximate("tanh"): "none" (the default, exact erf) or "tanh", as torch.nn.GELU;
/// another string throws halfgrad::Error when the layer is built.
struct GELUOptions {
  HG_ARG(std::string, approximate) = "none";
};

class GELU : public Module {
 public:
  explicit GELU(const GELUOptions& options = GELUOptions());
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  GELUOptions options;
};

}  // namespace halfgrad::nn
