// 10_opt_levels - apex's four mixed-precision levels (amp/opt_level.h) on the same U-Net training
// step: time per step, peak memory, bytes of parameters and optimizer state, and loss / Dice after a
// short training on spheres.
//
//   OMP_NUM_THREADS=1 build/examples/10_opt_levels [steps]   (default 40 steps per level; ~20 s)
//
// (One thread gives stable times on a machine whose cores other jobs share, see 11_layouts. The
// memory columns do not depend on the thread count; loss and Dice move slightly with it, since the
// order of floating-point sums changes.)
//
// Each level trains the same model (U-Net channels {8, 16}, bottleneck 32, BatchNorm, 2 classes) from
// the same initial weights on the same batches (4 x 1 x 32^3 spheres, AdamW lr 3e-3), prepared by
// amp::apply_opt_level. Measured per level:
//   ms/step       median wall time of one step (forward, backward, GradScaler, AdamW), steps 3..N
//   peak MiB      peak of live bytes handed out by the CPU allocator during a step (core/allocator.h;
//                 cpu_reset_peak_stats() before each step), the largest over the run; it includes
//                 parameters, gradients, optimizer state and the activations kept for backward
//   params        bytes of the model's parameters and buffers
//   opt state     bytes of AdamW's state: moments m and v, plus FP32 master weights for FP16 params
//   loss          mean training loss of the last 5 steps
//   Dice          foreground Dice of the argmax on 8 held-out volumes, eval mode (running BatchNorm stats)
// On the CPU, FP16 is emulated: tensors are stored in FP16 and converted to FP32 for every computation,
// so O1-O3 are *slower* here (the conversions cost time and nothing is gained); their speed gains belong
// to a GPU backend with FP16 Tensor Cores. The memory effects (FP16 activations, FP16 weights, master
// copies) are real.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <omp.h>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/opt_level.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "sphere_data.h"

using namespace halfgrad;

constexpr int64_t kSide = 32;  // volumes of 32^3: activations, not weights, dominate the memory

struct LevelResult {
  double ms_per_step = 0;
  double peak_mib = 0;
  size_t param_bytes = 0, state_bytes = 0;
  double loss = 0, dice = 0;
  int skipped = 0;
};

static LevelResult run_level(amp::OptLevel level, int steps) {
  manual_seed(0);  // the same initial weights for every level
  Generator gen(0);
  auto model = std::make_shared<nn::UNet3d>(nn::UNet3dOptions().num_classes(2).channels({8, 16}).bottleneck(32));
  optim::AdamWOptions adamw = optim::AdamWOptions().lr(3e-3);
  amp::GradScalerOptions so;
  const amp::OptLevelSetup mp = amp::apply_opt_level(level, *model, adamw, so);
  optim::AdamW opt(model->parameters(), adamw);
  amp::GradScaler scaler(so);
  LevelResult r;
  std::vector<double> ms, losses;
  size_t peak = 0;
  for (int step = 1; step <= steps; ++step) {
    Tensor x, y;
    examples::sphere_batch(gen, 4, kSide, x, y);
    cpu_reset_peak_stats();
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor logits;
    {
      amp::AutocastGuard autocast(mp.autocast);
      logits = (*model)(mp.cast_input(x));
    }
    const Tensor loss = ops::segmentation_loss(logits.to(kFloat32), y);
    scaler.scale(loss).backward();
    r.skipped += !scaler.step(opt);
    scaler.update();
    const auto t1 = std::chrono::steady_clock::now();
    peak = std::max(peak, cpu_allocator_stats().peak_allocated_bytes);
    if (step >= 3) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    losses.push_back(loss.item());
  }
  std::sort(ms.begin(), ms.end());
  r.ms_per_step = ms[ms.size() / 2];
  r.peak_mib = peak / 1048576.0;
  for (const Tensor& p : model->parameters()) r.param_bytes += p.nbytes();
  for (const Tensor& b : model->buffers()) r.param_bytes += b.nbytes();
  for (const Tensor& p : model->parameters())
    if (const auto* s = dynamic_cast<const optim::AdamWParamState*>(opt.param_state(p)))
      for (const Tensor* t : {&s->master, &s->exp_avg, &s->exp_avg_sq})
        if (t->defined()) r.state_bytes += t->nbytes();
  for (size_t i = losses.size() - 5; i < losses.size(); ++i) r.loss += losses[i] / 5;
  // Held-out volumes from another seed, in eval mode with the level's forward.
  Generator val_gen(1234);
  Tensor x, y;
  examples::sphere_batch(val_gen, 8, kSide, x, y);
  model->eval();
  autograd::NoGradGuard no_grad;
  amp::AutocastGuard autocast(mp.autocast);
  r.dice = examples::foreground_dice((*model)(mp.cast_input(x)), y);
  return r;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(8, std::atoi(argv[1])) : 40;
  std::printf("U-Net {8,16} bottleneck 32, BatchNorm, batch 4 x 1 x %lld^3 spheres, AdamW lr 3e-3, %d steps per level\n"
              "%d OpenMP thread(s). CPU: FP16 is stored in FP16 and computed in FP32, so times measure the\n"
              "emulation, not a GPU\n\n",
              static_cast<long long>(kSide), steps, omp_get_max_threads());
  std::printf("level  ms/step  peak MiB  params KiB  opt state KiB  skipped  loss(last 5)  Dice(held-out)\n");
  for (amp::OptLevel level : {amp::OptLevel::O0, amp::OptLevel::O1, amp::OptLevel::O2, amp::OptLevel::O3}) {
    const LevelResult r = run_level(level, steps);
    std::printf("%-5s  %7.1f  %8.2f  %10.1f  %13.1f  %7d  %12.4f  %14.3f\n", amp::opt_level_name(level), r.ms_per_step,
                r.peak_mib, r.param_bytes / 1024.0, r.state_bytes / 1024.0, r.skipped, r.loss, r.dice);
    std::fflush(stdout);
  }
  return 0;
}
