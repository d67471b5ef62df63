// 14_equal_memory - the claim mixed precision is sold on, measured: give FP32 and AMP the same GPU
// memory budget, let each take the largest batch that fits, and compare what they do with it.
//
//   build/examples/14_equal_memory [--data DIR] [--budget-mib 2048] [--epochs 20] [--seed 0] [--out DIR]
//
// The budget is enforced by the CUDA caching allocator itself (cuda::set_memory_limit,
// core/cuda/runtime.h): a request that would take the memory it has reserved from the driver past
// the budget is refused with an out-of-memory halfgrad::Error, exactly as if the GPU were that small.
// For each of FP32 (O0) and AMP (O1: FP16 autocast + GradScaler), under that budget:
//   1. the largest batch a full training step of the reference U-Net fits in (forward, cross-entropy +
//      soft Dice, backward, AdamW with its state, GradScaler update), on the reference recipe's
//      48x64x48 volumes in channels-last layout: batches 1, 2, 4, ... until one fails, then bisection;
//   2. the step time at that batch (median of 10 steps after 3 warm-up steps), as images per second;
//   3. halfgrad-unet3d's training (`train --config reference --device cuda`) with that batch for
//      --epochs epochs on --data (the hippocampus set of ../shared/data/hippocampus by default; the
//      embedded mricron volume when it is absent): mean epoch time and the validation Dice of the
//      last epoch, read from the run's metrics.csv.
// Printed side by side with the AMP / FP32 ratios. The recipe's learning rate is kept for both, so a
// larger batch also means fewer optimizer steps per epoch: the Dice column says what that costs after
// a fixed number of epochs (the honest other half of "bigger batch, shorter epoch").
//
// Needs a CUDA GPU: without one it prints why and exits 77 (CTest's "skipped"). Exit status 1 when a
// measurement contradicts the story it tells (AMP fits a smaller batch than FP32, or its step is
// slower per image); 2 on an error (named); a bad option exits with CLI11's code.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda/runtime.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "05_unet3d/distributed.h"
#include "05_unet3d/recipe.h"
#include "05_unet3d/train.h"

using namespace halfgrad;
using Clock = std::chrono::steady_clock;

namespace {

struct Mode {
  const char* name;
  bool amp;
};


/// Runs `steps` training steps of the reference U-Net at batch B; returns the median step time in
/// ms (0 when steps is 0 beyond the warm-up). Throws what the step throws (out of memory included).
double time_steps(const unet3d_app::Recipe& r, bool amp, int64_t B, int64_t warm, int64_t steps, uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::UNet3d>(r.model);
  model->to(Device::CUDA);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(r.lr).weight_decay(r.weight_decay));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(amp));
  Generator gen(seed);
  const auto [D, H, W] = r.volume_shape;
  Tensor x = Tensor::randn({B, 1, D, H, W}, gen).copy_to(Device::CUDA).format_copy(MemoryFormat::ChannelsLast3d);
  std::vector<int64_t> labels(B * D * H * W);
  for (auto& l : labels) l = gen.randint(r.model.num_classes());
  Tensor y = Tensor::from_labels(labels, {B, D, H, W}).copy_to(Device::CUDA);
  auto step = [&]() {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(amp);
      loss = ops::segmentation_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  for (int64_t i = 0; i < warm; ++i) step();
  cuda::synchronize("14_equal_memory");
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    cuda::synchronize("14_equal_memory");
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0 : ms[ms.size() / 2];
}

/// Whether two steps at batch B fit the budget (the second step is the first with AdamW's state).
bool fits(const unet3d_app::Recipe& r, bool amp, int64_t B, uint64_t seed) {
  bool ok = true;
  const size_t ooms = cuda::allocator_stats().ooms;
  try {
    time_steps(r, amp, B, /*warm=*/2, /*steps=*/0, seed);
  } catch (const Error&) {
    if (cuda::allocator_stats().ooms == ooms) throw;  // not the allocator refusing a request: a real error
    ok = false;
  }
  cuda::synchronize("14_equal_memory");
  cuda::empty_cache();  // the next trial starts from nothing reserved, as a fresh process would
  return ok;
}

