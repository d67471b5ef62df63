// unet_step_cpu - one U-Net training step on the CPU (forward, CE + soft Dice loss, backward,
// AdamW), timed; the same step as bench/torch_unet_step_cpu.py so that run_cpu_bench.sh can print
// the ratio halfgrad / PyTorch measured in the same run.
//
//   build/bench/unet_step_cpu [--width 8 --batch 4 --shape 32 48 32 --steps 5 --amp]
// Prints one JSON line: median and minimum step seconds, and a per-phase split of the median step.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "core/allocator.h"
#include "nn/unet3d.h"
#include "ops/common.h"
#include "ops/ops.h"
#include "optim/adamw.h"

using namespace halfgrad;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"halfgrad U-Net training step on the CPU"};
  int64_t width = 8, batch = 4, steps = 5;
  std::vector<int64_t> shape{32, 48, 32};
  bool use_amp = false;
  app.add_option("--width", width, "channels of the first level (reference: 16)");
  app.add_option("--batch", batch);
  app.add_option("--shape", shape, "D H W")->expected(3);
  app.add_option("--steps", steps, "timed steps (after one warm-up step)");
  app.add_flag("--amp", use_amp, "autocast + GradScaler");
  CLI11_PARSE(app, argc, argv);

  manual_seed(0);
  auto model = std::make_shared<nn::UNet3d>(
      nn::UNet3dOptions().channels({width, 2 * width, 4 * width, 8 * width}).bottleneck(16 * width));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(1e-3));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(use_amp));
  Generator gen(0);
  Tensor x = Tensor::randn({batch, 1, shape[0], shape[1], shape[2]}, gen);
  std::vector<int64_t> labels(batch * shape[0] * shape[1] * shape[2]);
  for (auto& l : labels) l = gen.randint(3);
  Tensor y = Tensor::from_labels(labels, {batch, shape[0], shape[1], shape[2]});

  struct Times { double fwd, bwd, opt, total; };
  auto step = [&]() {
    const auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(use_amp);
      loss = ops::segmentation_loss(model->forward(x), y);
    }
    const auto t1 = Clock::now();
    scaler.scale(loss).backward();
    const auto t2 = Clock::now();
    scaler.step(opt);
    scaler.update();
    const auto t3 = Clock::now();
    auto s = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    return Times{s(t0, t1), s(t1, t2), s(t2, t3), s(t0, t3)};
  };
  step();
  std::vector<Times> ts;
  for (int64_t i = 0; i < steps; ++i) ts.push_back(step());
  std::sort(ts.begin(), ts.end(), [](const Times& a, const Times& b) { return a.total < b.total; });
  const Times& med = ts[ts.size() / 2];
  nlohmann::json out = {{"impl", "halfgrad"},          {"width", width},
                        {"batch", batch},              {"shape", shape},
                        {"amp", use_amp},              {"threads", ops::num_threads()},
                        {"median_s", med.total},       {"min_s", ts.front().total},
                        {"forward_s", med.fwd},        {"backward_s", med.bwd},
                        {"optimizer_s", med.opt},
                        {"peak_MiB", cpu_allocator_stats().peak_allocated_bytes / 1048576.0}};
  std::cout << out.dump() << std::endl;
  return 0;
}
