#include "amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <iostream>

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/json_checked.h"
#include "ops/elementwise/elementwise.h"
#ifdef HALFGRAD_CUDA
#include "amp/grad_scaler_cuda.h"
#include "core/cuda/graph.h"
#endif

namespace halfgrad::amp {

GradScaler::GradScaler(const GradScalerOptions& o)
    : enabled_(o.enabled()),
      fp16_grads_to_fp32_(o.fp16_grads_to_fp32()),
      init_scale_(o.init_scale()),
      growth_factor_(o.growth_factor()),
      backoff_factor_(o.backoff_factor()),
      growth_interval_(o.growth_interval()),
      max_scale_(o.max_scale()),
      skip_warning_after_(o.skip_warning_after()),
      capturable_(o.capturable()) {
  if (!enabled_) return;
  check_settings("GradScaler", init_scale_, growth_factor_, backoff_factor_, growth_interval_, max_scale_,
                 skip_warning_after_);
  HG_CHECK(init_scale_ <= max_scale_, "GradScaler: max_scale must be >= init_scale, got max_scale "
                                          << max_scale_ << " and init_scale " << init_scale_);
}

// The range checks of the constructor and of load_state_dict (a checkpoint is untrusted input). The
// scale is held as a float32, so it must also be a finite float32. (A loaded scale may exceed
// max_scale: the next growth step brings it down, see grad_scaler.h.)
void GradScaler::check_settings(const char* who, double scale, double growth_factor, double backoff_factor,
                                int64_t growth_interval, double max_scale, int64_t skip_warning_after) {
  HG_CHECK(growth_factor > 1.0 && std::isfinite(growth_factor),
           who << ": the growth factor must be > 1.0 and finite, got " << growth_factor);
  HG_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0,
           who << ": the backoff factor must be in (0, 1), got " << backoff_factor);
  HG_CHECK(scale > 0.0 && scale <= std::numeric_limits<float>::max(),
           who << ": the scale (init_scale) must be > 0 and a finite float32, got " << scale);
  HG_CHECK(growth_interval >= 1, who << ": growth_interval must be >= 1, got " << growth_interval);
  HG_CHECK(max_scale > 0.0, who << ": max_scale must be > 0, got " << max_scale);
  HG_CHECK(skip_warning_after >= 0,
           who << ": skip_warning_after must be >= 0 (0 turns the warning off), got " << skip_warning_after);
}

void GradScaler::check_initialized(const char* what) const {
  HG_CHECK(scale_.has_value(), "GradScaler::" << what << ": attempted " << what << " but the scale is not set. "
                               "This may indicate your script did not use scaler.scale(loss) earlier in the iteration.");
}

void GradScaler::note_bf16(const char* seen) {
  if (bf16_noted_) return;
  bf16_noted_ = true;
  std::cerr << "GradScaler: note: " << seen << " is bfloat16. BF16 has FP32's exponent range (8 bits), so its "
               "gradients do not underflow the way FP16's do and loss scaling is not needed; the scaler keeps "
               "working (BF16 gradients are unscaled in place), but GradScalerOptions().enabled(false) is the "
               "BF16 recipe.\n";
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!enabled_) return loss;
  if (autocast_enabled() && autocast_lower_dtype() == kBFloat16) note_bf16("the autocast region");
  else if (loss.defined() && loss.dtype() == kBFloat16) note_bf16("the loss");
  if (!scale_) {  // PyTorch's _lazy_init_scale_growth_tracker
    scale_ = static_cast<float>(init_scale_);
    growth_tracker_ = init_growth_tracker_;
  }
  Tensor s;
  if (capturable_ && loss.defined() && loss.is_cuda()) {  // the device S: no copy in the iteration
    if (!scale_device_.defined()) make_device_state();
    s = scale_device_;
  } else {
    s = Tensor::scalar(*scale_, kFloat32).copy_to(loss.device());
  }
  Tensor scaled = ops::mul(loss, s);
  // PyTorch's type promotion: a 0-d FP32 scale does not widen a loss that has dimensions, so such a
  // loss keeps its dtype (the product is formed in FP32 and rounded once); a 0-d FP16 loss times the
  // 0-d FP32 scale is FP32, which ops::mul already gives.
  if (loss.dim() > 0 && scaled.dtype() != loss.dtype()) scaled = scaled.to(loss.dtype());
  return scaled;
}

