// 03_autocast - which precision each op runs in under autocast, and why gradients need a loss scale.
//
//   build/examples/03_autocast
//
// 1. Prints the policy table (autocast/autocast.h) and the dtypes a conv -> batch norm -> relu chain
//    produces inside an AutocastGuard: conv on the FP16 list, batch norm on the FP32 list.
// 2. Backpropagates a small loss through an FP16 conv with and without GradScaler's factor 2^16 and
//    shows the output gradient that FP16 flushes to zero without it, and the weight gradient that
//    survives with it.
#include <cmath>
#include <cstdio>

#include "autocast/autocast.h"
#include "ops/ops.h"

using namespace halfgrad;

int main() {
  std::printf("autocast policy table (op -> list):\n");
  for (int k = 0; k < static_cast<int>(amp::OpKind::kCount); ++k) {
    const auto kind = static_cast<amp::OpKind>(k);
    std::printf("  %-18s %s\n", amp::op_kind_name(kind), amp::cast_policy_name(amp::default_policy(kind)));
  }
  Generator gen(0);
  Tensor x = Tensor::randn({2, 4, 8, 8, 8}, gen);
  Tensor w = Tensor::randn({8, 4, 3, 3, 3}, gen, kFloat32, 0.1).set_requires_grad(true);
  Tensor gamma = Tensor::ones({8}).set_requires_grad(true), beta = Tensor::zeros({8}).set_requires_grad(true);
  Tensor rm = Tensor::zeros({8}), rv = Tensor::ones({8});
  {
    amp::AutocastGuard autocast;
    Tensor c = ops::conv3d(x, w, Tensor(), ops::Conv3dParams().padding(1));
    Tensor n = ops::batch_norm(c, rm, rv, gamma, beta);
    Tensor r = ops::relu(n);
    std::printf("\ninside AutocastGuard: x %s, w %s -> conv3d %s -> batch_norm %s -> relu %s\n", dtype_name(x.dtype()),
                dtype_name(w.dtype()), dtype_name(c.dtype()), dtype_name(n.dtype()), dtype_name(r.dtype()));
  }
  // A loss whose gradients are tiny, as late in training: 1e-6 times the sum of the conv output.
  for (double scale : {1.0, 65536.0}) {
    w.set_grad(Tensor());
    {
      amp::AutocastGuard autocast;
      Tensor y = ops::conv3d(x, w, Tensor(), ops::Conv3dParams().padding(1));
      Tensor loss = ops::sum(y) * 1e-9;
      (loss * scale).backward();
    }
    // The grad reaching the conv output is 1e-9 * scale per element, in FP16.
    const float g_out = round_to_half(static_cast<float>(1e-9 * scale));
    std::printf("loss scale %-8g: dL/dy per element in FP16 = %g (%s); |dL/dw| mean after unscaling = %.3g\n", scale,
                g_out, g_out == 0 ? "underflowed to zero" : "representable",
                [&] { double s = 0; for (double v : w.grad().to_double_vector()) s += std::fabs(v); return s / w.numel() / scale; }());
  }
  return 0;
}