/// The largest batch in [1, cap] that fits: doubling, then bisection. 0 when batch 1 does not fit.
int64_t largest_batch(const unet3d_app::Recipe& r, bool amp, uint64_t seed, int64_t cap = 512) {
  if (!fits(r, amp, 1, seed)) return 0;
  int64_t lo = 1, hi = 2;  // lo fits; hi is the next candidate
  while (hi <= cap && fits(r, amp, hi, seed)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > cap) return lo;
  while (hi - lo > 1) {  // lo fits, hi does not
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(r, amp, mid, seed) ? lo : hi) = mid;
  }
  return lo;
}

struct EpochSummary {
  double mean_epoch_s = 0;
  double last_mean_dice = 0;
  int64_t epochs = 0;
};

/// Mean epoch_seconds over the epochs after the first (the first pays the warm-up) and the last
/// validated mean_dice, from a metrics.csv (metrics.h's columns).
EpochSummary read_metrics(const std::string& path) {
  std::ifstream f(path);
  HG_CHECK(f.good(), "14_equal_memory: cannot read " << path);
  std::string line;
  std::getline(f, line);
  std::vector<std::string> header;
  {
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) header.push_back(c);
  }
  const auto col = [&](const char* name) {
    const auto it = std::find(header.begin(), header.end(), name);
    HG_CHECK(it != header.end(), "14_equal_memory: " << path << " has no column " << name);
    return static_cast<size_t>(it - header.begin());
  };
  const size_t c_epoch_s = col("epoch_seconds"), c_dice = col("mean_dice");
  EpochSummary s;
  double sum = 0;
  int64_t n = 0;
  while (std::getline(f, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (cells.size() <= std::max(c_epoch_s, c_dice)) continue;
    ++s.epochs;
    if (s.epochs > 1) {
      sum += std::stod(cells[c_epoch_s]);
      ++n;
    }
    if (!cells[c_dice].empty()) s.last_mean_dice = std::stod(cells[c_dice]);
  }
  HG_CHECK(s.epochs > 0, "14_equal_memory: " << path << " has no epoch rows");
  s.mean_epoch_s = n ? sum / n : 0;
  return s;
}

