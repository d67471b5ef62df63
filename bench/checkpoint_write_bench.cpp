// checkpoint_write_bench - how long one checkpoint write of halfgrad-unet3d takes, today's format
// against the one it replaced, for a U-Net of the given recipe's widths and opt level.
//
//   build/bench/checkpoint_write_bench [--config reference|cpu|tiny] [--opt-level O1] [--device cpu|cuda]
//       [--dir /tmp] [--repeat 5]
//
//   safetensors  save_run_checkpoint (unet3d/run_checkpoint.h): training_state.safetensors
//                (model, AdamW moments and masters as binary tensors) then model.safetensors; what
//                `train` does at each save and prints as "checkpoint: 2 files, ..., s"
//   base64 JSON  the previous format's cost: the optimizer's state_dict() with every moment in base64
//                inside the checkpoint's JSON (nn::save_checkpoint(path, model, {optimizer, scaler}))
// The AdamW state exists (one step with unit gradients) and the files are fsync'ed, as in a run.
// Prints the median of --repeat writes of each, the bytes, and the achieved MB/s.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/opt_level.h"
#include "core/tensor.h"
#include "unet3d/recipe.h"
#include "unet3d/run_checkpoint.h"
#include "unet3d/trained_model.h"
#include "nn/checkpoint.h"
#include "nn/unet3d.h"
#include "optim/adamw.h"

using namespace halfgrad;
using Clock = std::chrono::steady_clock;

template <typename F>
static double median_seconds(int repeat, F f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  CLI::App app("checkpoint write time: safetensors (today) vs base64 JSON (before)");
  std::string config = "reference", level_name = "O1", device = "cpu", dir = "/tmp";
  int repeat = 5;
  app.add_option("--config", config)->check(CLI::IsMember({"reference", "cpu", "tiny"}));
  app.add_option("--opt-level", level_name);
  app.add_option("--device", device)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dir", dir, "folder to write into (removed files afterwards)");
  app.add_option("--repeat", repeat)->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  unet3d_app::Recipe r = unet3d_app::recipe_by_name(config);
  const unet3d_app::Placement where = unet3d_app::make_placement(device, "", "checkpoint_write_bench");
  auto model = std::make_shared<nn::UNet3d>(r.model);
  optim::AdamWOptions adamw = optim::AdamWOptions().lr(r.lr);
  amp::GradScalerOptions so;
  const amp::OptLevel level = amp::opt_level_from_name(level_name);
  amp::apply_opt_level(level, *model, adamw, so);
  model->to(where.device);
  optim::AdamW opt(model->parameters(), adamw);
  amp::GradScaler scaler(so);
  for (Tensor& p : model->parameters()) p.set_grad(Tensor::ones(p.shape(), p.dtype(), p.device()));
  opt.step();
  const nlohmann::json meta = {{"recipe", r.name}, {"model", r.model.to_json()}, {"epoch", 1}};

  const std::string run = dir + "/halfgrad_checkpoint_write_bench";
  std::filesystem::create_directories(run);
  unet3d_app::RunCheckpointWrite w;
  const double t_new = median_seconds(repeat, [&] { w = unet3d_app::save_run_checkpoint(run, *model, opt, scaler, meta, meta); });
  const std::string old_path = run + "/base64.bin";
  const double t_old = median_seconds(repeat, [&] {
    nn::save_checkpoint(old_path, *model, {{"optimizer", opt.state_dict()}, {"scaler", scaler.state_dict()}, {"meta", meta}});
  });
  const uint64_t old_bytes = std::filesystem::file_size(old_path);
  std::filesystem::remove_all(run);
  std::printf("model: UNet3d %s, %lld parameters, %s, %s\n", r.model.describe().c_str(),
              static_cast<long long>(model->num_parameters()), level_name.c_str(), device.c_str());
  std::printf("safetensors (2 files): %8.1f MiB  median %.3f s  (%.0f MB/s)\n", w.bytes / 1048576.0, t_new,
              w.bytes / t_new / 1e6);
  std::printf("base64 JSON (1 file):  %8.1f MiB  median %.3f s  (%.0f MB/s)\n", old_bytes / 1048576.0, t_old,
              old_bytes / t_old / 1e6);
  std::printf("speed-up: %.1fx\n", t_old / t_new);
  return 0;
}
