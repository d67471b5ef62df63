// trained_model.h - where a run computes (Placement), and a trained U-Net loaded back from a
// checkpoint for inference: what `eval` and `predict` share.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/precision_plan.h"
#include "core/tensor.h"
#include "unet3d/recipe.h"
#include "unet3d/resample.h"
#include "nn/unet3d.h"

namespace unet3d_app {

/// Where the run computes: the device and the activations' memory format there.
struct Placement {
  halfgrad::Device device = halfgrad::Device::CPU;
  halfgrad::MemoryFormat format = halfgrad::MemoryFormat::Contiguous;
  /// x (B, C, D, H, W) moved to the device in `format` (a copy; on the CPU the tensor itself).
  halfgrad::Tensor input(const halfgrad::Tensor& x) const { return x.copy_to(device).format_copy(format); }
  /// labels (B, D, H, W) int64 moved to the device.
  halfgrad::Tensor labels(const halfgrad::Tensor& y) const { return y.copy_to(device); }
};

/// `device` "cpu" or "cuda"; `format` "ndhwc" (or "", the default: NDHWC on CUDA) or "ncdhw". The CPU
/// runs NCDHW whatever `format` says. Throws halfgrad::Error naming `cmd` ("train", "eval", ...) for
/// another device name, or for cuda on a machine without a usable GPU.
Placement make_placement(const std::string& device, const std::string& format, const char* cmd);

/// A trained U-Net, ready for inference.
struct TrainedModel {
  Recipe recipe;                          // the recipe it was trained with: model options, volume_shape
  halfgrad::amp::PrecisionPlan plan;      // the precision it was trained with (amp/precision_plan.h)
  halfgrad::amp::OptLevelSetup mp;        // the autocast setting and input cast of `plan`
  std::shared_ptr<halfgrad::nn::UNet3d> model;  // on the placement's device, in eval() mode
  std::vector<std::string> class_names;   // class_names[0] is background; empty when the file has none
  /// The spacing (z, y, x) mm every training volume was resampled to (train --spacing); predict and
  /// eval resample their inputs to it. None: trained on each volume's own grid (--spacing native, the
  /// default data, a run before --spacing, a PyTorch file), so inputs are used on their own grids.
  std::optional<Spacing> spacing_mm;

  /// How the model was found: "" for halfgrad's own file; for a foreign one a line saying what was
  /// inferred ("no halfgrad metadata (a PyTorch state_dict?): inferred channels {...}, ...").
  std::string inferred;
  /// "" when the file's checksums were verified; else a line saying its bytes were not (a file
  /// written by PyTorch, or by halfgrad before checksums: core/safetensors.h).
  std::string unverified;
};

/// Loads model.safetensors at `path` (a run folder means RUN_DIR/model.safetensors), rebuilds its
/// U-Net and moves it to `where`:
///   - written by `halfgrad-unet3d train` (metadata "halfgrad" present): with the options, precision
///     and FP32 lists it was trained with;
///   - written by PyTorch (safetensors.torch.save_file(UNet3D().state_dict()), no halfgrad metadata):
///     the options are inferred from the tensors (nn::UNet3dOptions::infer_from_shapes); recipe
///     'reference', volume_shape 48x64x48 (the reference's), level O0 (FP32 weights; other dtypes
///     are refused). `inferred` says what was assumed.
/// Before the model is built, the metadata's architecture is compared with the tensors' shapes in
/// the header (UNet3dOptions::check_matches_shapes): a file claiming another model than it holds is
/// refused without allocating it. Loading is strict (nn::load_checkpoint: names, shapes, dtypes;
/// checksums; every tensor finite). Throws halfgrad::Error naming `cmd` and the file when it cannot
/// be read or lacks what is needed (json_checked names the field, the loader the tensor).
TrainedModel load_trained_model(const std::string& path, const Placement& where, const char* cmd);

}  // namespace unet3d_app
