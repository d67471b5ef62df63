// Tests of examples/05_unet3d/memory_estimate.h: the estimate against the peak of the CPU tensor
// allocator (core/allocator.h) measured over the steps halfgrad-unet3d train runs - two training steps
// (the optimizer state exists from the first; the second is the steady state) and a validation
// forward - for several widths, shapes, batches and opt levels. The estimate must be an upper bound
// within 1.5x of the measured peak.
#include "examples/05_unet3d/memory_estimate.h"

#include <doctest/doctest.h>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "tests/check_error.h"

using namespace halfgrad;
using unet3d_app::MemoryEstimate;

namespace {

struct Config {
  const char* name;
  nn::UNet3dOptions model;
  std::array<int64_t, 3> shape;
  int64_t batch;
  amp::OptLevel level;
};

// The peak bytes of tensors allocated by one run of `c` (model, optimizer, two steps, a forward),
// above what was live before; the same calls as Trainer::step() and validate() (trainer.cpp).
uint64_t measured_peak(const Config& c) {
  const uint64_t before = cpu_allocator_stats().allocated_bytes;
  cpu_reset_peak_stats();
  {
    Generator gen(7);
    auto model = std::make_shared<nn::UNet3d>(c.model, gen);
    optim::AdamWOptions adamw = optim::AdamWOptions().lr(1e-3).weight_decay(1e-2);
    amp::GradScalerOptions so;
    const amp::OptLevelSetup mp = amp::apply_opt_level(c.level, *model, adamw, so);
    optim::AdamW opt(model->parameters(), adamw);
    amp::GradScaler scaler(so);
    const auto [d, h, w] = c.shape;
    for (int step = 0; step < 2; ++step) {
      Tensor x = Tensor::randn({c.batch, 1, d, h, w}, gen);
      std::vector<int64_t> lab(static_cast<size_t>(c.batch * d * h * w));
      for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<int64_t>(i * 7 % 13 % c.model.num_classes());
      Tensor y = Tensor::from_labels(lab, {c.batch, d, h, w});
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard autocast(mp.autocast);
        loss = ops::segmentation_loss((*model)(mp.cast_input(x)).to(kFloat32), y);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    }
    model->eval();
    NoGradGuard no_grad;
    amp::AutocastGuard autocast(mp.autocast);
    Tensor v = Tensor::randn({1, 1, d, h, w}, gen);
    Tensor pred = ops::argmax((*model)(mp.cast_input(v)), 1);
    CHECK(pred.numel() == d * h * w);
  }
  return cpu_allocator_stats().peak_allocated_bytes - before;
}

}  // namespace

TEST_CASE("memory estimate: unet3d train, O0-O3, 32^3..32x48x32, batch 1-4: upper bound within 1.5x") {
  const nn::UNet3dOptions narrow = nn::UNet3dOptions().channels({4, 8, 16, 32}).bottleneck(64).num_classes(3);
  const nn::UNet3dOptions cpu = nn::UNet3dOptions().channels({12, 24, 48, 96}).bottleneck(192).num_classes(8);
  const std::vector<Config> configs = {
      {"narrow 32^3 batch 2 O0", narrow, {32, 32, 32}, 2, amp::OptLevel::O0},
      {"narrow 32^3 batch 2 O1", narrow, {32, 32, 32}, 2, amp::OptLevel::O1},
      {"narrow 32^3 batch 2 O2", narrow, {32, 32, 32}, 2, amp::OptLevel::O2},
      {"narrow 32^3 batch 2 O3", narrow, {32, 32, 32}, 2, amp::OptLevel::O3},
      {"narrow 16x32x48 batch 4 O0", narrow, {16, 32, 48}, 4, amp::OptLevel::O0},
      {"cpu recipe 32x48x32 batch 1 O0", cpu, {32, 48, 32}, 1, amp::OptLevel::O0},
      {"cpu recipe 32x48x32 batch 2 O1", cpu, {32, 48, 32}, 2, amp::OptLevel::O1},
      {"cpu recipe 32^3 batch 1 O3", cpu, {32, 32, 32}, 1, amp::OptLevel::O3},
  };
  for (const Config& c : configs) {
    const int64_t params = nn::UNet3d(c.model).num_parameters();
    const MemoryEstimate e = unet3d_app::estimate_train_memory(c.model, params, c.shape, c.batch, c.shape, c.level,
                                                               /*on_cuda=*/true);  // no checkpoint term
    const uint64_t peak = measured_peak(c);
    const double ratio = static_cast<double>(e.total()) / static_cast<double>(peak);
    MESSAGE(std::string(c.name) << ": measured peak " << peak << " B, estimate " << e.total() << " B (" << e.describe()
                   << "), ratio " << ratio);
    CHECK_MESSAGE(ratio >= 1.0, std::string(c.name) << ": the estimate is below the measured peak");
    CHECK_MESSAGE(ratio <= 1.5, std::string(c.name) << ": the estimate is more than 1.5x the measured peak");
  }
}

