// 14_equal_memory - the claim mixed precision is sold on, measured: give FP32 and AMP the same GPU
// memory budget, let each take the largest batch that fits, and compare what they do with it.
//
//   build/examples/14_equal_memory [--data DIR] [--budget-mib 2048] [--epochs 20] [--max-batch 128]
//                                  [--seed 0] [--out DIR] [--overwrite]
//
// The budget is enforced by the CUDA caching allocator itself (cuda::set_memory_limit,
// core/cuda/runtime.h) over everything halfgrad holds on the device: the eager cache, the private
// pool of the training step's CUDA graph and the loader's device buffers. A request that would take
// that past the budget is refused with an out-of-memory halfgrad::Error, exactly as if the GPU were
// that small. For each of FP32 (O0), AMP with FP16 (O1: autocast + GradScaler) and AMP with BF16 (O1,
// no GradScaler), under that budget, in one process, one after the other:
//   1. the largest batch that halfgrad-unet3d's training runs at (`train --config reference --device
//      cuda`: loader, CUDA-graph step, AdamW, validation with sliding windows, checkpoint) for one
//      epoch: batches 1, 2, 4, ... until one runs out of memory, then bisection. The trainer itself is
//      the probe, so the batch found is one the training below can use; each trial runs in a fresh
//      process (this program with --probe MODE --probe-batch B, exit 0 or 3), so a trial that ran out
//      of memory leaves nothing behind for the next;
//   2. the step time at that batch (median of 10 eager steps of the reference U-Net after 3 warm-up
//      steps, on random 48x64x48 volumes in channels-last layout), as images per second;
//   3. the training with that batch for --epochs epochs on --data (the hippocampus set of
//      ../shared/data/hippocampus by default; the embedded mricron volume when it is absent): mean
//      epoch time and the validation Dice of the last epoch, from the run's metrics.csv; and the peak
//      of everything reserved under the budget.
// After each run the budget must be empty again (the graph's pool and the buffers released with the
// run); what is left is printed (LEFT OVER: bytes and live blocks) and makes the exit status 1.
// Printed side by side with the AMP / FP32 ratios. The recipe's learning rate is kept for both, so a
// larger batch also means fewer optimizer steps per epoch: the Dice column says what that costs after
// a fixed number of epochs (the honest other half of "bigger batch, shorter epoch").
//
// Needs a CUDA GPU: without one it prints why and exits 77 (CTest's "skipped"). Exit status 1 when a
// measurement contradicts the story it tells (AMP fits a smaller batch than FP32, or its step is
// slower per image) or a run left memory under the budget; 2 on an error (named), --out existing without --overwrite included; a bad
// option exits with CLI11's code.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda/runtime.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "05_unet3d/distributed.h"
#include "unet3d/recipe.h"
#include "05_unet3d/train.h"

using namespace halfgrad;
using Clock = std::chrono::steady_clock;

namespace {

struct Mode {
  const char* name;
  const char* folder;  // under --out
  bool amp;
  const char* amp_dtype;
};

const Mode kModeList[] = {{"FP32 (O0)", "fp32", false, "fp16"},
                          {"AMP FP16 (O1)", "fp16", true, "fp16"},
                          {"AMP BF16 (O1)", "bf16", true, "bf16"}};

// std::cout into nothing while the trainer probes a batch (its log would be pages of trials).
struct QuietCout {
  std::ostringstream sink;
  std::streambuf* old = std::cout.rdbuf(sink.rdbuf());
  ~QuietCout() { std::cout.rdbuf(old); }
};

/// The budget must be empty between runs: a graph pool or a buffer that outlived its run would
/// shrink the next one's budget (the failure this example once had). What is left is said, with the
/// number of live blocks, and counted: the program then exits 1 at the end (its figures were taken
/// under a smaller budget than it claims).
int g_leaks = 0;
bool check_budget_empty(const std::string& after) {
  cuda::synchronize("14_equal_memory");
  cuda::empty_cache();
  const cuda::AllocatorStats s = cuda::allocator_stats();
  if (s.budget_reserved_bytes == 0) return true;
  ++g_leaks;
  std::printf("  LEFT OVER after %s: %zu bytes reserved under the budget: %zu allocated in %zu live eager blocks, "
              "%zu in device buffers, the rest in graph pools\n",
              after.c_str(), s.budget_reserved_bytes, s.allocated_bytes, s.active_blocks, s.budget_external_bytes);
  std::fflush(stdout);
  return false;
}

/// Runs `steps` training steps of the reference U-Net at batch B; returns the median step time in
/// ms (0 when steps is 0 beyond the warm-up). Throws what the step throws (out of memory included).
double time_steps(const unet3d_app::Recipe& r, bool amp, Dtype lower, int64_t B, int64_t warm, int64_t steps,
                  uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::UNet3d>(r.model);
  model->to(Device::CUDA);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(r.lr).weight_decay(r.weight_decay));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(amp && lower == kFloat16));  // BF16 needs none
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
      amp::AutocastGuard ac(amp::AutocastOptions().enabled(amp).dtype(lower));
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

