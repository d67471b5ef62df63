// max_pool3d_cuda.h - 3-D max pooling on the GPU (plain C++: no CUDA types or headers). Kernels and
// their mapping: max_pool3d_cuda.cu; the op, its checks and autograd: max_pool3d.cpp.
//
// x (N, C, D, H, W) float32 / float16 CUDA, NCDHW or NDHWC -> y (N, C, Do, Ho, Wo) in x's dtype and
// memory format, Do = (D - kernel) / stride + 1 (floor, no padding). argmax holds, per output and in
// y's layout, the int32 index d*H*W + h*W + w (within its (n, c) plane) of the window's first maximum
// (a NaN wins), as the CPU op and PyTorch's return_indices.
#pragma once
#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace halfgrad::cuda {

struct MaxPoolCudaForward {
  Tensor y;
  std::shared_ptr<int32_t> argmax;  // device memory, y.numel() int32, released when the last owner goes
};

MaxPoolCudaForward max_pool3d_forward(const Tensor& x, int64_t kernel, int64_t stride);

/// dx (x_shape, dtype and memory_format of the forward's input): the sum of dy over the outputs whose
/// argmax is that element (0 where there is none). dy is converted to x's dtype and format if needed.
Tensor max_pool3d_backward(const Tensor& dy, const int32_t* argmax, const Shape& x_shape, Dtype dtype,
                           MemoryFormat format, int64_t kernel, int64_t stride);

}  // namespace halfgrad::cuda
