// sqrt_clamp_cuda.h - CUDA launchers of ops/elementwise/sqrt_clamp.h (kernels in sqrt_clamp_cuda.cu).
// Float32 / float16 / bfloat16 CUDA tensors in either memory format; the math is sqrt_clamp_math.h's, in FP32.
#pragma once
#include "core/tensor.h"
#include "ops/elementwise/sqrt_clamp_math.h"

namespace halfgrad::cuda {

/// y = sqrt(x) / clamp(x): x's shape, memory format and dtype. Throws naming the op for a non-CUDA or
/// non-float32/float16 input.
Tensor sqrt_forward(const Tensor& x);
Tensor clamp_forward(const Tensor& x, sqrt_clamp::ClampBounds bounds);
/// dx from dy and the saved tensor (y for sqrt, x for clamp); dx has saved's shape, format and dtype
/// (dy is converted to them first if it differs).
Tensor sqrt_backward(const Tensor& gy, const Tensor& y);
Tensor clamp_backward(const Tensor& gy, const Tensor& x, sqrt_clamp::ClampBounds bounds);

}  // namespace halfgrad::cuda
