// run_checkpoint.h - the checkpoint files of a halfgrad-unet3d run folder:
//
//   RUN_DIR/training_state.safetensors  everything `train --resume` needs, self-contained:
//       "model.<name>"                   the model's parameters and buffers (module names)
//       "optim.state.<index>.<field>"    AdamW's moments and FP32 master weights (binary, never base64;
//                                        Optimizer::state_dict(tensors, prefix))
//       __metadata__["halfgrad"]         JSON {"optimizer": <state_dict JSON, tensors by name>,
//                                        "scaler": GradScaler::state_dict(), "train": train_meta}
//   RUN_DIR/model.safetensors           the weights and buffers under the module's names, which are
//                                        the PyTorch reference U-Net's state_dict() names, so that
//                                        UNet3D().load_state_dict(load_file(...), strict=True) works;
//                                        __metadata__["halfgrad"] = model_meta (what eval needs)
//
// save_run_checkpoint writes training_state first, then model: each file is atomic (temp file,
// fsync, rename, fsync of the folder: core/safetensors.h), so a kill -9 at any moment leaves both
// loadable. A kill between the two renames leaves training_state one save ahead of
// model.safetensors; a resume starts from training_state (the newer), eval reads model.safetensors
// (the older, complete one).
//
// There is no RNG state to save: a batch is a function of (seed, global step) alone
// (make_training_batch, data.h) and the model's initial weights are overwritten by the load.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "amp/grad_scaler.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace unet3d_app {

inline const char* const kTrainingStateFile = "training_state.safetensors";
inline const char* const kModelFile = "model.safetensors";

/// What one save wrote, for train's log line ("checkpoint: 2 files, 67.3 MiB, 0.08 s").
struct RunCheckpointWrite {
  uint64_t bytes = 0;
  double seconds = 0;
  std::string describe() const;
};

/// Writes RUN_DIR/training_state.safetensors, then RUN_DIR/model.safetensors (see above). Tensors may
/// be on the CPU or CUDA in any memory format (one host staging copy each). Throws halfgrad::Error
/// naming the file when a write fails (the previous files are then untouched, unless only a folder
/// fsync failed after the rename: safetensors::write_file).
RunCheckpointWrite save_run_checkpoint(const std::string& run_dir, const halfgrad::nn::Module& model,
                                       const halfgrad::optim::Optimizer& opt, const halfgrad::amp::GradScaler& scaler,
                                       const nlohmann::json& model_meta, const nlohmann::json& train_meta);

/// The train_meta of RUN_DIR/training_state.safetensors (reads and validates its header only).
/// Throws halfgrad::Error when the file is missing, corrupt or not a halfgrad training state.
nlohmann::json read_run_training_meta(const std::string& run_dir);

/// Restores the model (strictly: names, shapes and dtypes), the optimizer (options and state) and
/// the scaler from RUN_DIR/training_state.safetensors and returns its train_meta. The model and the
/// optimizer must be built as the run built them (same options, same device). Each of the three is
/// restored all-or-nothing, in that order (an error in the optimizer's state leaves the model
/// loaded: train then stops). Throws halfgrad::Error naming the file and the tensor or field.
nlohmann::json load_run_checkpoint(const std::string& run_dir, halfgrad::nn::Module& model,
                                   halfgrad::optim::Optimizer& opt, halfgrad::amp::GradScaler& scaler);

}  // namespace unet3d_app
