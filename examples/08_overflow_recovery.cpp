// 08_overflow_recovery - what GradScaler does when gradients overflow FP16: the step is skipped, the
// scale backs off, and training continues.
//
//   build/examples/08_overflow_recovery
//
// An O1 run (autocast: convs in FP16; FP32 weights) of a small U-Net on spheres, with two overflows:
//   1. the scale starts at 2^24 instead of 2^16: some scaled FP16 gradient S * dL/dy in the backward
//      exceeds 65504, the parameter gradients hold inf or NaN, scaler.step() skips AdamW and update()
//      halves S, step after step, until the scaled gradients fit;
//   2. at kSpikeStep one batch is multiplied by 1e5 (a volume read without intensity normalisation):
//      autocast casts it to FP16 for the first conv, values beyond 65504 become inf, the loss is NaN,
//      and that step is skipped too (the scale halves once more, and grows back after
//      growth_interval clean steps; 2000 by default, so not within this run).
// Every step prints: the scale used, whether the step was skipped, the loss, and how many gradient
// elements were inf/NaN (amp/grad_stats.h). Run time: about a second on 2 CPU cores.
#include <cmath>
#include <cstdio>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/grad_stats.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "sphere_data.h"

using namespace halfgrad;

constexpr int kSteps = 24;
constexpr int kSpikeStep = 16;
constexpr double kSpike = 1e5;

int main() {
  manual_seed(0);
  Generator gen(0);
  auto model = std::make_shared<nn::UNet3d>(nn::UNet3dOptions().num_classes(2).channels({8, 16}).bottleneck(32));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(3e-3));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(16777216.0));  // 2^24
  std::printf("O1, U-Net {8,16}, 4x1x16^3 spheres, GradScaler init_scale 2^24, batch x%.0e at step %d\n\n", kSpike,
              kSpikeStep);
  std::printf("step  scale      skipped  loss        inf/NaN grads\n");
  int skipped_total = 0;
  for (int step = 1; step <= kSteps; ++step) {
    Tensor x, y;
    examples::sphere_batch(gen, 4, 16, x, y);
    if (step == kSpikeStep) x = x * kSpike;
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast;
      loss = ops::segmentation_loss((*model)(x), y);
    }
    const double scale_used = scaler.get_scale();
    scaler.scale(loss).backward();
    const amp::GradStats all = amp::collect_grad_stats(model->named_parameters(), scale_used).back();
    const bool stepped = scaler.step(opt);
    scaler.update();
    skipped_total += !stepped;
    std::printf("%4d  %-9.0f  %-7s  %-10.4f  %lld of %lld%s\n", step, scale_used, stepped ? "no" : "yes", loss.item(),
                static_cast<long long>(all.nonfinite), static_cast<long long>(all.numel),
                step == kSpikeStep ? "   <- spiked batch" : "");
  }
  std::printf("\n%d of %d steps skipped; scale now %g\n", skipped_total, kSteps, scaler.get_scale());
  return 0;
}
