#include "examples/05_unet3d/cli.h"

#include "examples/05_unet3d/resume.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "unet3d/resample.h"

namespace unet3d_app {

CLI::Validator decimal_integer(uint64_t lo, uint64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        const std::string expected = "expected a decimal integer in " + range;
        if (s.empty()) return "empty value; " + expected;
        if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return "'" + s + "' is not a decimal integer (digits 0-9 only); " + expected;
        // Leading zeros dropped: decimal, not octal. Then digit by digit with an overflow check.
        const size_t first = std::min(s.find_first_not_of('0'), s.size() - 1);
        const std::string digits = s.substr(first);
        uint64_t v = 0;
        for (char c : digits) {
          const uint64_t d = static_cast<uint64_t>(c - '0');
          if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return "'" + s + "' is out of range; " + expected;
          v = v * 10 + d;
        }
        if (v < lo || v > hi) return "'" + s + "' is out of range; " + expected;
        s = digits;
        return "";
      },
      "decimal in " + range);
}

CLI::Validator finite_number(double lo, bool strict, double hi) {
  std::string bound = std::string(strict ? "> " : ">= ") + CLI::detail::to_string(lo);
  if (std::isfinite(hi)) bound = (strict ? "in (" : "in [") + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
  return CLI::Validator(
      [lo, strict, hi, bound](std::string& s) -> std::string {
        const std::string expected = "expected a finite number " + bound;
        if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return "'" + s + "' is not a number; " + expected;
        // strtod, not stod: stod throws out_of_range for a value that underflows (1e-400) as for
        // one that overflows (1e400), and the two deserve different words.
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end != s.c_str() + s.size()) return "'" + s + "' is not a number; " + expected;
        if (errno == ERANGE && std::fabs(v) > 1)
          return "'" + s + "' overflows double precision (beyond 1.8e308); " + expected;
        if (!std::isfinite(v)) return "'" + s + "' is not finite; " + expected;
        const bool underflow = errno == ERANGE;  // |value| below 2.2e-308: rounded to v (0 or subnormal)
        if ((strict ? v <= lo : v < lo) || v > hi) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.17g", v);
          return "'" + s + "' " + (underflow ? std::string("underflows to ") + buf + " in double precision, which is"
                                             : std::string("is")) + " out of range; " + expected;
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        s = buf;
        return "";
      },
      "finite, " + bound);
}

// train's options of what each sample and each loss add to the recipe: augmentation (and where it
// runs) and deep supervision.
static void add_train_augment_options(CLI::App* train, TrainArgs& t) {
  train->add_option("--augment", t.augment,
                    "training augmentation before the flips: none (every recipe's default) or nnunet (nnU-Net v2's "
                    "default transforms: rotation, scaling, noise, blur, brightness, contrast, low resolution, gamma; "
                    "io/augment.h)")
      ->check(CLI::IsMember({"none", "nnunet"}));
  train->add_option("--augment-device", t.augment_device,
                    "where --augment nnunet runs: cpu (the default: the loader's worker threads) or, with --device "
                    "cuda, cuda (the draws on the CPU, the per-voxel work in CUDA kernels on the step's stream, the "
                    "training volumes held on the GPU; gpu_batch.h; not yet run on a GPU, hence opt-in). Each is "
                    "bit-reproducible; they draw different random numbers. Saved with the run")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  train->add_flag("--deep-supervision", t.deep_supervision,
                  "nnU-Net v2's deep supervision: the model gets a 1x1x1 head on every lower decoder level "
                  "(ds_heads) and the step's loss is the weighted sum of the losses at 1, 1/2, 1/4, ... resolution "
                  "(ops/loss/deep_supervision.h); validation and predict use the full-resolution output. One GPU "
                  "only; the step runs eagerly (no CUDA graph)");
}

