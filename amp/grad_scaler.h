// grad_scaler.h - dynamic loss scaling, as torch.amp.GradScaler (torch/amp/grad_scaler.py and the
// _amp_update_scale_ / _amp_foreach_non_finite_check_and_unscale_ kernels, PyTorch >= 2.3).
//
// Why: FP16 gradients smaller than 2^-24 flush to zero. Multiplying the loss by a large scale S before
// backward multiplies every gradient by S (the chain rule is linear), lifting small gradients into
// FP16's range; the gradients are divided by S again before the optimizer sees them. If S is too
// large some gradient overflows to inf (or becomes NaN); that step is skipped and S is halved. After
// growth_interval clean steps in a row S is doubled again, so S hovers just below the overflow level.
//
// The loop (PyTorch's recipe):
//     optimizer.zero_grad();
//     Tensor loss = ...;                         // forward, under AutocastGuard
//     scaler.scale(loss).backward();             // grads = S * dloss/dp
//     scaler.unscale_(optimizer);                // optional: only to clip or inspect true grads
//     clip_grad_norm_(params, max_norm);
//     scaler.step(optimizer);                    // unscale_ if not done; optimizer.step() unless inf/NaN
//     scaler.update();                           // backoff or grow S
//
// The state: scale S (an FP32 value, as PyTorch's 0-d float32 tensor) and growth_tracker (int32: clean
// steps since the last change). update() is exactly _amp_update_scale_:
//     if found_inf:  S = float(S * backoff_factor);  tracker = 0
//     else:          tracker += 1
//                    if tracker == growth_interval:  S' = float(S * growth_factor); S = S' if S' is finite; tracker = 0
// (the products are formed in double, from the FP32 S and the double factors, and rounded to float).
// Like PyTorch, S and the tracker start lazily at the first scale(): unscale_, step and update before
// any scale() throw. Per optimizer the scaler tracks a stage: READY -> (unscale_) UNSCALED ->
// (step) STEPPED, reset to READY by update(). So unscale_ twice, unscale_ after step, or step twice
// without an update() in between throw, as in PyTorch.
//
// Gradient dtypes: unscale_ multiplies FP32 (and FP64) gradients in place by inv_scale =
// float(1 / double(S)) and records found_inf if any element is inf or NaN (before scaling; the grads
// are scaled either way). FP16 gradients are refused with PyTorch's error ("Attempting to unscale FP16
// gradients"): divided by S in place they would underflow, which is what scaling exists to avoid.
// For pure-FP16 models (FP16 parameters with FP32 master weights in the optimizer) set
// GradScalerOptions().fp16_grads_to_fp32(true): each FP16 gradient is then replaced by a new FP32
// tensor holding float(g) * inv_scale, which the optimizers accept - the FP32 "master gradients" of
// NVIDIA apex's O2. This is halfgrad's extension; PyTorch has no equivalent switch.
//
// BF16 (AutocastOptions().dtype(kBFloat16), or BFloat16 parameters): loss scaling is not needed.
// bfloat16 has FP32's 8-bit exponent, so a gradient underflows only below ~9.2e-41 (FP32's own
// subnormal range), not below FP16's 6e-8; PyTorch's BF16 recipe drops the GradScaler. A scaler left
// enabled still works - BF16 gradients are unscaled in place (in FP32, rounded once: a power-of-two
// scale changes no mantissa bit), and a BF16 0-d loss is scaled like an FP16 one - but it writes one
// note to std::cerr, the first time scale() runs in a BF16 autocast region or on a BF16 loss, or
// unscale_ meets a BF16 gradient, saying why it can be turned off (bf16_note_written() reports it).
//
// CUDA gradients (grad_scaler_cuda.cu): unscale_ multiplies every CUDA gradient of the optimizer and
// checks it for inf/NaN in ONE launch, setting a found_inf flag in device memory (PyTorch's
// found_inf_per_device); nothing waits. step() then, when every gradient of the optimizer is on
// CUDA, hands the flag to the optimizer (Optimizer::set_found_inf), whose fused update skips itself
// on the device, and only afterwards copies the flag to the host (one 4-byte copy per step, as
// PyTorch's found_inf.item()): the update is queued without waiting for the check. If the flag was
// set, the optimizer's host bookkeeping is taken back (Optimizer::undo_skipped_step) and the step
// counts as skipped, exactly as on the CPU. With CPU and CUDA gradients in one optimizer the flag is
// read before the step instead. update() reads any flag not read yet (unscale_ without step). The
// scale and growth tracker stay on the host, updated from the flags read.
//
// Capturable (GradScalerOptions().capturable(true); PyTorch's GradScaler with a capturable or fused
// optimizer, whose step() passes found_inf to the optimizer and never reads it): no host
// synchronisation in the iteration, so that it can be captured in a CUDA graph (core/cuda/graph.h).
// Once scale() has seen a CUDA loss, S, the growth tracker and the counters (skipped steps, the run of
// skipped iterations, the last found_inf) live on the device:
//   scale()    multiplies by the device S (no host-to-device copy);
//   unscale_   forms inv_scale from the device S in its kernel; CUDA gradients only (a CPU one throws);
//   step()     hands the flag to the optimizer, which must skip on the device with nothing to undo on
//              the host (Optimizer::skips_on_device(): AdamWOptions().capturable(true)), and returns
//              true without knowing whether the update ran (the device decides);
//   update()   runs the update rule below in a one-thread kernel over the device state.
// Every accessor that reports the state (get_scale, get_growth_tracker, found_inf, skipped_steps,
// consecutive_skipped_steps, skip_streak, scale_below_one, state_dict) copies it back first (one
// device-to-host copy: the host waits for the stream) - once an epoch, not inside the step. The
// warnings of the diagnostics below are written then, when such a read finds their condition newly
// met, so they can come later than the iteration that caused them. skipped_steps() counts skipped
// iterations (one per update()) rather than skipped step() calls: the same with one optimizer.
// load_state_dict and update(new_scale) set the host values; the device state is made again from them
// by the next scale().
//
// Several ranks (data parallelism, dist/distributed_data_parallel.h): each rank's gradients are
// averaged before unscale_, but a rank can still find an inf the others do not (an overflow in its own
// unscale, or a gradient touched after the reduction), and a rank that skips a step the others take
// leaves the replicas different for good. set_found_inf_all_reduce(fn) (installed by
// dist::set_communicator, dist/scaler_agreement.h: dist sits above amp, so the scaler takes a function,
// not a Communicator) makes unscale_ MAX-reduce its found_inf flag over the ranks, once per optimizer,
// before step()'s skip decision and update()'s scale change: every rank then skips the same steps and
// keeps the same scale and growth tracker. For CUDA gradients the device flag is reduced in place on
// the device (no host synchronisation added: an NCCL all-reduce on the stream); with CPU gradients (or
// none) a 1-element CPU FP32 flag is. Every rank must call unscale_/step for the same optimizers in
// the same order (they are collectives then).
//
// Disabled (enabled(false)): scale returns the loss unchanged, unscale_ and update do nothing, step
// calls optimizer.step() and returns true, get_scale() is 1 and state_dict() is {}.
//
// halfgrad's extensions to PyTorch's algorithm (each off or harmless by default):
//   max_scale          growth stops at this value: S' = min(S * growth_factor, max_scale). Starting
//                      low and capping (init 8192, cap 32768: the "seed recipe") keeps S away from the
//                      overflow level for models whose gradients are large; PyTorch has no cap.
//   diagnostics        update() counts consecutive skipped iterations. When the count reaches
//                      skip_warning_after (default 10) it writes one warning line to std::cerr and
//                      skip_streak() turns true (until a step succeeds): a loss that is NaN or inf
//                      whatever the scale (bad input, a diverged model) only ever halves S, silently in
//                      PyTorch. When S first falls below 1 (gradients overflow even unscaled) it warns
//                      once and scale_below_one() is true while it lasts.
// Buffers on a skipped step (a departure from PyTorch's training loops, not from its GradScaler):
// step() skips the optimizer, but the forward that overflowed has already folded its inf/NaN batch
// statistics into BatchNorm's running_mean / running_var, which in PyTorch then stay NaN for good
// (pytorch#115500). GradScaler sees only gradients, so the fix sits in the loop: nn::BufferSnapshot
// (nn/buffer_snapshot.h) captured before the forward and restored when step() returns false makes a
// skipped step change nothing but the loss scale. halfgrad-unet3d's train loop does this.
// state_dict() adds "max_scale" (when set), "skip_warning_after" and "_consecutive_skipped" to
// PyTorch's keys; PyTorch's load_state_dict ignores keys it does not know, and ours accepts a dict
// without them (PyTorch's own), leaving those fields as constructed.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/arg.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace halfgrad::amp {

