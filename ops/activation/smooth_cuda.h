// smooth_cuda.h - CUDA launchers of ops/activation/smooth.h (kernels in smooth_cuda.cu). Float32 /
// float16 CUDA tensors in either memory format; the math is smooth_math.h's, in FP32.
#pragma once
#include "core/tensor.h"
#include "ops/activation/smooth_math.h"

namespace halfgrad::cuda {

/// y = f(x): same shape, memory format and dtype as x. Throws halfgrad::Error naming the op for a
/// non-CUDA or non-float32/float16 input.
Tensor smooth_forward(smooth::Kind kind, const Tensor& x);
/// dx from dy and the saved tensor (y for sigmoid / tanh, x for silu / gelu); dx has saved's shape,
/// format and dtype (dy is converted to them first if it differs).
Tensor smooth_backward(smooth::Kind kind, const Tensor& gy, const Tensor& saved);

}  // namespace halfgrad::cuda