// `train` and its options into t.
static CLI::App* add_train(CLI::App& app, TrainArgs& t) {
  CLI::App* train = app.add_subcommand("train", "train a U-Net; prints per-epoch loss, skipped steps, loss scale, Dice");
  train->add_option("--data", t.data, "MSD dataset folder (dataset.json, imagesTr/, labelsTr/); default: mricron-data");
  train->add_option("--out", t.out,
                    "run folder for model.safetensors, training_state.safetensors and metrics.csv; a folder that "
                    "holds an earlier run is refused unless --overwrite is given (required unless --resume)");
  train->add_flag("--overwrite", t.overwrite,
                  "replace the earlier run in --out: its files (model.safetensors, training_state.safetensors, "
                  "metrics.csv, precision report) are removed once the data has loaded");
  train->add_option("--resume", t.resume,
                    "continue the run in RUN_DIR from its last checkpoint with the options it was started with "
                    "(bit-identical to a run that never stopped); only --epochs N (train until epoch N), --save-every, "
                    "--max-minutes, --stop-after-epoch, --no-progress, --no-memory-check, --workers, --prefetch, "
                    "--gpus, --cuda-graph, --data (the same files in a moved folder) and --allow-data-change may be given");
  train->add_flag("--allow-data-change", t.allow_data_change,
                  "with --resume: continue although the data differs from what the run trained on (a file added, "
                  "removed or changed since; refused otherwise, naming each)");
  train->add_option("--stop-after-epoch", t.stop_after_epoch,
                    "save and stop after epoch K, as if stopped there; the LR schedule stays that of --epochs, so "
                    "--resume continues the same run")
      ->transform(decimal_integer(1, kMaxEpochs));
  train->add_option("--epochs", t.epochs, "epochs (default: the recipe's)")->transform(decimal_integer(1, kMaxEpochs));
  train->add_option("--batch", t.batch, "batch size (default: the recipe's)")->transform(decimal_integer(1, kMaxBatch));
  train->add_option("--lr", t.lr, "peak AdamW learning rate (default: the recipe's)")->transform(finite_number(0, true));
  train->add_flag("--amp", t.amp, "mixed precision: autocast (FP16 conv, FP32 accumulate) and GradScaler (= --opt-level O1)");
  train->add_option("--amp-dtype", t.amp_dtype,
                    "autocast's lower dtype with --amp / --opt-level O1: fp16 (default; with GradScaler) or bf16 "
                    "(FP32's exponent range, so no GradScaler: it is disabled)")
      ->check(CLI::IsMember({"fp16", "bf16"}));
  train->add_option("--opt-level", t.opt_level,
                    "O0 FP32; O1 autocast + GradScaler; O2 FP16 weights, FP32 norms and master weights; O3 pure FP16");
  train->add_option("--fp32-op", t.fp32_ops, "run this op kind in FP32 under autocast (repeatable; e.g. conv_transpose3d)");
  train->add_option("--fp32-module", t.fp32_modules,
                    "run modules whose name starts with PREFIX in FP32 under autocast (repeatable; e.g. dec.3, head)");
  train->add_option("--device", t.device, "cpu (default) or cuda: where the model, the batches and every op run")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  train->add_option("--gpus", t.gpus,
                    "data-parallel training on N GPUs of this host with --device cuda: N processes, one GPU each, "
                    "NCCL; --batch stays the global batch (split evenly; a multiple of N). Default 1. Under "
                    "torchrun/mpirun (WORLD_SIZE set) leave it out: each process is one rank")
      ->transform(decimal_integer(1, kMaxGpus));
  train->add_option("--memory-format", t.memory_format,
                    "activations' layout on cuda: ndhwc (channels-last, the default there; what the Tensor Core "
                    "convolutions read) or ncdhw. The CPU runs NCDHW only: ndhwc with --device cpu is an error")
      ->check(CLI::IsMember({"ndhwc", "ncdhw"}));
  train->add_option("--fold", t.fold,
                    "cross-validation fold K of 5 with --data: the pairs whose index (sorted by name) is K mod 5 "
                    "validate, the others train (default 4: the reference's split, every 5th pair)")
      ->transform(decimal_integer(0, 4));
  train->add_option("--spacing", t.spacing,
                    "with --data, the voxel spacing every volume is resampled to (images trilinear, labels one-hot "
                    "linear): median (the default: the training images' median, nnU-Net's rule), native (each "
                    "volume on its own grid) or Z,Y,X in mm (e.g. 3,0.8,0.8). predict resamples to it and back")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              SpacingChoice::parse(s, "value");
            } catch (const halfgrad::Error& e) {
              return e.what();  // CLI11 puts "--spacing: " before it
            }
            return "";
          },
          "native|median|Z,Y,X"));
  add_train_augment_options(train, t);
  train->add_option("--optimizer", t.optimizer,
                    "adamw (every recipe's: AdamW, the recipe's lr, weight decay and schedule) or sgd (nnU-Net v2's: "
                    "SGD with Nesterov momentum 0.99, lr 1e-2, weight decay 3e-5, poly schedule, no warm-up; --lr and "
                    "--lr-schedule still apply; the step runs eagerly, and O3 is refused)")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  train->add_option("--lr-schedule", t.lr_schedule,
                    "the learning rate after the warm-up: constant, cosine (to lr/20) or poly (lr (1 - t)^0.9 to 0, "
                    "nnU-Net's); default: the recipe's (cpu, tiny: cosine; reference: constant; with --optimizer sgd: "
                    "poly)")
      ->check(CLI::IsMember({"constant", "cosine", "poly"}));
  train->add_option("--seed", t.seed, "random seed (init, patches, flips, augmentation)")
      ->transform(decimal_integer(0, std::numeric_limits<uint64_t>::max()));
  train->add_option("--config", t.config,
                    "recipe: cpu (2-core machine), reference (the PyTorch reference's) or tiny (for tests)")
      ->check(CLI::IsMember({"cpu", "reference", "tiny"}));
  train->add_option("--val-every", t.val_every, "validate every N epochs (default: the recipe's)")
      ->transform(decimal_integer(1, kMaxEvery));
  train->add_option("--save-every", t.save_every,
                    "write model.safetensors and training_state.safetensors (and metrics.csv with them) every N "
                    "epochs and after the last (default 1)")
      ->transform(decimal_integer(1, kMaxEvery));
  train->add_option("--max-minutes", t.max_minutes, "stop after the epoch that passes this much training time")
      ->transform(finite_number(0, false));
  train->add_option("--workers", t.workers,
                    "threads that build the next batches while a step runs (0: in the training thread; default 2 "
                    "on cuda, 0 on the cpu, where they would compete with the compute threads)")
      ->transform(decimal_integer(0, kMaxWorkers));
  train->add_option("--prefetch", t.prefetch, "batches built ahead of the running step (default 2)")
      ->transform(decimal_integer(1, kMaxWorkers));
  train->add_flag("!--no-progress", t.progress, "no per-step progress bar on stderr");
  train->add_flag("!--no-memory-check", t.memory_check,
                  "start even when the estimated memory (printed at start) exceeds what the device has free");
  train->add_option("--grad-stats", t.grad_stats,
                    "write per-parameter gradient statistics against FP16's range (unscaled) to this CSV file");
  train->add_option("--grad-stats-every", t.grad_stats_every, "collect --grad-stats every N optimizer steps (default 1)")
      ->transform(decimal_integer(1, kMaxEvery));
  train->add_flag("--precision-report", t.precision_report,
                  "write the precision report (dtype per op, casts, loss-scale timeline; CSV and PNG) into --out");
  train->add_flag("--cuda-graph,!--no-cuda-graph", t.cuda_graph,
                  "with --device cuda (default on): capture the whole training step in a CUDA graph once and replay "
                  "it (no host synchronisation inside a step; a few eager warm-up steps first). Falls back to eager "
                  "steps, saying why, with --gpus > 1, --detect-anomaly, --precision-report or --grad-stats");
  train->add_flag("--detect-anomaly", t.detect_anomaly,
                  "anomaly mode: stop at the first op whose output or gradient is NaN/inf (debugging; with AMP the "
                  "overflows GradScaler would skip become errors)");
  return train;
}

