// softmax_cuda.h - CUDA launchers of ops/softmax (plain C++; kernels in softmax_cuda.cu).
// Float32 / float16 CUDA tensors in either memory format; outputs keep the input's shape, format, dtype.
#pragma once
#include "core/tensor.h"

namespace halfgrad::cuda {

/// y = softmax(x) (log_softmax when `log`) along `dim` (0 <= dim < max(x.dim(), 1)), FP32 math.
Tensor softmax_forward(const char* op, const Tensor& x, int64_t dim, bool log);
/// dx from the saved output y and dy: softmax dx = y * (dy - sum(dy * y)); log_softmax
/// dx = dy - exp(y) * sum(dy). dx has y's shape, format and dtype (dy is converted to them first).
Tensor softmax_backward(const char* op, const Tensor& y, const Tensor& gy, int64_t dim, bool log);

}  // namespace halfgrad::cuda