struct Row {
  int64_t batch = 0;
  double peak_mib = 0, step_ms = 0, images_per_s = 0;
  EpochSummary train;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"14_equal_memory: FP32 and AMP under the same GPU memory budget"};
  std::string data = "../shared/data/hippocampus", out = "14_equal_memory_runs";
  double budget_mib = 2048;
  int64_t epochs = 20;
  uint64_t seed = 0;
  app.add_option("--data", data, "MSD task folder (imagesTr/, labelsTr/, dataset.json); absent = embedded default");
  app.add_option("--budget-mib", budget_mib, "GPU memory budget, MiB, enforced by the allocator")->check(CLI::Range(64.0, 1e7));
  app.add_option("--epochs", epochs, "training epochs per precision")->check(CLI::Range(int64_t{2}, int64_t{1000}));
  app.add_option("--seed", seed, "seed of the weights, the data order and the batch search's inputs");
  app.add_option("--out", out, "folder for the two runs (fp32/, amp/); replaced");
  CLI11_PARSE(app, argc, argv);

  if (!cuda::is_available()) {
    std::printf("14_equal_memory: skipped: needs a CUDA GPU (%s)\n", cuda::device_description().c_str());
    return 77;
  }
  try {
    namespace fs = std::filesystem;
    if (!fs::is_directory(data)) {
      std::printf("%s is absent: training on the embedded default volume instead (Dice is then on its own data)\n",
                  data.c_str());
      data.clear();
    }
    const unet3d_app::Recipe r = unet3d_app::recipe_by_name("reference");
    const size_t budget = static_cast<size_t>(budget_mib * 1048576.0);
    std::printf("device: %s\nbudget: %.0f MiB, enforced by cuda::set_memory_limit\n", cuda::device_description().c_str(),
                budget_mib);
    const Mode modes[] = {{"FP32 (O0)", false}, {"AMP (O1)", true}};
    Row rows[2];
    for (int m = 0; m < 2; ++m) {
      cuda::empty_cache();
      cuda::set_memory_limit(budget);
      Row& row = rows[m];
      row.batch = largest_batch(r, modes[m].amp, seed);
      if (row.batch == 0) {
        std::printf("%s: batch 1 does not fit in %.0f MiB\n", modes[m].name, budget_mib);
        continue;
      }
      cuda::reset_peak_stats();
      row.step_ms = time_steps(r, modes[m].amp, row.batch, 3, 10, seed);
      row.peak_mib = cuda::allocator_stats().peak_reserved_bytes / 1048576.0;
      row.images_per_s = row.batch / (row.step_ms / 1e3);
      cuda::empty_cache();
      std::printf("%s: largest batch %lld (peak reserved %.0f MiB), %.2f ms a step, %.1f images/s; training %lld epochs...\n",
                  modes[m].name, static_cast<long long>(row.batch), row.peak_mib, row.step_ms, row.images_per_s,
                  static_cast<long long>(epochs));
      std::fflush(stdout);
      unet3d_app::TrainArgs a;
      a.data = data;
      a.out = (fs::path(out) / (modes[m].amp ? "amp" : "fp32")).string();
      a.overwrite = true;
      a.config = "reference";
      a.device = "cuda";
      a.epochs = epochs;
      a.batch = row.batch;
      a.amp = modes[m].amp;
      a.seed = seed;
      a.val_every = epochs;  // validate once, after the last epoch
      a.progress = false;
      a.memory_check = false;  // the search above is the check, under the budget itself
      a.given = {"--data", "--out", "--overwrite", "--config", "--device", "--epochs", "--batch", "--seed", "--val-every"};
      if (a.amp) a.given.push_back("--amp");
      if (unet3d_app::run_train(a, unet3d_app::RankContext{}) != 0) {
        std::fprintf(stderr, "14_equal_memory: training %s failed (see above)\n", modes[m].name);
        return 2;
      }
      row.train = read_metrics((fs::path(a.out) / "metrics.csv").string());
      cuda::empty_cache();
    }
    cuda::set_memory_limit(0);

    std::printf("\n| under %.0f MiB | largest batch | peak reserved MiB | step ms | images/s | epoch s | Dice after %lld epochs |\n",
                budget_mib, static_cast<long long>(epochs));
    std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (int m = 0; m < 2; ++m)
      std::printf("| %s | %lld | %.0f | %.2f | %.1f | %.2f | %.4f |\n", modes[m].name,
                  static_cast<long long>(rows[m].batch), rows[m].peak_mib, rows[m].step_ms, rows[m].images_per_s,
                  rows[m].train.mean_epoch_s, rows[m].train.last_mean_dice);
    if (rows[0].batch == 0 || rows[1].batch == 0) return 1;
    std::printf("| AMP / FP32 | %.2fx | | | %.2fx | %.2fx | %+.4f |\n",
                static_cast<double>(rows[1].batch) / rows[0].batch, rows[1].images_per_s / rows[0].images_per_s,
                rows[1].train.mean_epoch_s / rows[0].train.mean_epoch_s,
                rows[1].train.last_mean_dice - rows[0].train.last_mean_dice);
    const bool story_holds = rows[1].batch >= rows[0].batch && rows[1].images_per_s > rows[0].images_per_s;
    if (!story_holds) std::printf("\nThe measurement contradicts the claim: AMP did not fit more or run faster.\n");
    return story_holds ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "14_equal_memory: %s\n", e.what());
    return 2;
  }
}
