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
// A Float16 or BFloat16 parameter is updated through an FP32 master weight with FP32 moments
// (optimizer.h); master_weights(false) takes Float16 parameters only (a BFloat16 one throws).
// With AdamWOptions().master_weights(false) (pure FP16, the "O3" of amp/opt_level.h) a Float16
// parameter is updated in place instead, with Float16 moments: each element's p, m and v are read as
// half, the update above runs in float, and the three are rounded back to half (as apex's FusedAdam
// does for half parameters; torch.optim.AdamW on half tensors rounds after every op instead). This
// is what masters exist to avoid: an update smaller than half the spacing of halves near p is lost
// (near 1.0 the spacing is 2^-10), and v = (1 - beta2) * g^2 flushes to zero below about 2^-24, so
// for |g| below about 8e-3 the denominator is eps alone and the step becomes lr * m / eps - far too
// large with eps 1e-8. Pure FP16 AdamW needs a larger eps (amp/opt_level.h raises it to 1e-4).
//
// Capturable (AdamWOptions().capturable(true), PyTorch's capturable=True): for CUDA parameters the
// learning rate and each parameter's step count live on the device, so that the step holds no host
// number that changes from step to step and can be captured in a CUDA graph (core/cuda/graph.h) and
// replayed. The fused kernel computes the per-step scalars on the device from them (adamw_cuda.cu),
// and advances the device step count itself - unless GradScaler's found_inf flag is set, so a skipped
// step needs nothing taken back on the host (skips_on_device() is true). The lr: step() writes each
// capturable group's lr into its device copy first (a fill kernel, ordered on the stream), except
// while a capture is active, because a captured write would replay the lr of the capture; around a
// graph the caller sets the groups' lr and calls stage_lr() before each replay. Saving reads the
// device step counts (a device-to-host copy: state_dict is not for the captured step). The host's
// AdamWParamState::step of a capturable CUDA parameter is the count when its device copy was made
// (its first step, or a load); steps() gives the current one.
#pragma once
#include <tuple>

#include "core/arg.h"
#include "optim/optimizer.h"

namespace halfgrad::optim {

class AdamWOptions : public OptimizerOptions {
 public:
  /// (beta1, beta2); an alias because HG_ARG's type cannot contain a comma (libtorch's adam.h does the same).
  using betas_t = std::tuple<double, double>;

  /// PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2.
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}

  HG_ARG(double, lr);
  HG_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  HG_ARG(double, eps) = 1e-8;
  HG_ARG(double, weight_decay) = 1e-2;
  /// halfgrad's switch: false updates Float16 parameters in place with Float16 moments and no FP32
  /// master (pure FP16, see above). Default true. No effect on Float32 / Float64 parameters.
  HG_ARG(bool, master_weights) = true;
  /// Device-side lr and step counts for CUDA parameters (see the file comment). Default false.
  HG_ARG(bool, capturable) = false;

  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double v) override { lr_ = v; }
  /// As torch.optim.AdamW: 0 <= lr, 0 <= eps, 0 <= beta1 < 1, 0 <= beta2 < 1, 0 <= weight_decay.
  void validate() const override;
  nlohmann::json to_json() const override;
  void from_json(const json_checked::Field& j) override;
};

struct AdamWParamState : OptimizerParamState {
  int64_t step = 0;    // updates applied to this parameter (t above); capturable CUDA: see step_device
  Tensor step_device;  // capturable CUDA parameters: the current count (1-element Int64), step as of its making
  /// The updates applied so far: step, or step_device read back (a device-to-host copy) when defined.
  int64_t steps() const;
  Tensor exp_avg;      // m, in the update dtype (FP32 for a Float16 parameter; Float16 without masters)
  Tensor exp_avg_sq;   // v
  /// As the base, but also accepts the pure-FP16 layout of master_weights(false): a Float16 parameter
  /// without a master and with Float16 moments of its shape.
  nlohmann::json to_json(StateTensorCodec& codec, const std::string& index) const override;
  void from_json(const json_checked::Field& j, StateTensorCodec& codec) override;
  void check_matches(const Tensor& param, const std::string& where) const override;
  std::vector<Tensor*> tensors() override { return {&master, &exp_avg, &exp_avg_sq}; }
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = AdamWOptions());
  AdamW(std::vector<OptimizerParamGroup> groups, const AdamWOptions& defaults = AdamWOptions());

  /// CPU parameters one by one; all CUDA parameters of all groups in one launch (adamw_cuda.cu),
  /// each with its group's options and its own step count.
  void step() override;
  void undo_skipped_step() override;
  /// True when every group is capturable: a step the found_inf flag skips leaves nothing to undo.
  bool skips_on_device() const override;
  /// Queues the write of every capturable group's current lr into its device copy (see the file
  /// comment): call it before each replay of a captured step, after setting the lr. Nothing waits.
  void stage_lr();

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override {
    return std::make_unique<AdamWParamState>();
  }

 private:
  std::vector<AdamWParamState*> last_cuda_states_;  // host steps advanced by the last step()'s CUDA launch
  std::vector<Tensor> lr_device_;                   // per group: its lr (1-element Float64, CUDA) when capturable
};

}  // namespace halfgrad::optim
