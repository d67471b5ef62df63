// cv.h - `halfgrad-unet3d cv RUN_DIR...`: the cross-validation summary of runs trained with
// `train --fold K` (data.h: kFolds folds), as nnU-Net's summary of its folds: each fold's validation
// Dice per class at its last validated epoch (from the run's training state; the checkpoint's epoch
// for a run that finished, since the last epoch always validates), and across folds the mean and the sample standard deviation per class, and the mean over
// classes. The runs must have trained on the same data (their data fingerprints, data_fingerprint.h,
// agree) with the same class names, each on a different fold; folds not given are named in a note.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace unet3d_app {

/// The summary as one JSON object: {"folds": [{"run", "fold", "epoch", "dice", "mean_dice"}...],
/// "class_names", "dice" (mean per class over folds), "dice_sd" (sample SD; 0 with one fold),
/// "mean_dice", "missing_folds"}. Throws halfgrad::Error naming the run folder and what disagrees:
/// an unreadable training state, a run without --data or without a validated epoch, two runs of one
/// fold, different data or class names.
nlohmann::json cross_validation_summary(const std::vector<std::string>& run_dirs);

/// Prints cross_validation_summary(run_dirs) as one line (and a note on stderr for missing folds).
/// Returns 0.
int run_cv(const std::vector<std::string>& run_dirs);

}  // namespace unet3d_app