void GradScaler::make_device_state() {
#ifdef HALFGRAD_CUDA
  HG_CHECK(!cuda::capturing(), "GradScaler::scale (capturable): the scaler's device state is made by the first "
                               "scale() of a CUDA loss, which must run before a CUDA graph capture (warm up eagerly)");
  scale_device_ = Tensor::scalar(*scale_, kFloat32).copy_to(Device::CUDA);
  std::vector<int64_t> counters(kNumCounters);
  counters[kGrowthTracker] = *growth_tracker_;
  counters[kSkippedSteps] = skipped_steps_;
  counters[kConsecutiveSkipped] = consecutive_skipped_;
  counters[kLastFoundInf] = last_found_inf_ ? 1 : 0;
  counters_device_ = Tensor::from_labels(counters, {kNumCounters}).copy_to(Device::CUDA);
  device_newer_ = false;
#else
  HG_FAIL("GradScaler::scale (capturable): halfgrad was built without CUDA");
#endif
}

void GradScaler::read_device_state() const {
#ifdef HALFGRAD_CUDA
  if (!device_newer_ || !scale_device_.defined()) return;
  const bool was_below_one = *scale_ < 1.0f;
  const int64_t streak_before = consecutive_skipped_;
  scale_ = static_cast<float>(scale_device_.item());  // the host waits for the stream here
  const Tensor c = counters_device_.copy_to(Device::CPU);
  const int64_t* v = c.data<int64_t>();
  growth_tracker_ = static_cast<int32_t>(v[kGrowthTracker]);
  skipped_steps_ = v[kSkippedSteps];
  consecutive_skipped_ = v[kConsecutiveSkipped];
  last_found_inf_ = v[kLastFoundInf] != 0;
  device_newer_ = false;
  warn_diagnostics(was_below_one, streak_before < skip_warning_after_ && consecutive_skipped_ >= skip_warning_after_);
#endif
}

void GradScaler::warn_diagnostics(bool was_below_one, bool streak_reached) const {
  if (skip_warning_after_ > 0 && streak_reached) {
    std::cerr << "halfgrad GradScaler warning: the last " << consecutive_skipped_
              << " optimizer steps were all skipped (inf/NaN gradients); loss scale now " << *scale_
              << ". If the loss itself is inf/NaN no scale helps: check the inputs, the learning rate and "
                 "which ops run in FP16."
              << std::endl;
    ++warnings_emitted_;
  }
  if (*scale_ < 1.0f && !was_below_one) {
    std::cerr << "halfgrad GradScaler warning: the loss scale fell below 1 (now " << *scale_
              << "): the gradients overflow FP16 even unscaled, or are NaN." << std::endl;
    ++warnings_emitted_;
  }
}

namespace {

// g *= inv_scale in place (in float for FP32, double for FP64); returns whether any element was inf
// or NaN before scaling. As _amp_foreach_non_finite_check_and_unscale_, grads are scaled either way.
template <typename T>
bool unscale_in_place(T* g, int64_t n, float inv_scale) {
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (n >= optim::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const T v = g[i];
    if (!std::isfinite(v)) found = 1;
    g[i] = inv_scale == 1.0f ? v : v * static_cast<T>(inv_scale);
  }
  return found != 0;
}

}  // namespace

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_initialized("unscale_");
  OptimizerState& st = per_optimizer_[&optimizer];
  HG_CHECK(st.stage != Stage::Unscaled,
           "GradScaler::unscale_: unscale_() has already been called on this optimizer since the last update().");
  HG_CHECK(st.stage != Stage::Stepped, "GradScaler::unscale_: unscale_() is being called after step().");
  // PyTorch: "FP32 division can be imprecise for certain compile options, so we carry out the
  // reciprocal in FP64." For a power-of-two scale it is exact either way.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(*scale_));

  std::vector<Tensor> params = optimizer.parameters();
  for (const Tensor& p : params) {  // check before changing anything
    const Tensor g = p.grad();
    HG_CHECK(!g.defined() || g.dtype() != kFloat16 || fp16_grads_to_fp32_,
             "GradScaler::unscale_: Attempting to unscale FP16 gradients (parameter of shape "
                 << shape_str(p.shape()) << "). Divided in place they would underflow; keep FP32 master "
                 "parameters, or set GradScalerOptions().fp16_grads_to_fp32(true) for FP16 parameters.");
  }
  for (const Tensor& p : params)
    if (p.grad().defined() && p.grad().dtype() == kBFloat16) note_bf16("a gradient");
  NoGradGuard no_grad;
  bool found_inf = false, any = false, any_cpu = false;