class GradScalerOptions {
 public:
  /// PyTorch's defaults: init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval 2000.
  GradScalerOptions() = default;

  HG_ARG(double, init_scale) = 65536.0;  // 2^16
  HG_ARG(double, growth_factor) = 2.0;
  HG_ARG(double, backoff_factor) = 0.5;
  HG_ARG(int64_t, growth_interval) = 2000;
  HG_ARG(bool, enabled) = true;
  /// halfgrad's extension: unscale FP16 gradients into new FP32 gradient tensors instead of throwing.
  HG_ARG(bool, fp16_grads_to_fp32) = false;
  /// halfgrad's extension: growth never takes the scale above `v` (default +inf: no cap, as PyTorch).
  /// The constructor throws unless v > 0 and init_scale <= v.
  HG_ARG(double, max_scale) = std::numeric_limits<double>::infinity();
  /// halfgrad's extension: warn (one line on std::cerr) after this many consecutive skipped
  /// iterations; 0 turns the warning off (the counter is kept either way). Default 10. Throws from
  /// the constructor when negative.
  HG_ARG(int64_t, skip_warning_after) = 10;
  /// halfgrad's switch for CUDA graphs: the scaler's state on the device and no host read in the
  /// iteration (see the file comment). Default false.
  HG_ARG(bool, capturable) = false;
};

