// trainer.h - halfgrad-unet3d's training run as an object: the setup, one training step, the end of
// an epoch, the report. run_train (train.h) is `Trainer(args, ctx).run()`.
//
// The step, written the way a libtorch user would write it:
//   zero_grad -> forward under autocast -> loss -> scaler.scale(loss).backward() -> scaler.step(opt)
//   -> the BatchNorm restore of a skipped step -> scaler.update().
// Trainer::step() is that sequence, once. An eager step runs it with host hooks around it (the loss
// read and checked before backward, the ranks' agreement, --grad-stats, the precision report); with
// --cuda-graph (graph_step.h) the same step() is captured without hooks and replayed, the loss is read
// one step late and the label check and the skipped-step count once an epoch.
// The precision is amp::PrecisionPlan's (--opt-level, --amp, --amp-dtype, --fp32-op, --fp32-module).
// On several GPUs (distributed.h) the model runs inside dist::DistributedDataParallel, each rank on its
// slice of the global batch, and only rank 0 writes the run folder; with one GPU none of that exists.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/grad_stats.h"
#include "amp/opt_level.h"
#include "amp/precision_plan.h"
#include "amp/precision_report.h"
#include "dist/distributed_data_parallel.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/data_fingerprint.h"
#include "examples/05_unet3d/distributed.h"
#include "examples/05_unet3d/gpu_batch.h"
#include "examples/05_unet3d/graph_step.h"
#include "examples/05_unet3d/loader.h"
#include "examples/05_unet3d/memory_estimate.h"
#include "examples/05_unet3d/metrics.h"
#include "examples/05_unet3d/plan.h"
#include "examples/05_unet3d/progress.h"
#include "examples/05_unet3d/train.h"
#include "nlohmann/json.hpp"
#include "nn/buffer_snapshot.h"
#include "nn/unet3d.h"
#include "ops/loss/deferred_label_check.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "unet3d/recipe.h"
#include "unet3d/run_folder.h"
#include "unet3d/trained_model.h"

namespace unet3d_app {

/// Per-class Dice (classes 1..num_classes-1, FP64) averaged over `vols`, predicting whole volumes one
/// at a time in eval mode under `mp`'s autocast. `on_volume(v, pred)`, when given, sees each volume's
/// prediction (D, H, W) int64 on the CPU (eval --overlay). Throws halfgrad::Error naming the volume when
/// the network's output holds NaN or inf.
std::vector<double> validate(halfgrad::nn::UNet3d& model, const std::vector<SegVolume>& vols, int64_t num_classes,
                             const halfgrad::amp::OptLevelSetup& mp, const Placement& where,
                             const std::function<void(const SegVolume&, const halfgrad::Tensor&)>& on_volume = {});

class Trainer {
 public:
  /// The host's work around an eager step; a captured step has none. after_forward(loss) runs before
  /// backward (it may throw: nothing is updated then); after_backward() before the optimizer step, while
  /// the gradients still hold S * g.
  struct StepHooks {
    std::function<void(const halfgrad::Tensor& loss)> after_forward;
    std::function<void()> after_backward;
  };

  /// The whole setup, in this order: the resumed run's options (--resume), the run folder's check and
  /// lock, the training plan (--plan), the precision plan, the data and its fingerprint, the memory check, the run folder, the
  /// model, optimizer and scaler, the instruments, the resumed state, DDP, the loader, the CUDA graph.
  /// Throws halfgrad::Error on bad options, data or memory before the run folder is changed.
  Trainer(const TrainArgs& cli_args, const RankContext& ctx);
  ~Trainer();

  /// Every epoch from the first not yet done to the last (or to --stop-after-epoch / --max-minutes),
  /// then report(). Returns 0.
  int run();
  /// One training step on the batch (x, y) (this rank's slice, on the model's device), as in the file
  /// comment. Returns the loss (0-d FP32) and whether the optimizer stepped (always true when the
  /// scaler is capturable: the device decides).
  struct StepResult {
    halfgrad::Tensor loss;
    bool stepped = true;
  };
  StepResult step(const halfgrad::Tensor& x, const halfgrad::Tensor& y, const StepHooks& hooks = {});
  /// Every step of `epoch` (1-based); returns the epoch's metrics row without validation.
  EpochMetrics run_epoch(int64_t epoch);
  /// The end of the epoch `row` was trained in: validation (every --val-every epochs and after the
  /// last), the epoch's line and metrics row, the checkpoint. Returns false when the run stops here
  /// early (--stop-after-epoch, --max-minutes).
  bool end_epoch(EpochMetrics row);
  /// The run's summary lines: loader, CUDA graph, GPU idle time, curves, memory peak, precision report.
  void report();

