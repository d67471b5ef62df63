// elementwise_loss_cuda.h - CUDA launchers of ops/loss/elementwise_loss.h (kernels in
// elementwise_loss_cuda.cu). Every tensor: float32 / float16 / bfloat16 CUDA, one shape, dtype and memory format
// (the caller converts); pw may be undefined (1 everywhere).
#pragma once
#include "core/tensor.h"
#include "ops/loss/elementwise_loss_math.h"

namespace halfgrad::cuda {

/// l = forward(x, t, pw) per element, in x's shape, dtype and format.
Tensor elementwise_loss_forward(elementwise_loss::Kind kind, const Tensor& x, const Tensor& t, const Tensor& pw);

struct ElementwiseLossGrads {
  Tensor dx, dt;  // x's shape, dtype and format; undefined when not asked for
};
/// dx = gy * dl/dx (need_x), dt = gy * dl/dt (need_t).
ElementwiseLossGrads elementwise_loss_backward(elementwise_loss::Kind kind, const Tensor& gy, const Tensor& x,
                                               const Tensor& t, const Tensor& pw, bool need_x, bool need_t);

}  // namespace halfgrad::cuda