class GradScaler {
 public:
  /// Throws (when enabled) unless growth_factor > 1 and backoff_factor < 1, as PyTorch asserts, and
  /// unless init_scale > 0, growth_interval >= 1, 0 < init_scale <= max_scale and
  /// skip_warning_after >= 0 (halfgrad's checks).
  explicit GradScaler(const GradScalerOptions& options = GradScalerOptions());

  /// loss * S, recorded on the tape so that backward starts from S (and every gradient carries the
  /// factor S). S is an FP32 0-d tensor, so an FP16 0-d loss gives an FP32 product as in PyTorch's
  /// type promotion; a loss with dimensions keeps its dtype (the product is formed in FP32 and
  /// rounded once). Disabled: returns `loss`.
  Tensor scale(const Tensor& loss);
  /// Divide `optimizer`'s gradients by S (multiply by float(1 / double(S))) and record whether any
  /// was inf or NaN. At most once per optimizer between update()s, and not after step(). Writes the
  /// gradients in place: each one's version (Tensor::version) goes up by one (an FP16 gradient is
  /// replaced by a new FP32 one instead, under fp16_grads_to_fp32).
  void unscale_(optim::Optimizer& optimizer);
  /// unscale_ if not done yet this iteration, then optimizer.step() unless a gradient was inf/NaN.
  /// Returns whether optimizer.step() ran. Throws if no parameter of `optimizer` has a gradient
  /// (PyTorch: "No inf checks were recorded for this optimizer").
  bool step(optim::Optimizer& optimizer);
  /// Back off or grow S from the found_inf of every optimizer stepped since the last update, and
  /// reset every optimizer's stage. Growth is capped at max_scale and never produces inf. Counts
  /// consecutive skipped iterations and writes the diagnostics of the file comment to std::cerr.
  void update();
  /// PyTorch's update(new_scale): set S directly (rounded to FP32); the tracker is left as it is.
  void update(double new_scale);

  /// The agreement of several ranks on found_inf (see the file comment): fn(flag) must replace the
  /// 1-element FP32 `flag` (CPU or CUDA) in place by its maximum over every rank. An empty function
  /// (the default) means one rank.
  using FoundInfAllReduce = std::function<void(Tensor& flag)>;
  void set_found_inf_all_reduce(FoundInfAllReduce fn) { found_inf_all_reduce_ = std::move(fn); }

