// adamw.h - Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW
// (amsgrad=False, maximize=False; PyTorch's _single_tensor_adamw, the CPU path).
//
// For each parameter p with gradient g, at step t = 1, 2, ... (per parameter):
//   p  = p * (1 - lr * weight_decay)                    decoupled decay: not part of the gradient
//   m  = m * beta1 + (1 - beta1) * g                    first moment   (m, v start at 0)
//   v  = v * beta2 + (1 - beta2) * g * g                second moment
//   bias_correction1 = 1 - beta1^t,  bias_correction2 = 1 - beta2^t       (in double)
//   denom = sqrt(v) / sqrt(bias_correction2) + eps
//   p  = p + (-(lr / bias_correction1) * m) / denom
// The elementwise steps run in the parameter's precision (FP32, or FP64 for FP64 parameters) in
// exactly this order, as PyTorch's in-place ops do (mul_, add_, addcmul_, sqrt, div, add_, addcdiv_),
// with each scalar rounded to that precision first; the scalars themselves are computed in double,
// as Python computes them. Results agree with PyTorch to a few ulps rather than bit for bit: both
// sides may fuse a multiply and an add into one FMA (GCC's default -ffp-contract=fast here, PyTorch's
// vectorised add_ via vec::fmadd), and not always the same ones.
//
// A Float16 parameter is updated through an FP32 master weight with FP32 moments (optimizer.h).
#pragma once
#include <tuple>

#include "optim/optimizer.h"

namespace halfgrad::optim {

class AdamWOptions : public OptimizerOptions {
 public:
  /// PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2.
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}

  AdamWOptions& lr(double v) { lr_ = v; return *this; }
  AdamWOptions& betas(const std::tuple<double, double>& v) { betas_ = v; return *this; }
  AdamWOptions& eps(double v) { eps_ = v; return *this; }
  AdamWOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  double lr() const { return lr_; }
  const std::tuple<double, double>& betas() const { return betas_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }

  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double v) override { lr_ = v; }
  /// As torch.optim.AdamW: 0 <= lr, 0 <= eps, 0 <= beta1 < 1, 0 <= beta2 < 1, 0 <= weight_decay.
  void validate() const override;
  nlohmann::json to_json() const override;
  void from_json(const nlohmann::json& j) override;

 private:
  double lr_;
  std::tuple<double, double> betas_{0.9, 0.999};
  double eps_ = 1e-8;
  double weight_decay_ = 1e-2;
};

struct AdamWParamState : OptimizerParamState {
  int64_t step = 0;    // updates applied to this parameter (t above)
  Tensor exp_avg;      // m, in the update dtype (FP32 for a Float16 parameter)
  Tensor exp_avg_sq;   // v
  nlohmann::json to_json() const override;
  void from_json(const nlohmann::json& j) override;
  void check_matches(const Tensor& param, const std::string& where) const override;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = AdamWOptions());
  AdamW(std::vector<OptimizerParamGroup> groups, const AdamWOptions& defaults = AdamWOptions());

  void step() override;

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override {
    return std::make_unique<AdamWParamState>();
  }
};

}  // namespace halfgrad::optim
