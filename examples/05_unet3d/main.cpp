// halfgrad-unet3d - the main job: train a 3D U-Net to segment MRI volumes, and evaluate it.
//
//   halfgrad-unet3d train [--data DIR] --out RUN_DIR [--epochs N --batch B --lr X --amp --seed S --config NAME]
//   halfgrad-unet3d eval  --data DIR --checkpoint FILE
//
// Without --data, train uses the embedded default (Debian's mricron-data). See README.md.
#include <CLI/CLI.hpp>
#include <iostream>

#include "core/error.h"
#include "examples/05_unet3d/train.h"

int main(int argc, char** argv) {
  CLI::App app{"halfgrad-unet3d: 3D U-Net segmentation training with optional mixed precision"};
  app.require_subcommand(1);
  unet3d_app::TrainArgs t;
  auto* train = app.add_subcommand("train", "train a U-Net; prints per-epoch loss, skipped steps, loss scale, Dice");
  train->add_option("--data", t.data, "MSD dataset folder (dataset.json, imagesTr/, labelsTr/); default: mricron-data");
  train->add_option("--out", t.out, "run folder for checkpoint.bin and metrics.csv")->required();
  train->add_option("--epochs", t.epochs, "epochs (default: the recipe's)");
  train->add_option("--batch", t.batch, "batch size (default: the recipe's)");
  train->add_option("--lr", t.lr, "peak AdamW learning rate (default: the recipe's)");
  train->add_flag("--amp", t.amp, "mixed precision: autocast (FP16 conv, FP32 accumulate) and GradScaler");
  train->add_option("--seed", t.seed, "random seed (init, patches, flips)");
  train->add_option("--config", t.config, "recipe: cpu (2-core machine) or reference (the PyTorch reference's)");
  train->add_option("--val-every", t.val_every, "validate every N epochs (default: the recipe's)");
  train->add_option("--max-minutes", t.max_minutes, "stop after the epoch that passes this much training time");
  train->add_flag("!--no-progress", t.progress, "no per-step progress bar on stderr");
  unet3d_app::EvalArgs e;
  auto* eval = app.add_subcommand("eval", "Dice of a checkpoint on every pair of an MSD folder; prints one JSON line");
  eval->add_option("--data", e.data, "MSD dataset folder (default: the mricron-data validation slab)");
  eval->add_option("--checkpoint", e.checkpoint, "checkpoint.bin written by train")->required();
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
