// optimizer.h - what every halfgrad optimizer shares: parameter groups, per-parameter state,
// zero_grad, step, state_dict / load_state_dict, and FP32 master weights for FP16 parameters.
//
// Names and structure follow libtorch's C++ frontend (torch/optim/optimizer.h) and PyTorch's
// torch.optim.Optimizer:
//   * An optimizer holds parameter groups. Each group is a list of parameters (leaf Tensors whose
//     .grad() backward fills) and its own options (lr, weight decay, ...); a group built without
//     options takes a copy of the optimizer's defaults. LR schedulers change each group's lr.
//   * step() updates every parameter that has a gradient and skips the ones whose grad is undefined.
//     It reads and writes raw data under a NoGradGuard, so an update is never recorded on the tape.
//   * Per-parameter state (step count, moment buffers) is created on a parameter's first update.
//
// Master weights (mixed precision, "O2"): a Float16 parameter cannot hold a small update - near 1.0
// the spacing of halves is 2^-10, so adding lr * update = 1e-4 rounds back to the same value and the
// parameter never moves. For a Float16 parameter the optimizer therefore keeps an FP32 copy (the
// master weight, created from the parameter on its first update), keeps its moments in FP32, applies
// the update to the master, and writes the master rounded to half (nearest-even) back into the
// parameter. BFloat16 parameters are handled the same way (their spacing near 1.0 is 2^-7, worse
// still), with the master rounded to bfloat16. Gradients may be Float16, BFloat16 or Float32; they are
// converted to the update's precision first. Float32 parameters are updated in place in FP32, Float64
// ones in FP64.
//
// CUDA parameters (Float32, Float16 or BFloat16): the same update, in one fused launch over every CUDA parameter of
// every group (each tensor carries its own group's hyperparameters in the launch's table; see
// optim/multi_tensor_cuda.cuh). Their state (moments, masters) lives on the parameter's device, in its
// memory format. A gradient must be on its parameter's device. CPU and CUDA parameters may be mixed.
//
// state_dict() is JSON in PyTorch's layout: {"state": {"<index>": {...}}, "param_groups": [{<options>,
// "params": [<index>, ...]}]}, where a parameter's index counts through the groups in order. Its
// tensors (moments, master weights) go one of two ways (a StateTensorCodec):
//   * state_dict(): inline, as their exact bytes in base64 (optim/tensor_json.h) - one JSON value,
//     kept for API compatibility, but 4/3 the bytes and slow to encode;
//   * state_dict(tensors, prefix): into a NamedTensors list ("<prefix>state.<index>.<field>", e.g.
//     "optim.state.3.exp_avg"), the JSON holding only that name - what a checkpoint writes to a
//     safetensors file (unet3d/run_checkpoint.h).
// Either way save -> load -> continue gives bit-identical parameters to never having stopped. CUDA
// state is saved from the host (contiguous NCDHW: tensor_to_json copies; the list keeps the device
// tensor and safetensors::write_file stages it), and load_state_dict puts it back on each
// parameter's device and memory format.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_checked.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace halfgrad::optim {

/// Hyperparameters of one parameter group. Each optimizer derives its own (AdamWOptions, SGDOptions)
/// with chainable setters; the base gives schedulers access to lr.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  /// Throws halfgrad::Error naming the optimizer and the bad value (e.g. a negative lr).
  virtual void validate() const = 0;
  /// The options as a JSON object ({"lr": ..., "weight_decay": ...}), without "params".
  virtual nlohmann::json to_json() const = 0;
  /// Read back what to_json wrote. `j` is untrusted (a checkpoint's metadata): a missing key or a
  /// wrong type throws halfgrad::Error naming the field (json_checked::Field).
  virtual void from_json(const json_checked::Field& j) = 0;
};

/// How a parameter state's tensors are put into its JSON and taken back (see the top of this file).
class StateTensorCodec {
 public:
  virtual ~StateTensorCodec() = default;
  /// The JSON value that stands for `t`, the state's field `field` ("exp_avg") of parameter
  /// `index` (the state_dict's key).
  virtual nlohmann::json put(const std::string& index, const std::string& field, const Tensor& t) = 0;
  /// The tensor `j` stands for (a new or shared CPU tensor; the caller moves it to the parameter's
  /// device). Throws halfgrad::Error naming the field when `j` is not what put() wrote.
  virtual Tensor get(const json_checked::Field& j) = 0;
};