// `eval` and its options into e.
static CLI::App* add_eval(CLI::App& app, EvalArgs& e) {
  CLI::App* eval = app.add_subcommand("eval", "Dice of a checkpoint on every pair of an MSD folder; prints one JSON line");
  eval->add_option("--data", e.data, "MSD dataset folder (default: the mricron-data validation slab)");
  eval->add_option("--checkpoint", e.checkpoint,
                   "model.safetensors written by train (or its run folder), or a PyTorch UNet3D state_dict saved "
                   "with safetensors")
      ->required();
  eval->add_option("--device", e.device, "cpu (default) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  eval->add_option("--overlay", e.overlay,
                   "folder for a PNG per volume: the slice with most foreground, image | label | prediction");
  eval->add_flag("--overwrite", e.overwrite, "replace --overlay PNGs that exist (refused otherwise)");
  eval->add_option("--fold", e.fold,
                   "with --data, evaluate fold K's validation pairs only (the ones train --fold K held out); "
                   "default: every pair")
      ->transform(decimal_integer(0, 4));
  eval->add_option("--nsd-tolerance", e.nsd_tolerance,
                   "tolerance in mm of the normalised surface Dice (default 1): the share of both surfaces within "
                   "this distance of the other")
      ->transform(finite_number(0, false, 1000));
  eval->add_flag("!--no-memory-check", e.memory_check,
                 "evaluate even when the estimated memory of the largest volume's forward exceeds what is free");
  return eval;
}

