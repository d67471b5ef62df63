// max_pool3d_cuda.h - 3-D max pooling on the GPU (plain C++: no CUDA types or headers). Kernels and
// their mapping: max_pool3d_cuda.cu; the op, its checks and autograd: max_pool3d.cpp.
//
// x (N, C, D, H, W) float32 / float16 / bfloat16 CUDA, NCDHW or NDHWC -> y (N, C, Do, Ho, Wo) in x's dtype and
// memory format, per axis Do = (D + 2 padding - kernel) / stride + 1 (floor; padding is -inf). argmax holds, per output and in
// y's layout, the int32 index d*H*W + h*W + w (within its (n, c) plane) of the window's first maximum
// (a NaN wins), as the CPU op and PyTorch's return_indices.
#pragma once
#include <array>
#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace halfgrad::cuda {

struct MaxPoolCudaForward {
  Tensor y;
  std::shared_ptr<int32_t> argmax;  // device memory, y.numel() int32, released when the last owner goes
};

/// kernel, stride, padding per axis (D, H, W), checked by ops::max_pool3d (and again here).
using Axes3 = std::array<int64_t, 3>;

MaxPoolCudaForward max_pool3d_forward(const Tensor& x, const Axes3& kernel, const Axes3& stride, const Axes3& padding);

/// dx (x_shape, dtype and memory_format of the forward's input): the sum of dy over the outputs whose
/// argmax is that element (0 where there is none). dy is converted to x's dtype and format if needed.
Tensor max_pool3d_backward(const Tensor& dy, const int32_t* argmax, const Shape& x_shape, Dtype dtype,
                           MemoryFormat format, const Axes3& kernel, const Axes3& stride, const Axes3& padding);

}  // namespace halfgrad::cuda
