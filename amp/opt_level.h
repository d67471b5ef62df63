// opt_level.h - the four mixed-precision levels of NVIDIA apex (apex.amp opt_level "O0".."O3"), as
// one function that prepares a model, the optimizer's options and the GradScaler's options for a
// level, and a small record of what the training loop must do per step.
//
//   level  model weights                optimizer                 forward               loss scaling
//   O0     FP32                         FP32                      FP32, no autocast     none (scaler disabled)
//   O1     FP32                         FP32                      autocast (policy      GradScaler
//                                                                 table: convs FP16)
//   O2     FP16, norms (BatchNorm3d,    FP32 master weights and   input cast to FP16,   GradScaler, FP16 grads
//          InstanceNorm3d) kept FP32    FP32 moments for FP16     no autocast; norms    unscaled into FP32
//                                       params (optimizer.h)      take FP16 in, FP32    (fp16_grads_to_fp32)
//                                                                 params, give FP16 out
//   O3     FP16, everything             no masters: FP16 params,  input cast to FP16,   GradScaler,
//                                       FP16 moments, eps raised  no autocast           fp16_grads_to_fp32
//                                       to >= 1e-4 (adamw.h)
//
// What is matched from apex (apex/amp/lists, frontend.py's opt_level properties): O0 "pure FP32"; O1
// "patch torch functions" (here: the autocast policy table) with dynamic loss scaling; O2 "cast model
// to FP16, keep_batchnorm_fp32, master_weights", dynamic loss scaling; O3 "pure FP16", which apex
// describes as a speed baseline, not a recipe expected to converge. Differences: apex's O3 uses a
// static loss scale of 1; here O3 keeps the dynamic GradScaler, and because the scaler cannot unscale
// FP16 gradients in place (they would underflow) it writes the unscaled gradients as FP32 tensors that
// the optimizer reads and drops (zero_grad) - the only FP32 tensors of an O3 step besides the loss.
// O3 also raises AdamW's eps to 1e-4 when it is smaller: with FP16 moments, v flushes to 0 for small
// gradients and eps becomes the whole denominator (adamw.h); apex leaves eps alone and O3 diverges.
//
// Use (examples/05_unet3d/train.cpp does this):
//     optim::AdamWOptions adamw = ...;  amp::GradScalerOptions so;
//     amp::OptLevelSetup mp = amp::apply_opt_level(amp::OptLevel::O2, *model, adamw, so);
//     optim::AdamW opt(model->parameters(), adamw);  amp::GradScaler scaler(so);
//     per step:  x = mp.cast_input(x);  { AutocastGuard ac(mp.autocast); logits = (*model)(x); }
//                loss = loss_fn(logits.to(kFloat32), y);  scaler.scale(loss).backward(); ...
// Call apply_opt_level before building the optimizer (the optimizer creates master weights from the
// parameters' dtype at its first step).
#pragma once
#include <string>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "core/dtype.h"
#include "nn/module.h"
#include "optim/adamw.h"

namespace halfgrad::amp {

/// apex's opt_level: O0 FP32, O1 autocast + GradScaler, O2 FP16 weights with FP32 norms and master
/// weights, O3 pure FP16 (the table above).
enum class OptLevel : uint8_t { O0, O1, O2, O3 };

/// "O0", "O1", "O2", "O3".
const char* opt_level_name(OptLevel level);
/// The inverse of opt_level_name. Throws halfgrad::Error for any other string, listing the four.
OptLevel opt_level_from_name(const std::string& name);
/// One line for logs: "O2 (FP16 weights, FP32 norms, FP32 master weights, GradScaler)".
std::string describe_opt_level(OptLevel level);

/// What a training (or evaluation) step does differently per level, returned by apply_opt_level.
struct OptLevelSetup {
  OptLevel level = OptLevel::O0;
  bool autocast = false;          // run the forward inside AutocastGuard (O1)
  Dtype input_dtype = kFloat32;   // dtype the input batch is cast to before the forward (FP16 for O2, O3)
  Dtype autocast_dtype = kFloat16;  // autocast's lower dtype under O1: FP16 (apply_opt_level's), or BF16 if set
  /// The forward's AutocastGuard options: enabled when `autocast`, lowering to `autocast_dtype`.
  AutocastOptions autocast_options() const { return AutocastOptions().dtype(autocast_dtype).enabled(autocast); }
  /// `x` converted to input_dtype (a non-differentiable copy; x itself when it already is).
  Tensor cast_input(const Tensor& x) const { return x.dtype() == input_dtype ? x : x.cast_copy(input_dtype); }
};

/// The model half of apply_opt_level: converts `model`'s floating parameters and buffers in place -
/// O0, O1: everything FP32; O2: everything FP16, then every BatchNorm3d / InstanceNorm3d (their
/// weights, biases and running statistics) back to FP32; O3: everything FP16. Parameters keep their
/// identity (Module::to). Returns the per-step record. For evaluation, or to rebuild a model before
/// loading a checkpoint saved at that level (checkpoints refuse dtype mismatches).
OptLevelSetup apply_opt_level_to_model(OptLevel level, nn::Module& model);

/// Prepares `model` (as apply_opt_level_to_model), `optimizer_options` (O3: master_weights(false)
/// and eps raised to 1e-4 if smaller; other levels: master_weights(true), nothing else changes) and
/// `scaler_options` (O0: enabled(false); O1: enabled, fp16_grads_to_fp32(false); O2, O3: enabled,
/// fp16_grads_to_fp32(true)); the scaler's other options (init_scale, max_scale, ...) are kept.
/// Returns the per-step record.
OptLevelSetup apply_opt_level(OptLevel level, nn::Module& model, optim::AdamWOptions& optimizer_options,
                              GradScalerOptions& scaler_options);

/// The FP32 allow-list by module name (halfgrad-unet3d's --fp32-module PREFIX): marks every module of
/// `model` whose named_modules() name starts with `prefix` with set_autocast_fp32(true) ("dec.0" marks
/// that decoder block and everything in it; "" marks the whole model). Returns how many modules were
/// marked. Throws halfgrad::Error when no name starts with `prefix`, listing the model's top names.
/// Marks act under autocast (O1) only; under O2 / O3 a module's precision is its weights' dtype.
int mark_fp32_modules(nn::Module& model, const std::string& prefix);

/// The eps that O3 gives AdamW at least (see the file comment).
constexpr double kPureFp16MinAdamEps = 1e-4;

}  // namespace halfgrad::amp
