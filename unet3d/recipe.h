// recipe.h - the training configurations of halfgrad-unet3d (`--config NAME`).
//
//   reference  the reference U-Net of ../shared/reference (16-32-64-128, bottleneck 256, BatchNorm),
//              whole volumes padded to 48x64x48, batch 8, AdamW 1e-3 / wd 1e-2, 100 epochs: the recipe
//              of torch_hippo_train.py, sized for a GPU.
//   cpu        sized for a 2-core machine without a GPU (the default): the U-Net at 3/4 width
//              (12-24-48-96, bottleneck 192, BatchNorm; 3,176,799 parameters for 3 classes), trained
//              on 32x48x32 patches centred on a foreground voxel two times out of three, flipped
//              left-right only, batch 4, 40 steps an epoch, AdamW 1e-3 / wd 1e-2 with a one-epoch
//              linear warm-up and cosine decay, 12 epochs. Validation runs on whole padded volumes, so
//              its Dice is comparable with the reference's.
//              Why (tools/recipe/NOTES.md has the runs): at half width (8-...) the posterior
//              hippocampus class is learned and then lost, in PyTorch as in halfgrad, at several
//              learning rates and with instance norm; 12 and 16 keep it. Flips along the
//              anterior-posterior axis remove the position cue that separates the two classes;
//              32x48x32 patches cover the whole structure along that axis.
//   tiny       for the program's own tests (resume, kill -9, CLI), seconds an epoch on 2 cores: the
//              U-Net at 4-8 with bottleneck 16, 16^3 patches, batch 2, 4 steps an epoch, warm-up and
//              cosine as cpu, 4 epochs. It learns little; it exercises every path of a run.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "nn/unet3d.h"

namespace unet3d_app {

/// The training augmentation before the flips (train --augment): none, or nnU-Net v2's default
/// transforms (io/augment.h: AugmentOptions' defaults; examples/05_unet3d/data.h: augment_options).
enum class Augmentation { None, NnUnet };

/// The optimizer (train --optimizer): AdamW (every recipe's), or SGD with Nesterov momentum, nnU-Net
/// v2's (nnUNetTrainer.configure_optimizers: lr 1e-2, momentum 0.99, nesterov, weight decay 3e-5).
enum class OptimizerKind { AdamW, Sgd };

/// The learning-rate schedule after the warm-up (train --lr-schedule), as a function of the
/// fractional epoch e in [0, epochs] (lr_at in examples/05_unet3d/trainer.cpp):
///   constant  lr
///   cosine    lr/20 + (lr - lr/20) (1 + cos(pi t)) / 2, t = (e - warmup) / (epochs - warmup)
///   poly      lr (1 - t)^0.9: nnU-Net v2's PolyLRScheduler (exponent 0.9), which steps per epoch;
///             ours per step, at the step's fractional epoch
enum class LrSchedule { Constant, Cosine, Poly };

struct Recipe {
  std::string name;
  halfgrad::nn::UNet3dOptions model;
  std::array<int64_t, 3> volume_shape{48, 64, 48};  // (z, y, x): validation volumes are padded/cropped to it
  std::array<int64_t, 3> patch{0, 0, 0};            // training patch (z, y, x); 0 = whole volumes
  double foreground_prob = 0.0;                     // P(patch centred on a foreground voxel)
  int64_t batch = 8;
  double lr = 1e-3;
  double weight_decay = 1e-2;
  int64_t epochs = 100;
  int64_t default_data_epochs = 100;  // epochs when training on the embedded default (no --data)
  int64_t warmup_epochs = 0;   // linear warm-up from lr/10
  LrSchedule schedule = LrSchedule::Constant;  // after the warm-up
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double momentum = 0.99;      // SGD's (Nesterov) momentum; unused by AdamW
  int64_t samples_per_epoch = 0;  // 0 = one pass over the training volumes
  int64_t val_every = 10;
  std::vector<int64_t> flip_axes{0, 1, 2};  // (z, y, x) axes flipped with probability 1/2 each
  Augmentation augment = Augmentation::None;  // applied to each sample before its flips; none in every recipe
};

/// The named recipe; throws halfgrad::Error "<where>: unknown recipe 'x'; expected one of: cpu,
/// reference, tiny" otherwise. `where` says where the name came from: "halfgrad-unet3d: --config"
/// (the default), or a checkpoint's field ("halfgrad-unet3d eval: FILE: field 'recipe'").
Recipe recipe_by_name(const std::string& name, const std::string& where = "halfgrad-unet3d: --config");

/// "none" or "nnunet" (train --augment's words); throws halfgrad::Error "<where>: unknown augmentation
/// 'x'; expected none or nnunet" otherwise.
Augmentation augmentation_by_name(const std::string& name, const std::string& where);
/// The word for `a`: "none" or "nnunet".
const char* augmentation_name(Augmentation a);

/// "adamw" or "sgd" (train --optimizer); throws halfgrad::Error "<where>: unknown optimizer 'x';
/// expected adamw or sgd" otherwise.
OptimizerKind optimizer_by_name(const std::string& name, const std::string& where);
const char* optimizer_name(OptimizerKind o);
/// "constant", "cosine" or "poly" (train --lr-schedule); throws halfgrad::Error "<where>: unknown
/// schedule 'x'; expected constant, cosine or poly" otherwise.
LrSchedule schedule_by_name(const std::string& name, const std::string& where);
const char* schedule_name(LrSchedule s);
/// The learning rate at fractional epoch e (step s of epoch k, counted from 1, is e = k - 1 + s /
/// steps_per_epoch): a linear warm-up from lr/10 to lr over warmup_epochs, then r.schedule (LrSchedule
/// above) over the remaining epochs; past r.epochs it stays at the schedule's end value.
double lr_at(const Recipe& r, double e);

/// `r` with nnU-Net v2's optimizer: SGD, Nesterov momentum 0.99, lr 1e-2, weight decay 3e-5, the
/// poly schedule and no warm-up (what train --optimizer sgd starts from; --lr and --lr-schedule
/// given on the command line still win).
Recipe with_nnunet_sgd(Recipe r);

}  // namespace unet3d_app
