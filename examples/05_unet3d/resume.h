// resume.h - `halfgrad-unet3d train --resume RUN_DIR [--epochs N]`: continue a stopped run from its
// last checkpoint (RUN_DIR/training_state.safetensors, run_checkpoint.h), with the options it was
// started with, bit-identical to a run that never stopped.
//
// What --epochs N means on resume: "train until epoch N" (as a PyTorch user's loop bound). The
// learning-rate schedule (warm-up, then cosine over the run's total epochs, trainer.cpp lr_at) is a
// function of that total, so:
//   - without --epochs the run continues to the total it was started with, on the same schedule:
//     the resumed run is bit-identical to one that never stopped (the done-when test: `train
//     --epochs 2 --stop-after-epoch 1`, then `--resume`, gives the bytes of `train --epochs 2`; a
//     run killed with kill -9 resumes the same way from its last save);
//   - with a larger --epochs the schedule is stretched to the new total from the next step on (the
//     epochs already trained keep the rates they had), as extending a cosine schedule does in
//     PyTorch; that run matches no straight run, and says so.
// A run that already reached its total is refused unless --epochs is larger.
//
// Options allowed with --resume: --epochs, --save-every, --max-minutes, --stop-after-epoch,
// --no-progress, --no-memory-check, --workers, --prefetch, --gpus, --cuda-graph (how long and how
// this process runs; none of them changes a training step), --data DIR (the run's data, moved: it
// must hold the files the run trained on) and --allow-data-change. Every other option is an error
// naming it: the run's options are its own.
//
// A run started with --plan (plan.h) reads its plan back from RUN_DIR/plan.json, never planning again.
//
// The data: a run saves its data folder's absolute path and a fingerprint of every file it read
// (data_fingerprint.h); the resume loads the data from that path (or --data) and refuses it when a
// file was added, removed or changed, naming each, unless --allow-data-change. Runs
// started with --grad-stats or --precision-report are refused: those files cover the whole run and
// are not continued (not implemented).
#pragma once
#include <nlohmann/json.hpp>

#include "core/json_checked.h"
#include "examples/05_unet3d/train.h"

namespace unet3d_app {

/// The options a run was started with, for training_state's train_meta ("args"); `given`, `resume`,
/// `out` (the folder the file is in) and the per-process options (progress, memory_check,
/// max_minutes, stop_after_epoch, allow_data_change) are left out.
nlohmann::json train_args_to_json(const TrainArgs& a);
/// The inverse; throws halfgrad::Error naming the file and field (json_checked::Field).
TrainArgs train_args_from_json(const halfgrad::json_checked::Field& j);

/// The options given with --resume that may be (see above); the others make check_resume_args throw.
const std::vector<std::string>& resume_allowed_options();
/// Throws halfgrad::Error naming every option of `a.given` that --resume does not accept.
void check_resume_args(const TrainArgs& a);

/// The TrainArgs of the resumed run: the saved ones (from RUN_DIR/training_state.safetensors), with
/// the allowed options of `a` put over them. Throws halfgrad::Error for a run that cannot be
/// resumed (no or unreadable training state, finished with no larger --epochs, --epochs not past
/// the saved epoch, started with --grad-stats or --precision-report).
TrainArgs resumed_args(const TrainArgs& a, const nlohmann::json& train_meta);

}  // namespace unet3d_app