 private:
  struct Epoch;  // one epoch's tally (trainer.cpp)
  // Setup, in the constructor's order.
  void guard_run_folder();
  void take_plan();
  void load_data();
  void check_train_memory();
  void make_run_folder();
  void build_model();
  void decide_graph();
  void build_optimizer();
  std::string describe_optimizer() const;
  void open_instruments();
  void restore_run();
  void start_ddp_and_loader();
  void build_graph_step();
  // The epoch loop.
  void eager_step(Epoch& e, int64_t step, double lr);
  void replayed_step(Epoch& e, int64_t step, double lr);
  void finish_graph_epoch(Epoch& e);
  void check_loss(Epoch& e, double loss, int64_t step, double lr);
  void count_loss(Epoch& e, double loss, int64_t step);
  void save_checkpoint(int64_t epoch, double mean_dice);
  halfgrad::Tensor forward_loss(const halfgrad::Tensor& x, const halfgrad::Tensor& y);

  struct MuteStdout {  // ranks other than 0 print nothing to stdout (their errors go to stderr)
    explicit MuteStdout(bool mute) : saved(mute ? std::cout.rdbuf(nullptr) : nullptr), muted(mute) {}
    ~MuteStdout();
    std::streambuf* saved;
    bool muted;
  };

  const RankContext& ctx_;
  MuteStdout mute_;
  StepAgreement agreement_;
  nlohmann::json saved_meta_;  // --resume: the run's training_state metadata
  TrainArgs a_;                // the options: the command line's, or the resumed run's merged with it
  bool resuming_;
  Recipe r_;
  std::optional<TrainingPlan> training_plan_;  // --plan: the run's plan (plan.h), written to RUN_DIR/plan.json
  std::optional<RunFolderLock> lock_;
  BatchSlice slice_;
  halfgrad::amp::PrecisionPlan plan_;
  Placement where_;
  SegData data_;
  std::optional<DataFingerprint> fingerprint_;
  uint64_t memory_baseline_ = 0;  // tensors allocated before the model: not part of the reported peak
  MemoryEstimate need_;
  std::shared_ptr<halfgrad::nn::UNet3d> model_;
  halfgrad::optim::AdamWOptions adamw_;
  halfgrad::amp::GradScalerOptions scaler_options_;
  halfgrad::amp::OptLevelSetup mp_;
  bool use_graph_ = false;
  std::unique_ptr<halfgrad::optim::Optimizer> opt_;  // AdamW or SGD (build_optimizer)
  halfgrad::optim::AdamW* adamw_opt_ = nullptr;      // opt_ when it is AdamW: the graph step stages its lr
  std::unique_ptr<halfgrad::amp::GradScaler> scaler_;
  int64_t steps_per_epoch_ = 1;
  std::optional<halfgrad::amp::GradStatsCsvWriter> grad_stats_;
  std::string csv_path_;
  std::optional<MetricsTable> metrics_;  // made once the class names are known
  int64_t saved_epoch_ = 0;  // the epoch whose weights model.safetensors holds (0: none written yet)
  halfgrad::amp::PrecisionRecorder precision_;
  int64_t global_step_ = 0;
  std::optional<StepGapTimer> gpu_gaps_;
  std::optional<halfgrad::nn::BufferSnapshot> buffers_before_;
  int64_t nonfinite_streak_ = 0;
  double best_ = -1, last_ = -1;
  int64_t best_epoch_ = 0, last_epoch_ = 0, start_epoch_ = 1;
  double elapsed_before_ = 0;  // training time of the earlier processes of a resumed run
  std::unique_ptr<halfgrad::dist::DistributedDataParallel> ddp_;
  LoaderOptions loader_options_;
  bool gpu_augment_ = false;                    // --augment-device cuda with an augmentation (gpu_batch.h)
  std::unique_ptr<GpuBatchBuilder> gpu_batch_;  // its builder, the training volumes on the GPU
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<GraphStep> graph_step_;
  std::vector<halfgrad::Tensor> bn_counters_;  // --cuda-graph: every BatchNorm's num_batches_tracked
  std::optional<LaggedLoss> lagged_;
  std::optional<halfgrad::ops::DeferredLabelCheck> label_check_;
  std::chrono::steady_clock::time_point t0_;  // training time starts: the end of setup, and run()
};

}  // namespace unet3d_app