#ifdef HALFGRAD_CUDA
  std::vector<UnscaleCudaTensor> cuda_grads;  // all CUDA gradients: one launch below
  std::vector<Tensor> keep_alive;             // FP16 sources of new FP32 grads, until the launch is queued
#endif
  for (Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    any = true;
    HG_CHECK(!state_on_device() || g.is_cuda(),
             "GradScaler::unscale_ (capturable): the parameter of shape " << shape_str(p.shape())
                 << " has a CPU gradient; a capturable scaler keeps its scale on the device and takes CUDA "
                    "gradients only");
#ifdef HALFGRAD_CUDA
    if (g.is_cuda()) {
      Tensor dst = g;
      if (g.dtype() == kFloat16) {  // fp16_grads_to_fp32: the kernel writes float(g) * inv_scale here
        dst = Tensor::empty(g.shape(), kFloat32, g.device(), g.memory_format());
        p.set_grad(dst);
        keep_alive.push_back(g);
      }
      dst.bump_version();  // written in place by the launch below
      cuda_grads.push_back({g.raw_data(), dst.raw_data(), g.numel(), g.dtype(), dst.dtype()});
      continue;
    }
#endif
    any_cpu = true;
    if (g.dtype() == kFloat16) {  // fp16_grads_to_fp32: the unscaled value goes into a new FP32 grad
      g = g.cast_copy(kFloat32);
      p.set_grad(g);
    }
    g.bump_version();  // divided in place
    if (g.dtype() == kBFloat16) {  // in FP32, rounded back once (exact for a power-of-two scale)
      Tensor f = g.cast_copy(kFloat32);
      found_inf |= unscale_in_place(f.data<float>(), f.numel(), inv_scale);
      float_to_bfloat16_array(f.data<float>(), g.data<bfloat16_bits>(), static_cast<size_t>(g.numel()));
      continue;
    }
    found_inf |= g.dtype() == kFloat64 ? unscale_in_place(g.data<double>(), g.numel(), inv_scale)
                                       : unscale_in_place(g.data<float>(), g.numel(), inv_scale);
  }
  st.device_found_inf = Tensor();
#ifdef HALFGRAD_CUDA
  if (!cuda_grads.empty()) {
    st.device_found_inf = Tensor::zeros({1}, kFloat32, Device::CUDA);
    unscale_and_check_cuda(cuda_grads, inv_scale, st.device_found_inf.data<float>(),
                           state_on_device() ? scale_device_.data<float>() : nullptr);
  }
#endif
  if (found_inf_all_reduce_) {  // several ranks: every rank's flag becomes the max over all of them
    if (st.device_found_inf.defined()) {
      if (found_inf) st.device_found_inf.fill_(1.0);  // CPU and CUDA gradients: one flag carries both
      found_inf_all_reduce_(st.device_found_inf);     // on the device, in place
    } else {
      Tensor flag = Tensor::full({1}, found_inf ? 1.0 : 0.0, kFloat32);
      found_inf_all_reduce_(flag);
      found_inf = flag.item() != 0.0;
    }
  }
  st.found_inf = found_inf;
  st.all_cuda = any && !any_cpu;
  st.has_inf_check = any;
  st.stage = Stage::Unscaled;
}