/// Per-parameter state. `master` is the FP32 master weight of a Float16 / BFloat16 parameter (undefined for
/// Float32 / Float64 parameters, which are updated in place).
struct OptimizerParamState {
  virtual ~OptimizerParamState() = default;
  Tensor master;
  /// The state as a JSON object, its tensors through `codec` (`index` is the parameter's key).
  virtual nlohmann::json to_json(StateTensorCodec& codec, const std::string& index) const;
  /// Read back what to_json wrote; errors as OptimizerOptions::from_json.
  virtual void from_json(const json_checked::Field& j, StateTensorCodec& codec);
  /// Throws unless the loaded state fits `param`: a master exactly when the parameter is Float16 or
  /// BFloat16, and buffers of the parameter's shape in its update dtype (FP32 for a 16-bit parameter).
  virtual void check_matches(const Tensor& param, const std::string& where) const;
  /// Every tensor of the state (defined or not), for moving it to a parameter's device on load.
  virtual std::vector<Tensor*> tensors() { return {&master}; }

 protected:
    /// The dtype the update computes in for a parameter: Float32 for Float16 / BFloat16 (master weights),
  /// else its own.
  static Dtype update_dtype(const Tensor& param) { return is_reduced_float(param.dtype()) ? kFloat32 : param.dtype(); }
  /// Throws unless `buffer` is undefined or has `param`'s shape and update dtype.
  static void check_buffer(const Tensor& buffer, const char* name, const Tensor& param, const std::string& where);
};

