// train.h - the two subcommands of halfgrad-unet3d.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "amp/precision_plan.h"

namespace unet3d_app {

struct RankContext;  // distributed.h

struct TrainArgs {
  std::string data;        // MSD folder; empty = embedded default (mricron-data)
  std::string out;         // run folder: model.safetensors, training_state.safetensors, metrics.csv (run_folder.h)
  bool overwrite = false;  // --overwrite: replace an earlier run in `out` instead of refusing
  std::string config = "cpu";
  std::string device = "cpu";   // --device cpu|cuda
  int64_t gpus = 1;             // --gpus N: N ranks, one GPU each (distributed.h); not saved with the run
  std::string memory_format;    // --memory-format ndhwc|ncdhw: activations' layout on CUDA; empty = ndhwc
  int64_t epochs = -1;     // -1 = the recipe's; the parser allows [1, kMaxEpochs] (cli.h)
  int64_t batch = -1;
  double lr = -1;
  bool amp = false;        // autocast (FP16 conv operands, FP32 accumulation) + GradScaler: --opt-level O1
  std::string opt_level;   // "O0".."O3" (amp/opt_level.h); empty = O1 with --amp, else O0
  std::string amp_dtype = "fp16";  // --amp-dtype fp16|bf16: autocast's lower dtype (O1); bf16 drops the GradScaler
  std::vector<std::string> fp32_ops;      // op kinds moved to autocast's FP32 list (amp::op_kind_name)
  std::vector<std::string> fp32_modules;  // module-name prefixes run in FP32 under autocast
  uint64_t seed = 0;
  int64_t fold = 4;        // --fold K: cross-validation fold (data.h: kFolds, kReferenceFold); needs --data
  std::string spacing = "median";  // --spacing native|median|Z,Y,X: the grid --data is resampled to (unet3d/resample.h)
  std::string plan;        // --plan FILE|auto: the recipe of halfgrad-unet3d plan (plan.h); empty = none
  std::string plan_xxh3;   // XXH3-64 (hex) of the plan's canonical text (plan_text), saved so --resume refuses an
                           // edited RUN_DIR/plan.json; empty = no plan, or a run saved before it was recorded
  std::string augment;     // --augment none|nnunet: training augmentation (io/augment.h); empty = the recipe's (none)
  std::string augment_device;  // --augment-device cpu|cuda: where it runs (gpu_batch.h); empty = cpu. The
                               // run saves what it resolved to, so --resume keeps it
  bool deep_supervision = false;  // --deep-supervision: ds_heads and nnU-Net's weighted loss (ops/loss/deep_supervision.h)
  std::string optimizer;    // --optimizer adamw|sgd: sgd is nnU-Net's (unet3d/recipe.h with_nnunet_sgd); empty = the recipe's (adamw)
  std::string lr_schedule;  // --lr-schedule constant|cosine|poly (unet3d/recipe.h LrSchedule); empty = the recipe's
  int64_t val_every = -1;
  int64_t save_every = 1;  // --save-every N: write the checkpoint every N epochs (and after the last)
  double max_minutes = 0;  // stop after this much training time (0 = no limit)
  bool progress = true;
  bool memory_check = true;  // refuse to start when memory_estimate.h's estimate exceeds the free memory
  int64_t workers = -1;      // --workers N: batch-building threads (loader.h); -1 = default_workers(device)
  int64_t prefetch = 2;      // --prefetch N: batches built ahead of the step that runs
  // Instruments of mixed precision (off by default):
  std::string grad_stats;         // --grad-stats FILE.csv: per-parameter gradient statistics (amp/grad_stats.h)
  int64_t grad_stats_every = 1;   // --grad-stats-every N: collect them every N optimizer steps
  bool precision_report = false;  // --precision-report: write amp/precision_report.h's files into `out`
  bool detect_anomaly = false;    // --detect-anomaly: anomaly mode (autograd/anomaly.h) in every training step
  bool cuda_graph = true;         // --cuda-graph / --no-cuda-graph: the step in a CUDA graph (graph_step.h) with
                                  // --device cuda where nothing else needs the eager step; not saved with the run
  // Stopping and continuing (resume.h):
  int64_t stop_after_epoch = 0;   // --stop-after-epoch K: save and stop after epoch K (0 = run to the end)
  std::string resume;             // --resume RUN_DIR: continue that run (its options, from training_state)
  bool allow_data_change = false; // --allow-data-change: resume although the data differs from the run's
                                  // (data_fingerprint.h); not saved with the run
  std::vector<std::string> given; // the options given on the command line ("--epochs"), set by CommandLine::parse
};

struct EvalArgs {
  std::string data;
  std::string checkpoint;
  std::string device = "cpu";
  bool memory_check = true;
  std::string overlay;  // --overlay DIR: a PNG per volume (overlay.h): image | label | prediction
  bool overwrite = false;  // --overwrite: replace --overlay PNGs that exist (refused otherwise)
  double nsd_tolerance = 1.0;  // --nsd-tolerance MM: the normalised surface Dice's tolerance (surface_distance.h)
  int64_t fold = -1;           // --fold K: only fold K's validation pairs of --data (-1: every pair)
};

/// The precision the words of `a` ask for (--opt-level, --amp, --amp-dtype, --fp32-op, --fp32-module):
/// amp::PrecisionPlan::from_words, which throws halfgrad::Error naming the words that disagree.
halfgrad::amp::PrecisionPlan precision_plan(const TrainArgs& a);

/// Trains: Trainer(a, ctx).run() (trainer.h); `ctx` is this process's rank (RankContext{}: the
/// single-process program). Returns 0; throws halfgrad::Error on bad options, data or memory.
int run_train(const TrainArgs& a, const RankContext& ctx);
/// Evaluates a checkpoint on the validation volumes (every pair with all_for_eval): prints one JSON
/// line with per-class Dice, HD95 (mm) and normalised surface Dice (surface_distance.h), their means
/// over volumes, and the same per volume. Returns 0.
int run_eval(const EvalArgs& a);

}  // namespace unet3d_app
