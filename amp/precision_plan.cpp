// precision_plan.cpp - see precision_plan.h.
#include "amp/precision_plan.h"

#include "autocast/autocast.h"
#include "core/error.h"

namespace halfgrad::amp {

namespace {

// The rules of precision_plan.h, on a plan already made from words or metadata.
void validate(const PrecisionPlan& p, const std::string& where) {
  HG_CHECK(p.lower == kFloat16 || p.level == OptLevel::O1,
           where << ": --amp-dtype bf16 chooses autocast's lower dtype, so it needs --amp (--opt-level O1); at "
                 << opt_level_name(p.level) << " there is no autocast region to lower");
  if (p.fp32_ops.empty() && p.fp32_modules.empty()) return;
  HG_CHECK(p.level == OptLevel::O1,
           where << ": --fp32-op and --fp32-module choose what autocast keeps in FP32, so they need --opt-level O1 "
                    "(or --amp); at " << opt_level_name(p.level) << " every op runs in its weights' dtype");
  for (const std::string& name : p.fp32_ops) {
    try {
      check_op_fp32_allowed(op_kind_from_name(name));
    } catch (const Error& e) {
      HG_FAIL(where << ": --fp32-op " << name << ": " << e.what());
    }
  }
}

}  // namespace

PrecisionPlan PrecisionPlan::from_words(const std::string& opt_level, bool amp, const std::string& amp_dtype,
                                        const std::vector<std::string>& fp32_ops,
                                        const std::vector<std::string>& fp32_modules, const std::string& where) {
  PrecisionPlan p;
  try {
    p.level = opt_level.empty() ? (amp ? OptLevel::O1 : OptLevel::O0) : opt_level_from_name(opt_level);
  } catch (const Error& e) {
    HG_FAIL(where << ": --opt-level: " << e.what());
  }
  HG_CHECK(!amp || p.level == OptLevel::O1, where << ": --amp means --opt-level O1, but --opt-level " << opt_level
                                                  << " was given too; pass one of them");
  HG_CHECK(amp_dtype == "fp16" || amp_dtype == "bf16",
           where << ": --amp-dtype is '" << amp_dtype.substr(0, 24) << "'; expected fp16 or bf16");
  p.lower = amp_dtype == "bf16" ? kBFloat16 : kFloat16;
  p.fp32_ops = fp32_ops;
  p.fp32_modules = fp32_modules;
  validate(p, where);
  return p;
}

nlohmann::json PrecisionPlan::to_json() const {
  return {{"amp", level != OptLevel::O0},
          {"opt_level", opt_level_name(level)},
          {"amp_dtype", lower_name()},
          {"fp32_ops", fp32_ops},
          {"fp32_modules", fp32_modules}};
}

PrecisionPlan PrecisionPlan::from_json(const json_checked::Field& m) {
  PrecisionPlan p;
  // The level decides the parameters' dtypes, which a checkpoint must match (older checkpoints
  // have only "amp": O1 or O0).
  if (m.has("opt_level")) {
    const std::string name = m["opt_level"].as_string();
    try {
      p.level = opt_level_from_name(name);
    } catch (const Error&) {
      m["opt_level"].fail("is \"" + name.substr(0, 24) + "\"; expected \"O0\", \"O1\", \"O2\" or \"O3\"");
    }
  } else {
    p.level = m.has("amp") && m["amp"].as_bool() ? OptLevel::O1 : OptLevel::O0;
  }
  // Autocast's lower dtype (train --amp-dtype; checkpoints from before it are FP16).
  const std::string dtype = m.has("amp_dtype") ? m["amp_dtype"].as_string() : "fp16";
  if (dtype != "fp16" && dtype != "bf16") m["amp_dtype"].fail("is \"" + dtype.substr(0, 24) + "\"; expected \"fp16\" or \"bf16\"");
  p.lower = dtype == "bf16" ? kBFloat16 : kFloat16;
  if (m.has("fp32_ops")) p.fp32_ops = m["fp32_ops"].as_string_list();
  if (m.has("fp32_modules")) p.fp32_modules = m["fp32_modules"].as_string_list();
  validate(p, m.where());
  return p;
}

namespace {

void apply_lists(const PrecisionPlan& p, nn::Module& model) {
  for (const std::string& name : p.fp32_ops) set_op_fp32(op_kind_from_name(name), true);
  for (const std::string& prefix : p.fp32_modules) mark_fp32_modules(model, prefix);
}

}  // namespace

OptLevelSetup PrecisionPlan::apply(nn::Module& model, optim::AdamWOptions& optimizer, GradScalerOptions& scaler) const {
  OptLevelSetup setup = apply_opt_level(level, model, optimizer, scaler);
  setup.autocast_dtype = lower;
  if (!scaler_enabled()) scaler.enabled(false);
  apply_lists(*this, model);
  return setup;
}

OptLevelSetup PrecisionPlan::apply_to_model(nn::Module& model) const {
  OptLevelSetup setup = apply_opt_level_to_model(level, model);
  setup.autocast_dtype = lower;
  apply_lists(*this, model);
  return setup;
}

std::string PrecisionPlan::describe() const {
  if (lower == kBFloat16) return "O1 (autocast: BF16 convs with FP32 accumulation, FP32 weights; no GradScaler)";
  return describe_opt_level(level);
}

}  // namespace halfgrad::amp
