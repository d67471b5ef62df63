// reduce_cuda.h - CUDA launchers of ops/reduce (plain C++; kernels in reduce_cuda.cu).
// Inputs are CUDA float32 / float16 tensors in either memory format; outputs are contiguous.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace halfgrad::cuda {

/// scale * (sum of x over the dims d with mask[d]), in x's keepdim shape (reduced dims become 1),
/// contiguous, dtype `out` (float32, float16 or bfloat16). FP32 accumulation; deterministic (the split of
/// the work and the order of every addition depend only on the shape). ops::sum / mean and
/// ops::sum_to_shape (the broadcast backward) call it.
Tensor sum_dims(const char* op, const Tensor& x, const std::vector<bool>& mask, double scale, Dtype out);

/// Index of the largest value along `dim` (0 <= dim < x.dim(); first on ties, as the CPU op), int64,
/// x's logical shape without `dim`, contiguous.
Tensor argmax(const Tensor& x, int64_t dim);

}  // namespace halfgrad::cuda
