// precision_plan.h - one value that says how a run uses precision, from the command line to the
// checkpoint and back: the opt level (apex's O0..O3, opt_level.h), autocast's lower dtype, the FP32
// allow-lists by op kind and by module, and what follows from them (a GradScaler or not, FP32
// master weights or not). It is made in one place (from_words for a command line, from_json for a
// checkpoint's metadata), validates itself there, and applies itself to a model and its optimizer's
// and scaler's options; nothing else decides precision.
//
//   words (halfgrad-unet3d train)          plan
//   (none)                                 O0, FP32 everywhere, no scaler
//   --amp  or  --opt-level O1              O1, autocast to FP16, GradScaler
//   --amp --amp-dtype bf16                 O1, autocast to BF16, no GradScaler (BF16 has FP32's
//                                          exponent range: its gradients do not underflow)
//   --opt-level O2 / O3                    FP16 weights (O2: FP32 norms and master weights), GradScaler
//   --fp32-op NAME, --fp32-module PREFIX   O1 only: autocast keeps those op kinds / modules in FP32
//
// The rules, each an error naming the words (the same messages as before the plan existed):
// --amp is O1, so --amp with another --opt-level is refused; --amp-dtype bf16 and the FP32 lists act
// under autocast, so they need O1; an op name must be one of amp::op_kind_name's and an op that
// consults the precision table (amp::check_op_fp32_allowed).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/grad_scaler.h"
#include "amp/opt_level.h"
#include "core/json_checked.h"
#include "nn/module.h"
#include "optim/adamw.h"

namespace halfgrad::amp {

struct PrecisionPlan {
  OptLevel level = OptLevel::O0;
  /// Autocast's lower dtype under O1: kFloat16 or kBFloat16 (--amp-dtype).
  Dtype lower = kFloat16;
  std::vector<std::string> fp32_ops;      // op kinds moved to autocast's FP32 list (op_kind_name)
  std::vector<std::string> fp32_modules;  // module-name prefixes run in FP32 under autocast

  /// Whether GradScaler runs: every level but O0, unless autocast lowers to BF16.
  bool scaler_enabled() const { return level != OptLevel::O0 && lower != kBFloat16; }
  /// Whether the optimizer keeps FP32 master weights of 16-bit parameters (all but O3).
  bool master_weights() const { return level != OptLevel::O3; }

  /// The plan of a command line: `opt_level` "" or "O0".."O3", `amp` the --amp flag, `amp_dtype`
  /// "fp16" or "bf16". Throws halfgrad::Error starting "<where>: " (e.g. "halfgrad-unet3d train")
  /// for any rule above that the words break.
  static PrecisionPlan from_words(const std::string& opt_level, bool amp, const std::string& amp_dtype,
                                  const std::vector<std::string>& fp32_ops, const std::vector<std::string>& fp32_modules,
                                  const std::string& where);

  /// The checkpoint metadata's fields: {"amp": level != O0, "opt_level", "amp_dtype": "fp16"|"bf16",
  /// "fp32_ops", "fp32_modules"} (merged into a model.safetensors' "halfgrad" JSON).
  nlohmann::json to_json() const;
  /// The inverse, for untrusted metadata (an object holding those fields). Older checkpoints lack
  /// some: no "opt_level" reads "amp" (true: O1, false: O0), no "amp_dtype" is fp16, no lists are
  /// empty. Throws halfgrad::Error naming the file and field (json_checked) and breaking a rule.
  static PrecisionPlan from_json(const json_checked::Field& meta);

  /// For training: apply_opt_level(level, model, optimizer, scaler), then the lower dtype (BF16
  /// disables the scaler), then the FP32 lists (the op kinds on this thread's autocast table, the
  /// module marks on `model`). Call before building the optimizer. Returns the per-step record.
  OptLevelSetup apply(nn::Module& model, optim::AdamWOptions& optimizer, GradScalerOptions& scaler) const;
  /// For inference: apply_opt_level_to_model, the lower dtype and the FP32 lists.
  OptLevelSetup apply_to_model(nn::Module& model) const;

  /// One line for logs: "O1 (autocast: FP16 convs with FP32 accumulation, FP32 weights; GradScaler)".
  std::string describe() const;
  /// "fp16" or "bf16": the --amp-dtype word.
  const char* lower_name() const { return lower == kBFloat16 ? "bf16" : "fp16"; }
};

}  // namespace halfgrad::amp
