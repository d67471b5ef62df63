// train.h - the two subcommands of halfgrad-unet3d.
#pragma once
#include <string>

namespace unet3d_app {

struct TrainArgs {
  std::string data;        // MSD folder; empty = embedded default (mricron-data)
  std::string out;         // run folder: checkpoint.bin, metrics.csv, log.txt
  std::string config = "cpu";
  int64_t epochs = -1;     // -1 = the recipe's
  int64_t batch = -1;
  double lr = -1;
  bool amp = false;        // autocast (FP16 conv operands, FP32 accumulation) + GradScaler
  uint64_t seed = 0;
  int64_t val_every = -1;
  double max_minutes = 0;  // stop after this much training time (0 = no limit)
  bool progress = true;
};

struct EvalArgs {
  std::string data;
  std::string checkpoint;
};

int run_train(const TrainArgs& a);
int run_eval(const EvalArgs& a);

}  // namespace unet3d_app
