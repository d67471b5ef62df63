// activation.h - ReLU and LeakyReLU layers (torch.nn.ReLU / torch.nn.LeakyReLU), no parameters.
//   ReLU:       y = max(x, 0)
//   LeakyReLU:  y = x > 0 ? x : negative_slope * x   (negative_slope 0.01, as PyTorch)
// Any shape; the output has the input's shape and dtype (ops/activation/activation.h). PyTorch's
// inplace=True has no counterpart: the output is always a new tensor.
#pragma once
#include "nn/module.h"

namespace halfgrad::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

/// LeakyReLUOptions().negative_slope(0.2).
struct LeakyReLUOptions {
  LeakyReLUOptions& negative_slope(double s) { negative_slope_ = s; return *this; }
  double negative_slope() const { return negative_slope_; }
  double negative_slope_ = 0.01;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(const LeakyReLUOptions& options = LeakyReLUOptions())
      : Module("LeakyReLU"), options(options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  LeakyReLUOptions options;
};

}  // namespace halfgrad::nn
