// run_folder.h - what `halfgrad-unet3d train --out DIR` may do to DIR: continue or refuse, never
// overwrite a run without being asked (the behaviour nnU-Net and MONAI users expect).
//
// A run folder holds model.safetensors (the weights; its metadata's "epoch" is the epoch they are
// from), training_state.safetensors (model, optimizer and GradScaler state for --resume, and the
// metrics rows up to its epoch: run_checkpoint.h) and metrics.csv (metrics.h: rewritten atomically
// right after each checkpoint, so it lists exactly the checkpoint's epochs), plus, on request, the
// precision report's files (amp/precision_report.h), and after training the curves (curves.h:
// curves.gp, curves.png); with train --plan, plan.json (examples/05_unet3d/plan.h). Writes go through "<name>.tmp" and a rename; a process killed during one
// leaves that temp file behind.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace unet3d_app {

/// The files of DIR a training run writes, by name.
inline const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {
      "model.safetensors", "training_state.safetensors", "metrics.csv", "precision_ops.csv", "precision_casts.csv",
      "loss_scale.csv",    "loss_scale.gp",  "loss_scale.png", "cast_bytes.csv",    "cast_bytes.gp",
      "cast_bytes.png",    "curves.gp",      "curves.png",     "curves.gnuplot.log", "loss_scale.gnuplot.log",
      "cast_bytes.gnuplot.log", "plan.json",
      "checkpoint.bin"};  // the format before safetensors (2026-12-01): still a run's file, so --overwrite removes it
  return names;
}

struct RunFolderContents {
  std::vector<std::string> run_files;    // names of run_file_names() present in the folder
  std::vector<std::string> stale_temps;  // "<run file>.tmp" present: left by an interrupted write
  std::string checkpoint_summary;        // "model.safetensors (epoch 12 of recipe "cpu", 12.7 MiB)", or why unreadable
  std::string metrics_summary;           // "metrics.csv (12 epoch rows)"
};

/// What `dir` holds of a run; an absent folder holds nothing. Reading never changes the folder.
RunFolderContents inspect_run_folder(const std::string& dir);

/// Continue or refuse: when `dir` holds an earlier run's files and `overwrite` is false, throws
/// halfgrad::Error naming the folder, what it holds and the options (--overwrite, or another --out).
/// Also throws when `dir` exists and is not a directory, and when it does not exist and its nearest
/// existing parent is not a writable folder (the run could never save). Never changes the folder;
/// train calls it before loading the data, so a refusal comes at once.
void check_run_folder(const std::string& dir, bool overwrite);

/// check_run_folder, then makes the folder ready for a new run: removes the stale temp files and,
/// with `overwrite`, the earlier run's files, so that the folder never mixes two runs. Returns one
/// note per file removed, e.g. "removed RUN/model.safetensors.tmp (22.1 MiB), left by an interrupted
/// write". Throws halfgrad::Error naming the file when one cannot be removed.
std::vector<std::string> prepare_run_folder(const std::string& dir, bool overwrite);

/// Removes the "<run file>.tmp" files a killed write left in `dir` (train --resume calls it; a
/// fresh run does it through prepare_run_folder). Returns one note per file removed.
std::vector<std::string> remove_stale_temps(const std::string& dir);

/// The advisory lock a training process holds on its run folder for its whole life, so that two
/// processes never train into one folder (they would write the same "<file>.tmp" files): an
/// exclusive flock(2) on DIR/.halfgrad.lock, which holds the owner's PID as text. The kernel drops the
/// lock when the process ends, however it ends (kill -9 included), so a lock file left behind never
/// blocks the next run. flock is advisory and per open file: it excludes other halfgrad processes, not
/// a user's `rm`. On NFS, flock is emulated with fcntl locks (Linux >= 2.6.12) and works across hosts.
class RunFolderLock {
 public:
  /// Takes the lock on `dir` (an existing folder). Throws halfgrad::Error "halfgrad-unet3d train:
  /// DIR is in use by process P (its lock DIR/.halfgrad.lock is held); wait for it to finish or
  /// choose another --out" when another process holds it, or "cannot write into DIR (...)" when the
  /// lock file cannot be created there (a read-only or foreign folder: found at start, not at the
  /// first checkpoint).
  explicit RunFolderLock(const std::string& dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  static constexpr const char* kFileName = ".halfgrad.lock";

 private:
  int fd_ = -1;
};

/// Writes `text` to `path` through "<path>.tmp", fsync, a rename (atomic on POSIX) and an fsync of the
/// folder: a reader, even after a kill or a power cut, sees the old file or the new one, never half of
/// one. Throws halfgrad::Error naming the path on failure (the temp file is then removed).
void write_file_atomic(const std::string& path, const std::string& text);

/// "812 B", "3.4 KiB", "12.7 MiB", "8.4 GiB" (binary units, one decimal), for messages.
std::string human_bytes(uint64_t n);

}  // namespace unet3d_app