TEST_CASE("memory estimate: unet3d eval forward, float32/float16 weights, 32x48x32 and 48x64x48: upper bound within 1.5x") {
  const nn::UNet3dOptions cpu = nn::UNet3dOptions().channels({12, 24, 48, 96}).bottleneck(192).num_classes(3);
  struct EvalConfig {
    std::array<int64_t, 3> shape;
    amp::OptLevel level;
  };
  for (const EvalConfig& c : {EvalConfig{{32, 48, 32}, amp::OptLevel::O0}, EvalConfig{{48, 64, 48}, amp::OptLevel::O0},
                              EvalConfig{{48, 64, 48}, amp::OptLevel::O1}, EvalConfig{{48, 64, 48}, amp::OptLevel::O2},
                              EvalConfig{{48, 64, 48}, amp::OptLevel::O3}}) {
    const uint64_t before = cpu_allocator_stats().allocated_bytes;
    cpu_reset_peak_stats();
    int64_t params = 0;
    {
      nn::UNet3d model(cpu);
      params = model.num_parameters();
      const amp::OptLevelSetup mp = amp::apply_opt_level_to_model(c.level, model);
      model.eval();
      NoGradGuard no_grad;
      amp::AutocastGuard autocast(mp.autocast);
      Generator gen(3);
      Tensor x = Tensor::randn({1, 1, c.shape[0], c.shape[1], c.shape[2]}, gen);
      Tensor pred = ops::argmax(model(mp.cast_input(x)), 1);
      CHECK(pred.numel() == c.shape[0] * c.shape[1] * c.shape[2]);
    }
    const uint64_t peak = cpu_allocator_stats().peak_allocated_bytes - before;
    const MemoryEstimate e = unet3d_app::estimate_eval_memory(cpu, params, c.shape, c.level);
    const double ratio = static_cast<double>(e.total()) / static_cast<double>(peak);
    MESSAGE("eval " << c.shape[0] << "x" << c.shape[1] << "x" << c.shape[2] << " "
                    << std::string(amp::opt_level_name(c.level))
                    << ": measured peak " << peak << " B, estimate " << e.total() << " B, ratio " << ratio);
    CHECK(ratio >= 1.0);
    CHECK(ratio <= 1.5);
  }
}

TEST_CASE("memory estimate: a 256^3 volume and batch 100000 are refused with the figures") {
  const nn::UNet3dOptions cpu = nn::UNet3dOptions().channels({12, 24, 48, 96}).bottleneck(192).num_classes(3);
  const int64_t params = nn::UNet3d(cpu).num_parameters();
  // A header claiming 256^3 voxels: the forward alone needs gigabytes (the issue measured 8.4 GB).
  const MemoryEstimate eval = unet3d_app::estimate_eval_memory(cpu, params, {256, 256, 256}, amp::OptLevel::O0);
  CHECK(eval.total() > (uint64_t{5} << 30));
  MESSAGE("eval of 256^3, cpu-recipe widths: estimate " << eval.describe() << "; reference widths: "
          << unet3d_app::estimate_eval_memory(nn::UNet3dOptions(), nn::UNet3d(nn::UNet3dOptions()).num_parameters(),
                                              {256, 256, 256}, amp::OptLevel::O0)
                 .describe());
  halfgrad::testing::check_error(
      [&] {
        unet3d_app::check_memory(eval, unet3d_app::MemoryAvailable{uint64_t{4} << 30, "MemAvailable in /proc/meminfo"},
                                 "eval", "cpu", "the volumes are padded to (256, 256, 256)");
      },
      {"halfgrad-unet3d eval: this run needs about", "forward of 256x256x256", "but the CPU has 4.0 GiB available",
       "MemAvailable in /proc/meminfo", "padded to (256, 256, 256)", "--no-memory-check"});
  // --batch 100000 of the cpu recipe's 32x48x32 patches: terabytes.
  const MemoryEstimate train = unet3d_app::estimate_train_memory(cpu, params, {32, 48, 32}, 100000, {48, 64, 48},
                                                                 amp::OptLevel::O1, false);
  CHECK(train.training_step > (uint64_t{1} << 40));
  halfgrad::testing::check_error(
      [&] {
        unet3d_app::check_memory(train, unet3d_app::MemoryAvailable{uint64_t{16} << 30, "cudaMemGetInfo"}, "train",
                                 "cuda", "lower --batch (now 100000)");
      },
      {"halfgrad-unet3d train: this run needs about", "TiB", "training step of batch 100000 at 32x48x32",
       "but the GPU has 16.0 GiB available", "lower --batch (now 100000)"});
  // What the machine running the tests has is found and named.
  const unet3d_app::MemoryAvailable here = unet3d_app::available_memory("cpu");
  CHECK(here.bytes > 0);
  CHECK(!here.source.empty());
  halfgrad::testing::check_error([] { unet3d_app::available_memory("tpu"); }, {"available_memory", "'tpu'"});
}
