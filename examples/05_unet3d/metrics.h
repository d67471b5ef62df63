// metrics.h - Dice of an argmax prediction, the figure halfgrad-unet3d reports, and metrics.csv.
//   Dice_c(volume) = 2 |P_c & T_c| / (|P_c| + |T_c|), and 1 when both are empty;
//   the reported per-class Dice is the mean over volumes (as torch_hippo_train.py's `dice`).
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "core/tensor.h"

namespace unet3d_app {

/// pred, target: (D, H, W) int64. Returns Dice for classes 1..num_classes-1.
std::vector<double> dice_per_class(const halfgrad::Tensor& pred, const halfgrad::Tensor& target, int64_t num_classes);

}  // namespace unet3d_app

#include <string>

namespace unet3d_app {

/// One epoch's row of metrics.csv.
struct EpochMetrics {
  int64_t epoch = 0;             // 1-based
  double train_loss = 0;         // mean of the finite per-step losses (NaN when no step's was finite)
  int64_t skipped_steps = 0;     // optimizer steps GradScaler skipped (inf/NaN gradients, including the next)
  int64_t nonfinite_steps = 0;   // steps whose loss itself was NaN or inf (left out of train_loss)
  double loss_scale = 1;         // GradScaler's scale after the epoch (1 without one)
  double lr = 0;                 // learning rate of the epoch's last step
  std::vector<double> dice;      // per foreground class; empty when the epoch did not validate
  double mean_dice = 0;
  double epoch_seconds = 0, elapsed_seconds = 0;
};

/// metrics.csv, one row per epoch. Columns:
///   epoch, train_loss, skipped_steps, nonfinite_steps, loss_scale, lr,
///   dice_<class> for each foreground class (dataset.json's names), mean_dice  (empty when the epoch
///   did not validate), epoch_seconds, elapsed_seconds (training time since the run started).
/// The train loop keeps every row and writes the file (atomically) right after each checkpoint with
/// the rows up to the checkpoint's epoch, and saves the same rows, less the two time columns, in the
/// checkpoint's metadata, so metrics.csv never lists an epoch whose weights were not saved, and the
/// checkpoint stays a function of the options and the seed (same seed, same bytes; times differ).
/// The text of the metrics.csv at `path`, or "" when there is none or it cannot be read as a
/// regular file of at most 64 MiB (train --resume takes only its time columns, and goes on without).
std::string read_metrics_csv(const std::string& path);

class MetricsTable {
 public:
  /// class_names[0] is the background (no column).
  explicit MetricsTable(std::vector<std::string> class_names);
  /// Throws halfgrad::Error when m.dice is neither empty nor one value per foreground class.
  void add(const EpochMetrics& m);
  /// The header line and every row added so far, '\n'-terminated.
  std::string csv() const;
  /// {"header": "...", "rows": ["...", ...]}: the same text without epoch_seconds and
  /// elapsed_seconds (which differ from run to run), for a checkpoint's metadata.
  nlohmann::json to_json() const;
  size_t size() const { return rows_.size(); }
  /// The rows as csv() writes them (with their time columns), for train --resume's state.
  const std::vector<std::string>& rows() const { return rows_; }
  /// Puts back rows() saved by an earlier process of the same run (train --resume of a run saved
  /// before 2026-12-04, whose training state held the rows with their times).
  void restore_rows(std::vector<std::string> rows) { rows_ = std::move(rows); }
  /// Puts back to_json()'s rows (without times) saved by an earlier process of the same run, each
  /// with its two time columns taken from the line of `csv_text` (that run's metrics.csv) whose other
  /// columns are the same; a row that metrics.csv lacks (it lags one save behind after a kill between
  /// the two renames) gets empty time columns. Returns the elapsed_seconds of the last row that has
  /// one (0 when none): the training time of the earlier processes, at least.
  double restore_untimed_rows(const std::vector<std::string>& rows, const std::string& csv_text);

 private:
  std::vector<std::string> class_names_;
  std::string header_;
  std::vector<std::string> rows_;
};

}  // namespace unet3d_app
