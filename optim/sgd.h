// sgd.h - stochastic gradient descent with momentum, as torch.optim.SGD (maximize=False; PyTorch's
// _single_tensor_sgd, the CPU path).
//
// For each parameter p with gradient g:
//   d = g + weight_decay * p                           (when weight_decay != 0: L2, part of the gradient)
//   if momentum != 0:
//     buf = d                                          on this parameter's first step (a copy)
//     buf = buf * momentum + (1 - dampening) * d       afterwards
//     d = d + momentum * buf   (nesterov)   or   d = buf
//   p = p + (-lr) * d
// Elementwise in the parameter's precision (FP32, or FP64), each double scalar rounded to it first.
// A Float16 or BFloat16 parameter is updated through an FP32 master weight and FP32 buffer (optimizer.h).
#pragma once
#include "core/arg.h"
#include "optim/optimizer.h"

namespace halfgrad::optim {

class SGDOptions : public OptimizerOptions {
 public:
  /// lr has no default, as in PyTorch; momentum, dampening and weight_decay default to 0.
  explicit SGDOptions(double lr) : lr_(lr) {}

  HG_ARG(double, lr);
  HG_ARG(double, momentum) = 0.0;
  HG_ARG(double, dampening) = 0.0;
  HG_ARG(double, weight_decay) = 0.0;
  HG_ARG(bool, nesterov) = false;

  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SGDOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double v) override { lr_ = v; }
  /// As torch.optim.SGD: lr, momentum, weight_decay >= 0; nesterov needs momentum > 0 and dampening 0.
  void validate() const override;
  nlohmann::json to_json() const override;
  void from_json(const json_checked::Field& j) override;
};

struct SGDParamState : OptimizerParamState {
  Tensor momentum_buffer;  // undefined until the first step with momentum != 0
  nlohmann::json to_json(StateTensorCodec& codec, const std::string& index) const override;
  void from_json(const json_checked::Field& j, StateTensorCodec& codec) override;
  void check_matches(const Tensor& param, const std::string& where) const override;
  std::vector<Tensor*> tensors() override { return {&master, &momentum_buffer}; }
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& defaults);
  SGD(std::vector<OptimizerParamGroup> groups, const SGDOptions& defaults);

  /// CPU parameters one by one; all CUDA parameters of all groups in one launch (sgd_cuda.cu), each
  /// with its group's options.
  void step() override;
  void undo_skipped_step() override;

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override {
    return std::make_unique<SGDParamState>();
  }

 private:
  std::vector<SGDParamState*> last_cuda_first_;  // momentum buffers the last step()'s CUDA launch created
};

}  // namespace halfgrad::optim
