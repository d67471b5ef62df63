#include "unet3d/recipe.h"

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
    r.cosine = true;
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
    r.cosine = true;
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

}  // namespace unet3d_app