// `predict` and its options into p.
static CLI::App* add_predict(CLI::App& app, PredictArgs& p) {
  CLI::App* predict = app.add_subcommand("predict", "segment NIfTI volumes with a checkpoint: a uint8 label map per volume, "
                                          "with the input's geometry");
  predict->add_option("--checkpoint", p.checkpoints,
                      "a run folder or its model.safetensors (written by train, or a PyTorch state_dict of the reference "
                      "U-Net); repeat it to ensemble several models (the mean of their softmax, as nnU-Net's folds)")
      ->required();
  predict->add_option("--input", p.input, "a .nii/.nii.gz volume, or a folder of them (every *.nii, *.nii.gz)")
      ->required();
  predict->add_option("--output", p.output,
                      "label map file (.nii/.nii.gz) for one input, or a folder (created) for the same file names")
      ->required();
  predict->add_option("--device", p.device, "cpu (default) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  predict->add_option("--overlap", p.overlap,
                      "fraction of the window shared by neighbouring tiles, at most 0.9 (default 0.5, nnU-Net's; "
                      "0.9 already means about 1000 times the tiles of 0)")
      ->transform(finite_number(0, false, kMaxOverlap));
  predict->add_flag("--tta", p.tta, "test-time augmentation: average the logits of the mirrorings along the axes the recipe trained with flips (8 for reference, 2 for cpu: x only)");
  predict->add_option("--probabilities", p.probabilities,
                      "also write float32 softmax probabilities (4-D, dim[4] = classes): a file or folder, as --output");
  predict->add_option("--labels", p.labels,
                      "folder of reference label maps with the inputs' file names (e.g. labelsTr/): print Dice");
  predict->add_option("--overlay", p.overlay,
                      "folder for a PNG per volume: the slice with most foreground, image | [label |] prediction");
  predict->add_flag("--overwrite", p.overwrite, "replace output files that exist (refused otherwise)");
  predict->add_flag("!--no-progress", p.progress, "no per-volume progress bar on stderr");
  predict->add_flag("!--no-memory-check", p.memory_check,
                    "predict even when a tile's or a volume's estimated memory exceeds what is free");
  return predict;
}

// train --plan (plan.h), beside `plan`.
static void add_train_plan(CLI::App& train, TrainArgs& t) {
  train.add_option("--plan", t.plan,
                   "with --data, train on a plan (halfgrad-unet3d plan: spacing, patch, levels and widths, batch, "
                   "samples per epoch, foreground share, optimizer): FILE, a plan written before, or auto, planned "
                   "now for --device and its total memory; written to RUN_DIR/plan.json. --batch, --spacing, "
                   "--optimizer given here override the plan's");
}

// `plan` and its options into p.
static CLI::App* add_plan(CLI::App& app, PlanArgs& p) {
  CLI::App* plan = app.add_subcommand("plan", "choose a training recipe for an MSD dataset and a device (nnU-Net v2's "
                                              "experiment planning): prints it and writes it as JSON for train --plan");
  plan->add_option("--data", p.data, "MSD dataset folder (dataset.json, imagesTr/, labelsTr/)")->required();
  plan->add_option("--output", p.output, "the plan file (JSON) to write; refused if it exists unless --overwrite")
      ->required();
  plan->add_flag("--overwrite", p.overwrite, "replace --output if it exists");
  plan->add_option("--device", p.device, "the device the plan is for: cpu (default) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  plan->add_option("--memory-gib", p.memory_gib,
                   "plan for at most this much memory in GiB (default: the device's total memory; with --device cuda "
                   "on a machine without a GPU, required)")
      ->transform(finite_number(0, true, 1 << 20));
  plan->add_option("--config", p.config,
                   "the base recipe whose first width and schedule the plan starts from: cpu, reference or tiny "
                   "(default: reference for cuda, cpu for cpu)")
      ->check(CLI::IsMember({"cpu", "reference", "tiny"}));
  plan->add_flag("--amp", p.amp, "plan for mixed precision (O1), as train --amp");
  plan->add_option("--opt-level", p.opt_level, "plan for this opt level (O0..O3), as train --opt-level");
  plan->add_option("--amp-dtype", p.amp_dtype, "fp16 or bf16, as train --amp-dtype")
      ->check(CLI::IsMember({"fp16", "bf16"}));
  return plan;
}

