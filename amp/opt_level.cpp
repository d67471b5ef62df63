// opt_level.cpp - apex's O0..O3 as one function (the table is in opt_level.h).
#include "amp/opt_level.h"

#include <algorithm>
#include <memory>

#include "autocast/autocast.h"
#include "core/error.h"
#include "nn/batch_norm.h"
#include "nn/instance_norm.h"

namespace halfgrad::amp {

const char* opt_level_name(OptLevel level) {
  switch (level) {
    case OptLevel::O0: return "O0";
    case OptLevel::O1: return "O1";
    case OptLevel::O2: return "O2";
    case OptLevel::O3: return "O3";
  }
  return "?";
}

OptLevel opt_level_from_name(const std::string& name) {
  for (OptLevel l : {OptLevel::O0, OptLevel::O1, OptLevel::O2, OptLevel::O3})
    if (name == opt_level_name(l)) return l;
  HG_FAIL("unknown opt level '" << name << "'; expected O0 (FP32), O1 (autocast + GradScaler), O2 (FP16 weights, "
                                   "FP32 norms and master weights) or O3 (pure FP16)");
  return OptLevel::O0;  // unreachable
}

std::string describe_opt_level(OptLevel level) {
  switch (level) {
    case OptLevel::O0: return "O0 (FP32)";
    case OptLevel::O1: return "O1 (autocast: FP16 convs with FP32 accumulation, FP32 weights; GradScaler)";
    case OptLevel::O2: return "O2 (FP16 weights, FP32 norms, FP32 master weights; GradScaler)";
    case OptLevel::O3: return "O3 (pure FP16: FP16 weights, norms and AdamW moments, no master weights; GradScaler)";
  }
  return "?";
}

OptLevelSetup apply_opt_level_to_model(OptLevel level, nn::Module& model) {
  OptLevelSetup setup;
  setup.level = level;
  switch (level) {
    case OptLevel::O0:
    case OptLevel::O1:
      model.to(kFloat32);
      setup.autocast = level == OptLevel::O1;
      setup.input_dtype = kFloat32;
      break;
    case OptLevel::O2:
    case OptLevel::O3:
      // autocast_lower_dtype(): FP16, or FP32 in a HALFGRAD_FORCE_FP32 build, which must reach the
      // weights of O2/O3 too, not only autocast's ops.
      model.to(autocast_lower_dtype());
      setup.input_dtype = autocast_lower_dtype();
      if (level == OptLevel::O2) {
        // apex's keep_batchnorm_fp32: a norm's statistics and affine parameters stay FP32 (its op
        // accumulates in FP64 and takes the FP16 activations as they are).
        for (const auto& m : model.modules(/*include_self=*/false))
          if (std::dynamic_pointer_cast<nn::BatchNorm3d>(m) || std::dynamic_pointer_cast<nn::InstanceNorm3d>(m))
            m->to(kFloat32);
        if (dynamic_cast<nn::BatchNorm3d*>(&model) || dynamic_cast<nn::InstanceNorm3d*>(&model)) model.to(kFloat32);
      }
      break;
  }
  return setup;
}

OptLevelSetup apply_opt_level(OptLevel level, nn::Module& model, optim::AdamWOptions& optimizer_options,
                              GradScalerOptions& scaler_options) {
  OptLevelSetup setup = apply_opt_level_to_model(level, model);
  optimizer_options.master_weights(level != OptLevel::O3);
  if (level == OptLevel::O3) optimizer_options.eps(std::max(optimizer_options.eps(), kPureFp16MinAdamEps));
  scaler_options.enabled(level != OptLevel::O0);
  scaler_options.fp16_grads_to_fp32(level == OptLevel::O2 || level == OptLevel::O3);
  return setup;
}

int mark_fp32_modules(nn::Module& model, const std::string& prefix) {
  int marked = 0;
  for (auto& [name, m] : model.named_modules()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    m->set_autocast_fp32(true);
    ++marked;
  }
  if (marked == 0) {
    std::string names;
    for (auto& [name, m] : model.named_modules("", false))
      if (name.find('.') == std::string::npos || std::count(name.begin(), name.end(), '.') == 1)
        names += (names.empty() ? "" : ", ") + name;
    HG_FAIL("no module of " << model.name() << " has a name starting with '" << prefix
                            << "'; its modules down to two levels are: " << names);
  }
  return marked;
}

}  // namespace halfgrad::amp
