// halfgrad-unet3d - the main job: train a 3D U-Net to segment MRI volumes, and evaluate it.
//
//   halfgrad-unet3d train [--data DIR] --out RUN_DIR [--device cpu|cuda] [--epochs N --batch B --lr X --seed S --config NAME]
//                         [--opt-level O0|O1|O2|O3 | --amp] [--fp32-op NAME ...] [--fp32-module PREFIX ...]
//   halfgrad-unet3d eval  [--data DIR] --checkpoint FILE [--device cpu|cuda]
//
// Without --data, train uses the embedded default (Debian's mricron-data). See README.md.
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <stdexcept>

#include "core/error.h"
#include "examples/05_unet3d/train.h"

// CLI11 validators: a value that is not a finite number in range is an error, never a silent default.
static CLI::Validator finite_at_least(double lo, bool strict) {
  return CLI::Validator(
      [lo, strict](std::string& s) -> std::string {
        double v;
        try {
          size_t used = 0;
          v = std::stod(s, &used);
          if (used != s.size()) throw std::invalid_argument(s);
        } catch (const std::exception&) {
          return "'" + s + "' is not a number";
        }
        if (!std::isfinite(v) || (strict ? v <= lo : v < lo))
          return "'" + s + "': expected a finite number " + (strict ? "> " : ">= ") + CLI::detail::to_string(lo);
        return "";
      },
      strict ? "> 0" : ">= 0");
}

int main(int argc, char** argv) {
  CLI::App app{"halfgrad-unet3d: 3D U-Net segmentation training with optional mixed precision"};
  app.require_subcommand(1);
  unet3d_app::TrainArgs t;
  auto* train = app.add_subcommand("train", "train a U-Net; prints per-epoch loss, skipped steps, loss scale, Dice");
  train->add_option("--data", t.data, "MSD dataset folder (dataset.json, imagesTr/, labelsTr/); default: mricron-data");
  train->add_option("--out", t.out, "run folder for checkpoint.bin and metrics.csv")->required();
  train->add_option("--epochs", t.epochs, "epochs (default: the recipe's)")->check(finite_at_least(0, true));
  train->add_option("--batch", t.batch, "batch size (default: the recipe's)")->check(finite_at_least(0, true));
  train->add_option("--lr", t.lr, "peak AdamW learning rate (default: the recipe's)")->check(finite_at_least(0, true));
  train->add_flag("--amp", t.amp, "mixed precision: autocast (FP16 conv, FP32 accumulate) and GradScaler (= --opt-level O1)");
  train->add_option("--opt-level", t.opt_level,
                    "O0 FP32; O1 autocast + GradScaler; O2 FP16 weights, FP32 norms and master weights; O3 pure FP16");
  train->add_option("--fp32-op", t.fp32_ops, "run this op kind in FP32 under autocast (repeatable; e.g. conv_transpose3d)");
  train->add_option("--fp32-module", t.fp32_modules,
                    "run modules whose name starts with PREFIX in FP32 under autocast (repeatable; e.g. dec.3, head)");
  train->add_option("--device", t.device, "cpu (default) or cuda: where the model, the batches and every op run")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  train->add_option("--memory-format", t.memory_format,
                    "activations' layout on cuda: ndhwc (channels-last, default; what the Tensor Core convolutions read) or ncdhw")
      ->check(CLI::IsMember({"ndhwc", "ncdhw"}));
  train->add_option("--seed", t.seed, "random seed (init, patches, flips)");
  train->add_option("--config", t.config, "recipe: cpu (2-core machine) or reference (the PyTorch reference's)");
  train->add_option("--val-every", t.val_every, "validate every N epochs (default: the recipe's)")->check(finite_at_least(0, true));
  train->add_option("--save-every", t.save_every,
                    "write checkpoint.bin every N epochs and after the last (default 1; the checkpoint holds the "
                    "optimizer state, so on a GPU writing it can take as long as an epoch)")
      ->check(finite_at_least(0, true));
  train->add_option("--max-minutes", t.max_minutes, "stop after the epoch that passes this much training time")->check(finite_at_least(0, false));
  train->add_flag("!--no-progress", t.progress, "no per-step progress bar on stderr");
  train->add_option("--grad-stats", t.grad_stats,
                    "write per-parameter gradient statistics against FP16's range (unscaled) to this CSV file");
  train->add_option("--grad-stats-every", t.grad_stats_every, "collect --grad-stats every N optimizer steps (default 1)")
      ->check(finite_at_least(0, true));
  train->add_flag("--precision-report", t.precision_report,
                  "write the precision report (dtype per op, casts, loss-scale timeline; CSV and PNG) into --out");
  train->add_flag("--detect-anomaly", t.detect_anomaly,
                  "anomaly mode: stop at the first op whose output or gradient is NaN/inf (debugging; with AMP the "
                  "overflows GradScaler would skip become errors)");
  unet3d_app::EvalArgs e;
  auto* eval = app.add_subcommand("eval", "Dice of a checkpoint on every pair of an MSD folder; prints one JSON line");
  eval->add_option("--data", e.data, "MSD dataset folder (default: the mricron-data validation slab)");
  eval->add_option("--checkpoint", e.checkpoint, "checkpoint.bin written by train")->required();
  eval->add_option("--device", e.device, "cpu (default) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) return unet3d_app::run_train(t);
    return unet3d_app::run_eval(e);
  } catch (const halfgrad::Error& err) {
    std::cerr << "error: " << err.what() << std::endl;
    return 1;
  } catch (const std::exception& err) {
    std::cerr << "error: " << err.what() << std::endl;
    return 1;
  }
}
