// shape_cuda.h - CUDA launchers of ops/shape (plain C++; kernel in shape_cuda.cu). reshape needs no
// kernel: Tensor::view_as_shape relabels a contiguous buffer (a channels-last one is made contiguous first).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace halfgrad::cuda {

/// int64 labels (N, spatial...) on CUDA -> (N, C, spatial...) contiguous, dtype float32, float16 or bfloat16,
/// 1 at each label's channel. A label outside [0, C) throws halfgrad::Error naming it and its flat
/// index (the check waits for the kernel: one device-to-host copy of 16 bytes).
Tensor one_hot(const Tensor& labels, int64_t num_classes, Dtype dtype);

/// y (x.shape permuted by dims) = the permute of a contiguous CUDA tensor x of any dtype, contiguous.
/// dims: a permutation of [0, x.dim()) (checked by ops::permute), x.dim() <= 8.
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);

}  // namespace halfgrad::cuda