bool GradScaler::resolve_found_inf(OptimizerState& st) {
  if (st.device_found_inf.defined()) {
    st.found_inf = st.found_inf || st.device_found_inf.item() != 0.0;  // the one D2H copy of the step
    st.device_found_inf = Tensor();
  }
  return st.found_inf;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    last_found_inf_ = false;
    return true;
  }
  check_initialized("step");
  HG_CHECK(per_optimizer_[&optimizer].stage != Stage::Stepped,
           "GradScaler::step: step() has already been called since the last update().");
  if (per_optimizer_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  OptimizerState& st = per_optimizer_[&optimizer];
  HG_CHECK(st.has_inf_check, "GradScaler::step: No inf checks were recorded for this optimizer "
                             "(none of its parameters has a gradient).");
  if (state_on_device()) {  // capturable: the device decides; nothing is read back
    HG_CHECK(optimizer.skips_on_device(),
             "GradScaler::step (capturable): the optimizer must skip a step on the device with nothing to undo "
             "on the host (Optimizer::skips_on_device(); for AdamW: AdamWOptions().capturable(true))");
    HG_CHECK(st.all_cuda && st.device_found_inf.defined(),
             "GradScaler::step (capturable): every gradient of the optimizer must be on CUDA");
    struct ClearFlag {
      optim::Optimizer& o;
      ~ClearFlag() { o.set_found_inf(Tensor()); }
    } clear{optimizer};
    optimizer.set_found_inf(st.device_found_inf);
    optimizer.step();
    st.stage = Stage::Stepped;
    device_newer_ = true;
    return true;  // queued; whether it was skipped is known on the device only
  }
  bool stepped;
  if (st.all_cuda && st.device_found_inf.defined()) {
    // Queue the update behind the check without waiting for it: the kernel reads the flag itself.
    struct ClearFlag {  // the flag must not outlive this call, even when step() throws
      optim::Optimizer& o;
      ~ClearFlag() { o.set_found_inf(Tensor()); }
    } clear{optimizer};
    optimizer.set_found_inf(st.device_found_inf);
    optimizer.step();
    stepped = !resolve_found_inf(st);
    if (!stepped) optimizer.undo_skipped_step();
  } else {
    stepped = !resolve_found_inf(st);
    if (stepped) optimizer.step();
  }
  if (!stepped) ++skipped_steps_;
  last_found_inf_ = st.found_inf;
  st.stage = Stage::Stepped;
  return stepped;
}

