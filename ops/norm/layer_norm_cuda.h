// layer_norm_cuda.h - CUDA launchers of ops/norm/layer_norm.h (kernels in layer_norm_cuda.cu).
// x, dy: contiguous float32 / float16 / bfloat16 CUDA tensors viewed as (R, K); weight / bias float32 CUDA [K] or
// undefined (the caller converts them).
#pragma once
#include "core/tensor.h"

namespace halfgrad::cuda {

struct LayerNormCudaForward {
  Tensor y;      // x's shape and dtype, contiguous
  Tensor saved;  // (2, R) float32: mean and invstd per row
};
LayerNormCudaForward layer_norm_forward(const Tensor& x, int64_t K, const Tensor& weight, const Tensor& bias,
                                        double eps);

struct LayerNormCudaGrads {
  Tensor dx;       // x's shape and dtype (undefined unless need_x)
  Tensor dweight;  // [K] float32 (undefined unless need_w)
  Tensor dbias;    // [K] float32 (undefined unless need_b)
};
LayerNormCudaGrads layer_norm_backward(const Tensor& x, int64_t K, const Tensor& weight, const Tensor& saved,
                                       const Tensor& dy, bool need_x, bool need_w, bool need_b);

}  // namespace halfgrad::cuda