/// A list of parameters with their options (as torch::optim::OptimizerParamGroup).
class OptimizerParamGroup {
 public:
  /// Options left empty: the optimizer fills in a copy of its defaults.
  explicit OptimizerParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}
  OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
      : params_(std::move(params)), options_(std::move(options)) {}
  OptimizerParamGroup(const OptimizerParamGroup& o);
  OptimizerParamGroup& operator=(const OptimizerParamGroup& o);
  OptimizerParamGroup(OptimizerParamGroup&&) = default;
  OptimizerParamGroup& operator=(OptimizerParamGroup&&) = default;

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }

  /// The lr the first LR scheduler found (PyTorch's group["initial_lr"]); schedulers' base_lrs.
  std::optional<double> initial_lr;

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient, in place: each such parameter's version
  /// (Tensor::version) and its state tensors' go up by one.
  virtual void step() = 0;

  /// Clear every parameter's gradient: drop it (set_to_none, PyTorch >= 2.0's default; the next
  /// backward allocates a fresh one) or fill it with zeros (zero_, which bumps the .grad's version).
  void zero_grad(bool set_to_none = true);

  /// Append a group; its options default to a copy of the optimizer's defaults. Throws if a
  /// parameter is undefined, not floating point, not a leaf, or already in a group.
  void add_param_group(const OptimizerParamGroup& group);

  std::vector<OptimizerParamGroup>& param_groups() { return param_groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return param_groups_; }
  /// Every parameter, group by group.
  std::vector<Tensor> parameters() const;
  const OptimizerOptions& defaults() const { return *defaults_; }

  /// A parameter's state, or nullptr before its first update (for inspection and tests).
  const OptimizerParamState* param_state(const Tensor& param) const;

  /// Mixed precision on CUDA without a device-to-host copy before the update (GradScaler::step uses
  /// it): while `found_inf` (a 1-element Float32 CUDA tensor) is set, step()'s fused CUDA update reads
  /// it on the device and changes nothing there when it is nonzero. The host cannot know that yet, so
  /// step() advances its own bookkeeping (step counts, first-step momentum buffers) as if the update
  /// ran; a caller that then reads the flag as set calls undo_skipped_step() to take that back.
  /// step() throws while the flag is set if a CPU parameter has a gradient (it cannot read the flag).
  /// An undefined Tensor clears it.
  void set_found_inf(const Tensor& found_inf);
  /// After a step() whose CUDA update the found_inf flag skipped: restore the host-side state to what
  /// it was before that step(). Only valid right after it.
  virtual void undo_skipped_step() = 0;
  /// True when a step() the found_inf flag skips on the device leaves no host-side state to undo (a
  /// capturable optimizer: AdamWOptions().capturable(true)), so GradScaler need not read the flag.
  virtual bool skips_on_device() const { return false; }

  /// {"state": {"<index>": {...}}, "param_groups": [{<options>, "params": [indices]}]}, tensors in base64.
  nlohmann::json state_dict() const;
  /// The same JSON with each state tensor appended to `tensors` as "<prefix>state.<index>.<field>"
  /// (the tensor itself: CPU or CUDA, in its memory format, not copied) and only that name in the
  /// JSON. For a checkpoint: safetensors::write_file(tensors) then holds the bytes.
  nlohmann::json state_dict(NamedTensors& tensors, const std::string& prefix = "optim.") const;
  /// Restore options and state saved by state_dict() from an optimizer over parameters of the same
  /// groups, counts, shapes and dtypes (checked; nothing changes if a check fails). A missing key
  /// or a wrong type throws halfgrad::Error "<Name>::load_state_dict: field 'param_groups[0].lr'
  /// must be a number, got string", never nlohmann's own exception.
  void load_state_dict(const nlohmann::json& state_dict);
  /// Restore what state_dict(tensors, prefix) saved; `tensors` holds (at least) the named tensors.
  /// Same checks as above, plus: a named tensor missing from `tensors` throws, naming it.
  void load_state_dict(const nlohmann::json& state_dict, const NamedTensors& tensors);

 protected:
  /// `name` ("AdamW", "SGD") prefixes error messages.
  Optimizer(const char* name, std::vector<OptimizerParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults);

  /// A fresh, empty state object of the derived optimizer's type (for load_state_dict).
  virtual std::unique_ptr<OptimizerParamState> make_param_state() const = 0;

  /// The state of `param`, created on first use.
  template <typename State>
  State& state_of(const Tensor& param) {
    auto& slot = state_[param.impl()];
    if (!slot) slot = std::make_unique<State>();
    return static_cast<State&>(*slot);
  }

  /// The tensor the update reads and writes in place: `param` itself for Float32 / Float64, the FP32
  /// master copy in `state` for Float16 / BFloat16 (created from the parameter's values the first time).
  static Tensor update_target(const Tensor& param, OptimizerParamState& state);
  /// After the update: round the master into a Float16 / BFloat16 parameter (a no-op for the others).
  static void write_back(const Tensor& param, const OptimizerParamState& state);
  /// `grad` in dtype `d` (itself when it already is; a converted copy otherwise).
  static Tensor grad_as(const Tensor& grad, Dtype d);
  /// A CUDA parameter's gradient in the parameter's memory format (itself when it already is), after
  /// checking that it is on the parameter's device; the fused updates index both with one offset.
  Tensor cuda_grad_for(const Tensor& param, const Tensor& grad) const;
  /// Throws unless every tensor of `state` is on `param`'s device (a model moved after its optimizer
  /// was made would otherwise hand host pointers to a kernel).
  void check_state_device(const Tensor& param, OptimizerParamState& state) const;
  /// Count the in-place update step() makes next (core/tensor.h's version counter): bumps `param` and
  /// every defined tensor of `state` once. Called for each parameter with a gradient, CPU or CUDA.
  static void mark_updated(const Tensor& param, OptimizerParamState& state);
  /// The found_inf flag's device pointer (null when none). Call before changing anything: throws if
  /// the flag is set and a CPU parameter has a gradient.
  const float* found_inf_for_step() const;

  nlohmann::json state_dict_with(StateTensorCodec& codec) const;
  void load_state_dict_with(const nlohmann::json& state_dict, StateTensorCodec& codec);

  const char* name_;
  std::vector<OptimizerParamGroup> param_groups_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>> state_;
  Tensor found_inf_;  // see set_found_inf
};

/// Element count from which the update loops are split over OpenMP threads: below it, starting the
/// threads costs more than the few microseconds of arithmetic.
constexpr int64_t kParallelMinElements = int64_t{1} << 16;

}  // namespace halfgrad::optim