/// The trainer's options for `mode` at batch B, `epochs` epochs, validating after the last.
unet3d_app::TrainArgs train_args(const Mode& mode, const std::string& data, const std::string& out, int64_t B,
                                 int64_t epochs, uint64_t seed) {
  unet3d_app::TrainArgs a;
  a.data = data;
  a.out = out;
  a.overwrite = true;  // the folder is this program's own (--out was checked at start)
  a.config = "reference";
  a.device = "cuda";
  a.epochs = epochs;
  a.batch = B;
  a.amp = mode.amp;
  a.amp_dtype = mode.amp_dtype;
  a.seed = seed;
  a.val_every = epochs;  // validate once, after the last epoch
  a.progress = false;
  a.memory_check = false;  // the budget itself is the check
  a.given = {"--data", "--out", "--overwrite", "--config", "--device", "--epochs", "--batch", "--seed", "--val-every"};
  if (a.amp) a.given.insert(a.given.end(), {"--amp", "--amp-dtype"});
  return a;
}

/// Exit statuses of a probe (`--probe`, below): the trainer ran its epoch, or the budget refused a
/// request; anything else is an error the probe printed.
constexpr int kProbeFits = 0, kProbeOutOfMemory = 3;

/// The probe itself, in a child process: one epoch of the trainer (with validation and a checkpoint)
/// at batch B under the budget. Returns the exit status.
int probe(const Mode& mode, const std::string& data, const std::string& out, int64_t B, uint64_t seed,
          size_t budget) {
  cuda::set_memory_limit(budget);
  try {
    const QuietCout quiet;
    const int rc = unet3d_app::run_train(train_args(mode, data, out, B, 1, seed), unet3d_app::RankContext{});
    HG_CHECK(rc == 0, "14_equal_memory: the trainer returned " << rc << " at batch " << B);
  } catch (const Error& e) {
    if (cuda::allocator_stats().budget_ooms > 0) return kProbeOutOfMemory;
    std::fprintf(stderr, "14_equal_memory --probe: %s\n", e.what());
    return 2;
  }
  return kProbeFits;
}

/// Whether the trainer runs one epoch at batch B within the budget, asked of a fresh process (this
/// program with --probe): each trial starts from nothing reserved, and a trial that runs out of memory
/// cannot leave anything behind for the next (under AMP it does: the closing note of issue 30).
bool fits(const Mode& mode, const std::string& data, const std::string& out, int64_t B, uint64_t seed,
          double budget_mib) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {self,           "--probe",      mode.folder, "--probe-batch", std::to_string(B),
                                   "--data",       data.empty() ? std::string("-") : data,
                                   "--out",        out,            "--seed",    std::to_string(seed),
                                   "--budget-mib", std::to_string(budget_mib), "--overwrite"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  HG_CHECK(::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) == 0,
           "14_equal_memory: cannot start the probe " << self << " (" << std::strerror(errno) << ")");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    HG_CHECK(errno == EINTR, "14_equal_memory: waiting for the probe failed (" << std::strerror(errno) << ")");
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  HG_CHECK(rc == kProbeFits || rc == kProbeOutOfMemory,
           "14_equal_memory: the probe of " << mode.name << " at batch " << B << " failed with status " << rc
                                            << " (its message is above)");
  return rc == kProbeFits;
}