void GradScaler::update() {
  if (!enabled_) return;
  check_initialized("update");
#ifdef HALFGRAD_CUDA
  if (state_on_device()) {  // capturable: the same rule, on the device state, in one kernel
    ScalerFlags flags{};
    for (auto& entry : per_optimizer_) {
      if (!entry.second.has_inf_check) continue;
      HG_CHECK(flags.count < kMaxScalerFlags, "GradScaler::update (capturable): more than " << kMaxScalerFlags
                                                  << " optimizers in one iteration");
      flags.flag[flags.count++] = entry.second.device_found_inf.data<float>();  // unscale_ made it (CUDA only)
    }
    HG_CHECK(flags.count > 0, "GradScaler::update: No inf checks were recorded prior to update.");
    update_scale_cuda({scale_device_.data<float>(), counters_device_.data<int64_t>()}, flags, growth_factor_,
                      backoff_factor_, growth_interval_, static_cast<float>(max_scale_));
    per_optimizer_.clear();  // the flags' blocks go back to the cache: only later work can take them
    device_newer_ = true;
    return;
  }
#endif
  bool any = false, found_inf = false;
  for (auto& entry : per_optimizer_) {
    if (!entry.second.has_inf_check) continue;
    any = true;
    found_inf = resolve_found_inf(entry.second) || found_inf;  // PyTorch sums the found_inf flags
  }
  HG_CHECK(any, "GradScaler::update: No inf checks were recorded prior to update.");
  // _amp_update_scale_ (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp): float scale times a
  // double factor, rounded back to float.
  float& s = *scale_;
  int32_t& tracker = *growth_tracker_;
  const bool was_below_one = s < 1.0f;
  if (found_inf) {
    s = static_cast<float>(static_cast<double>(s) * backoff_factor_);
    tracker = 0;
  } else {
    // A successful step: the tracker is incremented before it is compared with growth_interval.
    const int32_t successful = tracker + 1;
    if (successful == growth_interval_) {
      const float grown = static_cast<float>(static_cast<double>(s) * growth_factor_);
      // Do not grow the scale past FP32's range to inf (PyTorch), nor past max_scale (halfgrad).
      if (std::isfinite(grown)) s = std::min(grown, static_cast<float>(max_scale_));
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
  per_optimizer_.clear();

  // Diagnostics (halfgrad's extension): a run of skipped iterations, and a scale below 1.
  consecutive_skipped_ = found_inf ? consecutive_skipped_ + 1 : 0;
  warn_diagnostics(was_below_one, consecutive_skipped_ == skip_warning_after_);
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_initialized("update");
  *scale_ = static_cast<float>(new_scale);
  if (state_on_device()) scale_device_.fill_(new_scale);  // rounded to float as above; queued on the stream
  per_optimizer_.clear();
}

Tensor GradScaler::device_found_inf(const optim::Optimizer& optimizer) const {
  const auto it = per_optimizer_.find(&optimizer);
  return it == per_optimizer_.end() ? Tensor() : it->second.device_found_inf;
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  read_device_state();
  return scale_ ? static_cast<double>(*scale_) : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) return 0;
  read_device_state();
  return growth_tracker_ ? *growth_tracker_ : init_growth_tracker_;
}

nlohmann::json GradScaler::state_dict() const {
  if (!enabled_) return nlohmann::json::object();
  read_device_state();
  nlohmann::json sd = {{"scale", get_scale()},
                        {"growth_factor", growth_factor_},
                        {"backoff_factor", backoff_factor_},
                        {"growth_interval", growth_interval_},
                        {"_growth_tracker", get_growth_tracker()},
                        {"skip_warning_after", skip_warning_after_},
                        {"_consecutive_skipped", consecutive_skipped_}};
  if (std::isfinite(max_scale_)) sd["max_scale"] = max_scale_;  // JSON has no inf: absent means no cap
  return sd;
}

void GradScaler::load_state_dict(const nlohmann::json& sd) {
  if (!enabled_) return;
  read_device_state();  // skipped_steps() and found_inf() are not in the dict: keep the device's
  HG_CHECK(sd.is_object() && !sd.empty(), "GradScaler::load_state_dict: The source state dict is empty, possibly "
                                          "because it was saved from a disabled instance of GradScaler.");
  // Every field parsed and type-checked (json_checked::Field names a bad one) before any is set.
  const json_checked::Field f(sd, "GradScaler::load_state_dict");
  const double scale = f["scale"].as_number();
  const double growth_factor = f["growth_factor"].as_number();
  const double backoff_factor = f["backoff_factor"].as_number();
  const int64_t growth_interval = f["growth_interval"].as_int();
  const auto growth_tracker = static_cast<int32_t>(f["_growth_tracker"].as_int(0, std::numeric_limits<int32_t>::max()));
  // halfgrad's keys, absent from PyTorch's dicts: keep the constructed values then.
  const double max_scale = f.has("max_scale") ? f["max_scale"].as_number() : max_scale_;
  const int64_t skip_warning_after = f.has("skip_warning_after") ? f["skip_warning_after"].as_int() : skip_warning_after_;
  const int64_t consecutive_skipped =
      f.has("_consecutive_skipped") ? f["_consecutive_skipped"].as_int(0, std::numeric_limits<int64_t>::max()) : consecutive_skipped_;
  check_settings("GradScaler::load_state_dict", scale, growth_factor, backoff_factor, growth_interval, max_scale,
                 skip_warning_after);
  init_scale_ = scale;
  if (scale_) scale_ = static_cast<float>(init_scale_);
  growth_factor_ = growth_factor;
  backoff_factor_ = backoff_factor;
  growth_interval_ = growth_interval;
  init_growth_tracker_ = growth_tracker;
  if (growth_tracker_) growth_tracker_ = init_growth_tracker_;
  max_scale_ = max_scale;
  skip_warning_after_ = skip_warning_after;
  consecutive_skipped_ = consecutive_skipped;
  // Capturable: the next scale() makes the device state again, from these values.
  scale_device_ = Tensor();
  counters_device_ = Tensor();
  device_newer_ = false;
}

}  // namespace halfgrad::amp
