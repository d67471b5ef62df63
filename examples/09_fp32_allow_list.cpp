// 09_fp32_allow_list - an op that autocast runs in FP16 and whose output does not fit FP16, made
// finite by the FP32 allow-list: by op kind (amp::set_op_fp32) or by module (Module::set_autocast_fp32).
//
//   build/examples/09_fp32_allow_list
//
// The sensitive layer: a 3x3x3 box sum (a Conv3d with every weight 1, the numerator of a local mean)
// applied to raw 12-bit CT intensities in [0, 4095], not normalised. Its outputs can reach 27 * 4095 =
// 110565, beyond FP16's largest value 65504. Conv3d is on autocast's FP16 list, so the kernel
// accumulates in FP32 and rounds the result to FP16: every output above 65519 becomes inf.
//   1. the op alone, under AutocastGuard, without and with amp::set_op_fp32(OpKind::Conv3d, true);
//   2. a small model (box sum -> BatchNorm3d -> 1x1 conv head) and its segmentation loss: the inf
//      becomes NaN in the norm and in the loss (GradScaler would skip every step); marking the box-sum
//      module with set_autocast_fp32(true) runs it, alone, in FP32, and the loss is finite while the
//      head stays in FP16.
//   3. how to find such a layer in a model that only reports a NaN loss: anomaly mode
//      (autograd/anomaly.h) stops at the first op whose output is not finite and names it.
// Run time: under a second.
#include <cmath>
#include <cstdio>

#include "autocast/autocast.h"
#include "autograd/anomaly.h"
#include "core/error.h"
#include "nn/batch_norm.h"
#include "nn/containers.h"
#include "nn/conv3d.h"
#include "ops/ops.h"

using namespace halfgrad;

struct Finiteness {
  int64_t inf = 0, nan = 0, numel = 0;
  double max_finite = 0;
};

static Finiteness check(const Tensor& t) {
  Finiteness f;
  f.numel = t.numel();
  for (double v : t.to_double_vector()) {
    if (std::isinf(v)) ++f.inf;
    else if (std::isnan(v)) ++f.nan;
    else f.max_finite = std::max(f.max_finite, std::fabs(v));
  }
  return f;
}

static void print_row(const char* what, const Tensor& t) {
  const Finiteness f = check(t);
  std::printf("  %-44s %-8s inf %6lld  NaN %6lld  of %6lld   max |finite| %g\n", what, dtype_name(t.dtype()),
              static_cast<long long>(f.inf), static_cast<long long>(f.nan), static_cast<long long>(f.numel),
              f.max_finite);
}

int main() {
  manual_seed(0);
  Generator gen(0);
  const int64_t S = 16;
  const Tensor x = Tensor::uniform({2, 1, S, S, S}, 0.0, 4095.0, gen);  // raw 12-bit intensities
  const Tensor box = Tensor::ones({1, 1, 3, 3, 3});
  const ops::Conv3dParams same = ops::Conv3dParams().padding(1);

  std::printf("1. box sum of raw CT intensities under autocast (op allow-list)\n");
  {
    amp::AutocastGuard autocast;
    print_row("conv3d, default policy (FP16 list)", ops::conv3d(x, box, Tensor(), same));
    amp::set_op_fp32(amp::OpKind::Conv3d, true);
    print_row("conv3d after amp::set_op_fp32(Conv3d, true)", ops::conv3d(x, box, Tensor(), same));
    amp::set_op_fp32(amp::OpKind::Conv3d, false);
  }
  print_row("conv3d without autocast (FP32 reference)", ops::conv3d(x, box, Tensor(), same));

  std::printf("\n2. box sum -> BatchNorm3d -> 1x1 conv head, segmentation loss (module allow-list)\n");
  auto local_sum = std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 1, 3).padding(1).bias(false), gen);
  local_sum->weight.fill_(1.0);
  auto head = std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 1), gen);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      local_sum, std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(1)), head});
  std::vector<int64_t> lab(x.numel());
  const float* px = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) lab[i] = px[i] > 2048;  // "bone": the bright half
  const Tensor y = Tensor::from_labels(lab, {2, S, S, S});
  for (bool mark : {false, true}) {
    local_sum->set_autocast_fp32(mark);
    Tensor h, logits, loss;
    {
      amp::AutocastGuard autocast;
      h = (*local_sum)(x);
      logits = (*model)(x);
      loss = ops::segmentation_loss(logits, y);
    }
    std::printf(" %s\n", mark ? "local_sum->set_autocast_fp32(true):" : "default policy:");
    print_row("box-sum output", h);
    print_row("logits (head conv)", logits);
    loss.backward();
    print_row("loss", loss);
    print_row("gradient of the head's weight", head->weight.grad());
    for (Tensor p : model->parameters()) p.set_grad(Tensor());
  }
  std::printf("\n3. finding the layer: the default-policy forward again, under autograd::DetectAnomalyGuard\n");
  local_sum->set_autocast_fp32(false);
  try {
    autograd::DetectAnomalyGuard anomaly;
    amp::AutocastGuard autocast;
    (*model)(x);
    std::printf("  no anomaly found\n");
  } catch (const Error& e) {
    std::printf("  halfgrad::Error: %s\n", e.what());
  }
  return 0;
}