CommandLine::CommandLine() : app("halfgrad-unet3d: 3D U-Net segmentation training with optional mixed precision") {
  app.name("halfgrad-unet3d");
  app.require_subcommand(1);
  train = add_train(app, train_args);
  add_train_plan(*train, train_args);
  eval = add_eval(app, eval_args);
  predict = add_predict(app, predict_args);
  plan = add_plan(app, plan_args);
  cv = app.add_subcommand("cv", "cross-validation summary of train --fold K runs: each fold's validation Dice per "
                                "class and the mean and SD across folds; prints one JSON line");
  cv->add_option("RUN_DIR", cv_runs, "run folders of train --data DIR --fold K, one per fold")->required();
  // A path given empty (`--data "$DATA"` with DATA unset) is a mistake, not "option not given": the
  // options below would otherwise quietly train on the default data, start a fresh run instead of
  // resuming, or switch an output off.
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("is empty; expected a path (leave the option out instead)") : std::string(); },
      "PATH");
  for (CLI::App* sub : {train, eval, predict, cv, plan})
    for (const char* name : {"--data", "--out", "--resume", "--grad-stats", "--checkpoint", "--input", "--output",
                             "--probabilities", "--labels", "--overlay", "--plan"})
      if (CLI::Option* o = sub->get_option_no_throw(name)) o->check(non_empty);
}

void CommandLine::parse(const std::vector<std::string>& args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's vector form takes them last first
  app.parse(reversed);
  if (*train) {
    for (const CLI::Option* o : train->get_options())
      if (o->count() > 0 && o->get_name() != "--help") train_args.given.push_back(o->get_name());
    check_train_args(train_args);
  }
}

void check_train_args(const TrainArgs& a) {
  HG_CHECK(a.resume.empty() != a.out.empty(),
           "halfgrad-unet3d train: " << (a.resume.empty() ? "--out RUN_DIR is required (or --resume RUN_DIR)"
                                                          : "--resume RUN_DIR continues the run in RUN_DIR; drop --out"));
  check_resume_args(a);
  HG_CHECK(!a.allow_data_change || !a.resume.empty(),
           "halfgrad-unet3d train: --allow-data-change is for --resume (a new run has no earlier data to differ from)");
  // The precision words, which --resume takes from the run (the words here are then the defaults).
  if (a.resume.empty()) precision_plan(a);
  HG_CHECK(!(a.device == "cpu" && a.memory_format == "ndhwc"),
           "halfgrad-unet3d train: --memory-format ndhwc asks for channels-last activations, but with --device cpu "
           "every op runs NCDHW (channels-last is a CUDA layout here); drop --memory-format, or use --device cuda");
  const auto given = [&](const char* o) { return std::find(a.given.begin(), a.given.end(), o) != a.given.end(); };
  HG_CHECK(!given("--spacing") || !a.data.empty(),
           "halfgrad-unet3d train: --spacing needs --data (the default data is the 2 mm atlas of io/mricron.h)");
  HG_CHECK(!given("--plan") || !a.data.empty(),
           "halfgrad-unet3d train: --plan needs --data (a plan is made for an MSD dataset; the default data has none)");
  HG_CHECK(a.augment_device != "cuda" || a.device == "cuda",
           "halfgrad-unet3d train: --augment-device cuda needs --device cuda (got --device " << a.device
               << "); drop it or pass --augment-device cpu");
  HG_CHECK(!a.deep_supervision || a.gpus == 1,
           "halfgrad-unet3d train: --deep-supervision runs on one GPU (DistributedDataParallel's forward returns one "
           "output); drop --gpus " << a.gpus << " or --deep-supervision");
  const bool gpus_given = given("--gpus");
  HG_CHECK(!gpus_given || !a.resume.empty() || a.device == "cuda",  // a resumed run's device is its own
           "halfgrad-unet3d train: --gpus " << a.gpus << " runs one process per GPU (NCCL), but the device is --device "
                                            << a.device << "; add --device cuda, or drop --gpus");
}

}  // namespace unet3d_app
