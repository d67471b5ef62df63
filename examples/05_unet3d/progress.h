// progress.h - the one-line progress bar of halfgrad-unet3d (train's steps, predict's tiles).
//
// It draws on stderr with carriage returns, so it is drawn only when stderr is a terminal: a log
// file (`2> log`, a pipe, CI) gets no bar frames, only the lines the program prints itself (train
// prints one per epoch). `--no-progress` turns it off on a terminal too.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace unet3d_app {

/// True when stderr is a terminal (isatty(2)).
bool stderr_is_terminal();

class ProgressBar {
 public:
  /// `label` leads the line ("  epoch 3", "  hippocampus_004.nii.gz"); `total` >= 1 units of work.
  /// Draws nothing unless `wanted` and stderr is a terminal.
  ProgressBar(std::string label, int64_t total, bool wanted);
  ~ProgressBar();  // clears the line (finish())
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Redraws the bar with `done` of `total` units and `suffix` ("loss 0.4123"), plus the seconds per
  /// unit so far.
  void update(int64_t done, const std::string& suffix = "");
  /// Clears the bar's line, so that the next line printed starts at column 0. Idempotent.
  void finish();
  bool active() const { return active_; }

 private:
  std::string label_;
  int64_t total_;
  bool active_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace unet3d_app
