// 04_training_loop - the C++ training loop of the README, on synthetic data that needs no download:
// a small U-Net learns to segment bright spheres in noise, with autocast and GradScaler.
//
//   build/examples/04_training_loop
#include <cstdio>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"

using namespace halfgrad;

// A batch of (B, 1, 16, 16, 16) volumes with one sphere each, labels 1 inside the sphere.
static void sphere_batch(Generator& gen, int64_t B, Tensor& x, Tensor& y) {
  const int64_t S = 16;
  std::vector<float> img(B * S * S * S);
  std::vector<int64_t> lab(img.size());
  for (int64_t b = 0; b < B; ++b) {
    const double cz = 4 + 8 * gen.uniform(), cy = 4 + 8 * gen.uniform(), cx = 4 + 8 * gen.uniform();
    const double r = 2.5 + 2 * gen.uniform();
    for (int64_t z = 0; z < S; ++z)
      for (int64_t yy = 0; yy < S; ++yy)
        for (int64_t xx = 0; xx < S; ++xx) {
          const int64_t i = ((b * S + z) * S + yy) * S + xx;
          const bool in = (z - cz) * (z - cz) + (yy - cy) * (yy - cy) + (xx - cx) * (xx - cx) < r * r;
          lab[i] = in;
          img[i] = static_cast<float>((in ? 1.0 : 0.0) + 0.5 * gen.normal());
        }
  }
  x = Tensor::from_vector(img, {B, 1, S, S, S});
  y = Tensor::from_labels(lab, {B, S, S, S});
}

int main() {
  manual_seed(0);
  Generator gen(0);
  // --- the loop the README shows -------------------------------------------------------------
  auto model = std::make_shared<nn::UNet3d>(nn::UNet3dOptions().num_classes(2).channels({8, 16}).bottleneck(32));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(3e-3));
  amp::GradScaler scaler;  // loss scale 2^16, x2 after 2000 clean steps, x0.5 on inf/NaN
  for (int step = 1; step <= 60; ++step) {
    Tensor x, y;
    sphere_batch(gen, 4, x, y);
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast;  // convs in FP16 (FP32 accumulate), norms and loss in FP32
      loss = ops::segmentation_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();  // backward of loss * S: small gradients survive FP16
    scaler.step(opt);               // unscale, skip the step if any gradient is inf/NaN
    scaler.update();                // adjust S
    if (step % 10 == 0) std::printf("step %2d  loss %.4f  scale %g\n", step, loss.item(), scaler.get_scale());
  }
  return 0;
}