/// The largest batch in [1, cap] that fits: doubling, then bisection. 0 when batch 1 does not fit.
int64_t largest_batch(const Mode& mode, const std::string& data, const std::string& out, uint64_t seed,
                      int64_t cap, double budget_mib) {
  const auto ok = [&](int64_t B) {
    const bool f = fits(mode, data, out, B, seed, budget_mib);
    std::printf("  %s: batch %lld %s\n", mode.name, static_cast<long long>(B), f ? "fits" : "runs out of memory");
    std::fflush(stdout);
    return f;
  };
  if (!ok(1)) return 0;
  int64_t lo = 1, hi = 0;  // lo fits; hi, once found, does not
  while (hi == 0) {
    if (lo == cap) return lo;
    const int64_t next = std::min(2 * lo, cap);
    (ok(next) ? lo : hi) = next;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (ok(mid) ? lo : hi) = mid;
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
  int64_t batch = 0;  // the largest the trainer runs at
  double peak_mib = 0, step_ms = 0, images_per_s = 0;
  EpochSummary train;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"14_equal_memory: FP32 and AMP under the same GPU memory budget"};
  std::string data = "../shared/data/hippocampus", out = "14_equal_memory_runs";
  double budget_mib = 2048;
  int64_t epochs = 20, max_batch = 128;
  uint64_t seed = 0;
  bool overwrite = false;
  app.add_option("--data", data, "MSD task folder (imagesTr/, labelsTr/, dataset.json); absent = embedded default");
  app.add_option("--budget-mib", budget_mib, "GPU memory budget, MiB, enforced by the allocator")->check(CLI::Range(64.0, 1e7));
  app.add_option("--epochs", epochs, "training epochs per precision")->check(CLI::Range(int64_t{2}, int64_t{1000}));
  app.add_option("--max-batch", max_batch, "the largest batch the search tries")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--seed", seed, "seed of the weights, the data order and the step timing's inputs");
  app.add_option("--out", out, "folder for the runs (search/, fp32/, fp16/, bf16/)");
  app.add_flag("--overwrite", overwrite, "replace --out when it exists (refused otherwise)");
  std::string probe_mode;
  int64_t probe_batch = 0;
  app.add_option("--probe", probe_mode, "internal: run one search trial (fp32, fp16 or bf16) in this process and exit "
                                        "0 (fits) or 3 (out of memory)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--probe-batch", probe_batch, "internal: the batch of --probe")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  CLI11_PARSE(app, argc, argv);

  if (!cuda::is_available()) {
    std::printf("14_equal_memory: skipped: needs a CUDA GPU (%s)\n", cuda::device_description().c_str());
    return 77;
  }
  try {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!probe_mode.empty()) {  // a child of the search (fits): one trial, answered by the exit status
      for (const Mode& m : kModeList)
        if (probe_mode == m.folder)
          return probe(m, data == "-" ? std::string() : data, out, probe_batch, seed,
                       static_cast<size_t>(budget_mib * 1048576.0));
    }
    HG_CHECK(overwrite || !fs::exists(out, ec),
             "14_equal_memory: --out " << out << " exists; pass --overwrite to replace its runs, or choose another folder");
    if (!fs::is_directory(data)) {
      std::printf("%s is absent: training on the embedded default volume instead (Dice is then on its own data)\n",
                  data.c_str());
      data.clear();
    }
    const unet3d_app::Recipe r = unet3d_app::recipe_by_name("reference");
    const size_t budget = static_cast<size_t>(budget_mib * 1048576.0);
    const Mode* modes = kModeList;
    constexpr int kModes = 3;
    std::printf("device: %s\nbudget: %.0f MiB, enforced by cuda::set_memory_limit over the eager cache, the CUDA graph's "
                "pool and the loader's buffers\n",
                cuda::device_description().c_str(), budget_mib);
    Row rows[kModes];
    check_budget_empty("start");
    g_leaks = 0;
    cuda::set_memory_limit(budget);
    for (int m = 0; m < kModes; ++m) {
      const Mode& mode = modes[m];
      Row& row = rows[m];
      std::printf("%s: searching the largest batch the trainer runs an epoch at...\n", mode.name);
      std::fflush(stdout);
      row.batch = largest_batch(mode, data, (fs::path(out) / "search").string(), seed, max_batch, budget_mib);
      if (row.batch == 0) {
        std::printf("%s: batch 1 does not fit in %.0f MiB\n", mode.name, budget_mib);
        continue;
      }
      row.step_ms = time_steps(r, mode.amp, std::string(mode.amp_dtype) == "bf16" ? kBFloat16 : kFloat16, row.batch,
                               3, 10, seed);
      row.images_per_s = row.batch / (row.step_ms / 1e3);
      check_budget_empty("the step timing");
      std::printf("%s: largest batch %lld, %.2f ms a step, %.1f images/s; training %lld epochs...\n", mode.name,
                  static_cast<long long>(row.batch), row.step_ms, row.images_per_s, static_cast<long long>(epochs));
      std::fflush(stdout);
      cuda::reset_peak_stats();
      const unet3d_app::TrainArgs a =
          train_args(mode, data, (fs::path(out) / mode.folder).string(), row.batch, epochs, seed);
      if (unet3d_app::run_train(a, unet3d_app::RankContext{}) != 0) {
        std::fprintf(stderr, "14_equal_memory: training %s failed (see above)\n", mode.name);
        return 2;
      }
      row.peak_mib = cuda::allocator_stats().budget_peak_reserved_bytes / 1048576.0;
      row.train = read_metrics((fs::path(a.out) / "metrics.csv").string());
      check_budget_empty(mode.name);
    }
    cuda::set_memory_limit(0);

    std::printf("\n| under %.0f MiB | largest batch | peak reserved MiB (all pools) | step ms | images/s | epoch s | "
                "Dice after %lld epochs |\n",
                budget_mib, static_cast<long long>(epochs));
    std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (int m = 0; m < kModes; ++m)
      std::printf("| %s | %lld | %.0f | %.2f | %.1f | %.2f | %.4f |\n", modes[m].name,
                  static_cast<long long>(rows[m].batch), rows[m].peak_mib, rows[m].step_ms, rows[m].images_per_s,
                  rows[m].train.mean_epoch_s, rows[m].train.last_mean_dice);
    bool story_holds = rows[0].batch > 0;
    for (int m = 1; m < kModes; ++m) {
      if (rows[m].batch == 0 || rows[0].batch == 0) {
        story_holds = false;
        continue;
      }
      std::printf("| %s / FP32 | %.2fx | | | %.2fx | %.2fx | %+.4f |\n", modes[m].name,
                  static_cast<double>(rows[m].batch) / rows[0].batch, rows[m].images_per_s / rows[0].images_per_s,
                  rows[m].train.mean_epoch_s / rows[0].train.mean_epoch_s,
                  rows[m].train.last_mean_dice - rows[0].train.last_mean_dice);
      story_holds = story_holds && rows[m].batch >= rows[0].batch && rows[m].images_per_s > rows[0].images_per_s;
    }
    if (!story_holds) std::printf("\nThe measurement contradicts the claim: AMP did not fit more or run faster.\n");
    if (g_leaks > 0)
      std::printf("\n%d run(s) left memory reserved under the budget (LEFT OVER above): later runs had less than %.0f MiB.\n",
                  g_leaks, budget_mib);
    return story_holds && g_leaks == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "14_equal_memory: %s\n", e.what());
    return 2;
  }
}