  /// S (init_scale until the first scale()); 1 when disabled.
  double get_scale() const;
  /// Clean steps since the last change of S; 0 when disabled.
  int64_t get_growth_tracker() const;
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double v) { growth_factor_ = v; }
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double v) { backoff_factor_ = v; }
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t v) { growth_interval_ = v; }
  bool is_enabled() const { return enabled_; }

  /// For logging: whether the last step() found an inf/NaN (and so skipped optimizer.step()), and
  /// how many step() calls have been skipped since construction (not part of state_dict, as in PyTorch
  /// which has neither).
  bool found_inf() const { read_device_state(); return last_found_inf_; }
  int64_t skipped_steps() const { read_device_state(); return skipped_steps_; }
  /// The cap on S (+inf when none).
  double get_max_scale() const { return max_scale_; }
  /// Iterations skipped in a row up to the last update() (0 after a successful one); in state_dict.
  int64_t consecutive_skipped_steps() const { read_device_state(); return consecutive_skipped_; }
  /// True while the current run of skipped iterations is at least skip_warning_after long (never
  /// when the warning is off): the loss or its gradients are non-finite whatever the scale.
  bool skip_streak() const {
    read_device_state();
    return skip_warning_after_ > 0 && consecutive_skipped_ >= skip_warning_after_;
  }
  /// True while S < 1: gradients overflow (or are NaN) even without scaling.
  bool scale_below_one() const { return enabled_ && get_scale() < 1.0; }
  /// Number of diagnostic lines written to std::cerr since construction (the BF16 note not included).
  int64_t warnings_emitted() const { return warnings_emitted_; }
  /// Whether the one-time BF16 note of the file comment was written (a BF16 region, loss or gradient
  /// was seen by this enabled scaler).
  bool bf16_note_written() const { return bf16_noted_; }
  /// Whether S lives on the device now (capturable, after a scale() of a CUDA loss).
  bool state_on_device() const { return scale_device_.defined(); }
  /// The device S (0-d FP32 CUDA tensor) of a capturable scaler; undefined before the first scale().
  const Tensor& device_scale() const { return scale_device_; }
  /// The 1-element FP32 CUDA found_inf flag unscale_ made for `optimizer` this iteration (until
  /// update()); undefined when there is none (not unscaled yet, or CPU gradients only). A capturable
  /// loop passes it to nn::BufferSnapshot::restore_if.
  Tensor device_found_inf(const optim::Optimizer& optimizer) const;

  /// {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} as PyTorch,
  /// plus "skip_warning_after", "_consecutive_skipped" and (when a cap is set) "max_scale"; {} when
  /// disabled.
  nlohmann::json state_dict() const;
  /// Restore what state_dict() wrote (or PyTorch's state_dict: the extra keys are optional); throws
  /// on an empty dict (saved from a disabled scaler), as PyTorch, on a missing PyTorch key or a field
  /// of the wrong type, and on a value the constructor would refuse (scale <= 0 or beyond float32,
  /// growth factor <= 1, backoff outside (0, 1), growth interval < 1, ...); nothing is changed then. A
  /// loaded scale above max_scale is kept; the next growth step brings it down to max_scale.
  void load_state_dict(const nlohmann::json& state_dict);

 private:
  static void check_settings(const char* who, double scale, double growth_factor, double backoff_factor,
                             int64_t growth_interval, double max_scale, int64_t skip_warning_after);
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    bool found_inf = false;       // PyTorch's found_inf_per_device, for the one (CPU) device
    bool has_inf_check = false;   // false when no parameter had a gradient
    Tensor device_found_inf;      // the CUDA gradients' flag (1-element FP32), until read into found_inf
    bool all_cuda = false;        // every gradient was on CUDA: step() may skip on the device
  };
  void check_initialized(const char* what) const;
  /// Write the BF16 note to std::cerr once (`seen` says what was BF16).
  void note_bf16(const char* seen);
  /// found_inf of `st`, reading the device flag into it first if one is pending (a D2H copy).
  static bool resolve_found_inf(OptimizerState& st);
  /// Capturable: S, the tracker and the counters made on the device from the host values.
  void make_device_state();
  /// Capturable, with device state: copy it into the host fields (waits for the stream) and write the
  /// diagnostics' warnings newly due. Does nothing otherwise.
  void read_device_state() const;
  /// The diagnostics' warnings of the file comment, for the values now in the host fields.
  void warn_diagnostics(bool was_below_one, bool streak_reached) const;

  bool enabled_;
  bool fp16_grads_to_fp32_;
  bool bf16_noted_ = false;
  double init_scale_;
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  int32_t init_growth_tracker_ = 0;
  // Capturable scalers with device state keep the next five fields as copies of the device state,
  // refreshed by read_device_state() (hence mutable).
  mutable std::optional<float> scale_;            // PyTorch's _scale: created by the first scale()
  mutable std::optional<int32_t> growth_tracker_; // PyTorch's _growth_tracker
  // Keyed by the optimizer's address, as PyTorch keys _per_optimizer_states by id(optimizer).
  std::unordered_map<const optim::Optimizer*, OptimizerState> per_optimizer_;
  mutable bool last_found_inf_ = false;
  mutable int64_t skipped_steps_ = 0;
  double max_scale_;
  int64_t skip_warning_after_;
  mutable int64_t consecutive_skipped_ = 0;
  mutable int64_t warnings_emitted_ = 0;
  bool capturable_;
  Tensor scale_device_;      // capturable: S (0-d FP32, CUDA)
  Tensor counters_device_;   // capturable: grad_scaler_cuda.h's kNumCounters Int64 counters (CUDA)
  mutable bool device_newer_ = false;  // the device state has changed since read_device_state
  FoundInfAllReduce found_inf_all_reduce_;
};

}  // namespace halfgrad::amp
