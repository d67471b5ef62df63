// 07_loss_scaling - why FP16 training needs a loss scale: the same O2 run (FP16 weights and
// gradients, FP32 master weights) without and with GradScaler, side by side.
//
//   build/examples/07_loss_scaling
//
// The loss is the usual segmentation loss (cross-entropy + soft Dice) times kLossWeight = 1e-4, as a
// loss that is one small term of a weighted sum, or a mean over 10^4 times more voxels, would be.
// Its gradient reaching each FP16 logit is then at most about 1e-4 / 8192 voxels ~ 1.2e-8, below
// 2^-25 ~ 3e-8 (at or below which FP16 rounds to 0), so under O2 every gradient of the model flushes
// to zero and AdamW sees zeros: the curve stalls. GradScaler multiplies the loss by S = 2^16 before
// backward, lifts the same gradients into FP16's range, and divides by S again in FP32
// (fp16_grads_to_fp32) before AdamW.
//
// The columns, per step, measured after backward (amp/grad_stats.h):
//   zero     fraction of gradient elements that are exactly 0 in the stored gradients
//   lost@1   fraction of the true gradients (g = grad / S) that would round to 0 in FP16 unscaled,
//            i.e. what the scale rescues (only measurable in the scaled run: without a scale the
//            stored gradient is already 0, and grad_stats counts it as a zero, not an underflow)
//   lost@S   fraction that still rounds to 0 at the current scale S
// Run time: a few seconds on 2 CPU cores.
#include <cstdio>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/grad_stats.h"
#include "amp/opt_level.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "sphere_data.h"

using namespace halfgrad;

constexpr double kLossWeight = 1e-4;
constexpr int kSteps = 40;
constexpr int64_t kBatch = 2, kSide = 16;

struct StepLog {
  double loss = 0;       // unweighted segmentation loss
  double zero = 0;       // fraction of stored gradient elements equal to 0
  double lost_at_1 = 0;  // fraction of nonzero true gradients lost in FP16 without scaling
  double lost_at_s = 0;  // ... lost at the scale used
  double scale = 1;
};

static std::vector<StepLog> train(bool loss_scaling) {
  manual_seed(0);
  Generator gen(0);  // the same batches for both runs
  auto model = std::make_shared<nn::UNet3d>(nn::UNet3dOptions().num_classes(2).channels({8, 16}).bottleneck(32));
  optim::AdamWOptions adamw = optim::AdamWOptions().lr(3e-3);
  amp::GradScalerOptions so;
  const amp::OptLevelSetup mp = amp::apply_opt_level(amp::OptLevel::O2, *model, adamw, so);
  so.enabled(loss_scaling);  // O2 with the scaler off: FP16 gradients go to AdamW as they are
  optim::AdamW opt(model->parameters(), adamw);
  amp::GradScaler scaler(so);
  std::vector<StepLog> log;
  for (int step = 1; step <= kSteps; ++step) {
    Tensor x, y;
    examples::sphere_batch(gen, kBatch, kSide, x, y);
    opt.zero_grad();
    const Tensor seg = ops::segmentation_loss((*model)(mp.cast_input(x)).to(kFloat32), y);
    scaler.scale(seg * kLossWeight).backward();
    const amp::GradStats all = amp::collect_grad_stats(model->named_parameters(), scaler.get_scale()).back();
    StepLog s;
    s.loss = seg.item();
    s.zero = all.fraction(all.zeros);
    s.lost_at_1 = all.fraction(all.fp16_underflow);
    s.lost_at_s = all.fraction(all.scaled_underflow);
    s.scale = scaler.get_scale();
    scaler.step(opt);
    scaler.update();
    log.push_back(s);
  }
  return log;
}

int main() {
  std::printf("O2 (FP16 weights and gradients, FP32 master weights), U-Net {8,16}, %lldx1x%lld^3 spheres,\n"
              "loss = %g * (cross-entropy + soft Dice); the loss printed is the unweighted one\n\n",
              static_cast<long long>(kBatch), static_cast<long long>(kSide), kLossWeight);
  const std::vector<StepLog> off = train(false);
  const std::vector<StepLog> on = train(true);
  std::printf("      | without loss scaling |        with GradScaler\n");
  std::printf("step  |   loss    zero       |   loss    scale   zero     lost@1   lost@S\n");
  for (int i = 0; i < kSteps; ++i) {
    if (i >= 4 && (i + 1) % 4 != 0) continue;
    std::printf("%4d  | %7.4f  %6.1f%%      | %7.4f  %6g  %6.1f%%  %6.1f%%  %6.1f%%\n", i + 1, off[i].loss,
                100 * off[i].zero, on[i].loss, on[i].scale, 100 * on[i].zero, 100 * on[i].lost_at_1,
                100 * on[i].lost_at_s);
  }
  auto mean_last = [](const std::vector<StepLog>& l) {
    double s = 0;
    for (int i = kSteps - 5; i < kSteps; ++i) s += l[i].loss;
    return s / 5;
  };
  std::printf("\nmean loss of the last 5 steps: %.4f without loss scaling, %.4f with GradScaler (step 1: %.4f)\n",
              mean_last(off), mean_last(on), off[0].loss);
  return 0;
}
