// loader.h - the prefetching batch pipeline of halfgrad-unet3d (what DALI or torch's DataLoader with
// num_workers > 0 and pin_memory=True do for the PyTorch seed).
//
// Worker threads build the next batches (load, crop, flip: make_training_batch) while the training
// thread runs the current step; batches come out strictly in step order. A batch is a pure function
// of (run seed, global step) (data.h: batch_seed), so workers may build them in any order and the
// run's bits do not depend on the number of workers: 0, 1 or 3 workers give identical checkpoints
// (tests/examples/05_unet3d/loader_same_bits_test.sh).
//
//   workers 0    next() builds the batch in the training thread (the loop before this file existed).
//   workers N    N threads; at most `prefetch` batches are built ahead of the one the training thread
//                takes next (the queue is bounded: memory stays prefetch * batch bytes).
// train --augment-device cuda builds each batch with CUDA kernels queued by the training thread, so
// it runs this loader with workers 0 (gpu_batch.h says why).
//
// On CUDA (device CUDA, workers >= 1), each of the `prefetch` slots of the ring owns a pinned host
// buffer and a device buffer outside the caching allocator (core/cuda/streams.h says why). A worker
// that built the batch of step s fills slot s % prefetch:
//   host-wait slot.h2d_done (the slot's previous copy has left the pinned buffer); memcpy the batch
//   into the pinned buffer; copy stream waits slot.consumed (the main stream has finished copying the
//   slot's previous batch out of the device buffer); async H2D on the copy stream; record slot.h2d_done.
// next() then, on the main stream: wait slot.h2d_done; D2D copy of the slot into ordinary tensors from
// the caching allocator (stream-ordered on the main stream like every other tensor, so the training
// step may keep, free and reuse them as it likes); record slot.consumed. A worker is given step s only
// once step s - prefetch has been delivered, so slot.consumed is already recorded when it waits on it.
//
// Errors: an exception thrown while building the batch of step s is rethrown by the next() that
// would have returned that batch, as halfgrad::Error naming the step and the original message.
// Shutdown: the destructor stops the workers (each finishes the batch in hand) and joins them; it
// never hangs, also when the training thread leaves by an exception.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace unet3d_app {

/// Builds the batch of global step `step` into x (B, 1, d, h, w) float32 and y (B, d, h, w) int64,
/// contiguous CPU tensors. Called from worker threads: it must only read shared state.
using BatchBuilder = std::function<void(int64_t step, halfgrad::Tensor& x, halfgrad::Tensor& y)>;

struct LoaderOptions {
  int workers = 0;   // threads building batches; 0 = in the training thread
  int prefetch = 2;  // batches built ahead (>= 1); also the number of CUDA staging slots
  halfgrad::Device device = halfgrad::Device::CPU;  // CUDA: next() returns device tensors (see above)
};

/// What the training thread spent waiting for batches: the figure to watch. A loader that keeps up
/// has wait_seconds near 0; with workers 0 it is the whole time spent building batches.
struct LoaderStats {
  int64_t batches = 0;        // next() calls that returned a batch
  double wait_seconds = 0;    // time inside next(), in the training thread
  double first_wait_seconds = 0;  // of which the first batch (no step ran yet to hide it behind)
  std::string summary(int workers, int prefetch) const;  // "loader: 480 batches, 2 workers, ..."
};

class BatchLoader {
 public:
  /// Delivers the batches of steps [first_step, end_step) in order (first_step > 0 for a resumed run).
  /// Throws halfgrad::Error for workers < 0, prefetch < 1, or first_step outside [0, end_step].
  BatchLoader(BatchBuilder build, int64_t first_step, int64_t end_step, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  /// The batch of step next_step(), then advances. CPU tensors on the CPU (and with workers 0 on
  /// CUDA, as the training thread made them), contiguous CUDA tensors on CUDA with workers >= 1.
  /// Throws halfgrad::Error past end_step, or for a batch whose building threw (naming the step).
  void next(halfgrad::Tensor& x, halfgrad::Tensor& y);
  int64_t next_step() const { return next_; }
  const LoaderStats& stats() const { return stats_; }
  const LoaderOptions& options() const { return opt_; }

 private:
  struct Slot;        // CUDA staging (loader.cpp)
  struct CopyEngine;  // CUDA: the second stream and the lock of its queue
  struct Built {
    halfgrad::Tensor x, y;     // CPU tensors (no CUDA slot) or the shapes of the staged batch
    std::exception_ptr error;  // what building it threw
  };
  void worker_loop();
  void stage(int64_t step, const halfgrad::Tensor& x, const halfgrad::Tensor& y);

  BatchBuilder build_;
  const int64_t end_;
  const LoaderOptions opt_;
  int64_t next_;  // the step next() returns
  LoaderStats stats_;

  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  int64_t claim_;  // the next step a worker takes
  bool stop_ = false;
  std::map<int64_t, Built> ready_;
  std::vector<std::unique_ptr<Slot>> slots_;  // CUDA only: slot s % prefetch stages step s
  std::unique_ptr<CopyEngine> copy_;          // CUDA only
  std::vector<std::thread> threads_;
};

/// GPU idle time between training steps, from CUDA events and without syncing every step: step_end()
/// records an event on the main stream after step i's last queued op, step_start() one after step
/// i+1's batch is on the device in its tensors (next() and the copy to the model's layout queued).
/// The gap between the two is the time the GPU had nothing of this run to do at that boundary: its
/// waiting for the host (a batch still being built, the host's own work between steps) plus the copy
/// of the batch to the device. Epoch boundaries are left out (skip_gap). Pairs are read kDepth steps later (long complete by then), so recording
/// costs two cudaEventRecord per step. Does nothing when disabled (CPU runs).
class StepGapTimer {
 public:
  static constexpr int kDepth = 8;
  explicit StepGapTimer(bool enabled);
  ~StepGapTimer();
  void step_start();
  void step_end();
  /// The next step_start closes no gap: validation and checkpointing lie between (end of an epoch).
  void skip_gap() { have_end_ = false; }
  /// Reads every recorded pair (host wait on the last); returns total gap seconds over `gaps()`.
  double finish();
  int64_t gaps() const { return gaps_; }

 private:
  struct Pair;
  void collect(Pair& p);
  bool enabled_;
  std::vector<std::unique_ptr<Pair>> ring_;
  int cur_ = 0;
  bool have_end_ = false;
  int64_t gaps_ = 0;
  double total_ms_ = 0;
};

}  // namespace unet3d_app
