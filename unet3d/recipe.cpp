#include "unet3d/recipe.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace unet3d_app {

Recipe recipe_by_name(const std::string& name, const std::string& where) {
  Recipe r;
  r.name = name;
  if (name == "reference") return r;  // the defaults above are torch_hippo_train.py's recipe
  if (name == "cpu") {
    r.model = halfgrad::nn::UNet3dOptions().channels({12, 24, 48, 96}).bottleneck(192);
    r.patch = {32, 48, 32};
    r.foreground_prob = 0.67;
    r.batch = 4;
    r.lr = 1e-3;
    r.flip_axes = {2};
    r.epochs = 12;
    r.default_data_epochs = 30;  // one volume, 40 steps an epoch: about 7 minutes on 2 cores
    r.warmup_epochs = 1;
    r.schedule = LrSchedule::Cosine;
    r.samples_per_epoch = 160;
    r.val_every = 1;
    return r;
  }
  if (name == "tiny") {
    r.model = halfgrad::nn::UNet3dOptions().channels({4, 8}).bottleneck(16);
    r.patch = {16, 16, 16};
    r.foreground_prob = 0.67;
    r.batch = 2;
    r.flip_axes = {2};
    r.epochs = 4;
    r.default_data_epochs = 4;
    r.warmup_epochs = 1;
    r.schedule = LrSchedule::Cosine;
    r.samples_per_epoch = 8;
    r.val_every = 1;
    return r;
  }
  HG_FAIL(where << ": unknown recipe '" << name.substr(0, 40) << "'; expected one of: cpu, reference, tiny");
}

Augmentation augmentation_by_name(const std::string& name, const std::string& where) {
  if (name == "none") return Augmentation::None;
  if (name == "nnunet") return Augmentation::NnUnet;
  HG_FAIL(where << ": unknown augmentation '" << name.substr(0, 40) << "'; expected none or nnunet");
}

const char* augmentation_name(Augmentation a) { return a == Augmentation::NnUnet ? "nnunet" : "none"; }

OptimizerKind optimizer_by_name(const std::string& name, const std::string& where) {
  if (name == "adamw") return OptimizerKind::AdamW;
  if (name == "sgd") return OptimizerKind::Sgd;
  HG_FAIL(where << ": unknown optimizer '" << name.substr(0, 40) << "'; expected adamw or sgd");
}

const char* optimizer_name(OptimizerKind o) { return o == OptimizerKind::Sgd ? "sgd" : "adamw"; }

LrSchedule schedule_by_name(const std::string& name, const std::string& where) {
  if (name == "constant") return LrSchedule::Constant;
  if (name == "cosine") return LrSchedule::Cosine;
  if (name == "poly") return LrSchedule::Poly;
  HG_FAIL(where << ": unknown schedule '" << name.substr(0, 40) << "'; expected constant, cosine or poly");
}

const char* schedule_name(LrSchedule s) {
  return s == LrSchedule::Cosine ? "cosine" : s == LrSchedule::Poly ? "poly" : "constant";
}

double lr_at(const Recipe& r, double e) {
  if (e < r.warmup_epochs) return r.lr * (0.1 + 0.9 * e / r.warmup_epochs);
  if (r.schedule == LrSchedule::Constant) return r.lr;
  const double span = std::max<double>(1.0, static_cast<double>(r.epochs - r.warmup_epochs));
  const double t = std::min(1.0, (e - r.warmup_epochs) / span);
  if (r.schedule == LrSchedule::Poly) return r.lr * std::pow(1.0 - t, 0.9);
  const double lo = r.lr / 20;
  return lo + 0.5 * (r.lr - lo) * (1 + std::cos(M_PI * t));
}

Recipe with_nnunet_sgd(Recipe r) {
  r.optimizer = OptimizerKind::Sgd;
  r.lr = 1e-2;
  r.momentum = 0.99;
  r.weight_decay = 3e-5;
  r.schedule = LrSchedule::Poly;
  r.warmup_epochs = 0;
  return r;
}

}  // namespace unet3d_app
