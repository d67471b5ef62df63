// activation_cuda.h - CUDA launchers of ops/activation (plain C++; kernels in activation_cuda.cu).
// Float32 / float16 CUDA tensors in either memory format; errors name the op and the shapes.
#pragma once
#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::cuda {

/// y = x > 0 ? x : slope * x (relu: slope 0, and then y = x < 0 ? 0 : x, keeping NaN); same shape,
/// memory format and dtype as x. `op` names the caller in errors.
Tensor leaky_relu_forward(const char* op, const Tensor& x, double slope);
/// dx = saved > 0 ? dy : slope * dy, where saved is relu's output or leaky_relu's input; dx has
/// saved's shape, format and dtype (dy is converted to them first if it differs).
Tensor leaky_relu_backward(const char* op, const Tensor& gy, const Tensor& saved, double slope);

/// The byte moves of cat, in the buffers' physical order: for each outer index o < outer and part i,
/// the part's block of part_inner[i] elements sits in `whole` at element o * total_inner + offset[i]
/// and in part i at o * part_inner[i]. to_parts false copies parts -> whole (forward), true whole ->
/// parts (backward; a null part is skipped). Device pointers; `elem` is the element size in bytes.
struct CatGeometry {
  int64_t outer = 1, total_inner = 0;
  std::vector<int64_t> part_inner, part_offset;
};
void cat_copy(const CatGeometry& g, size_t elem, void* whole, const std::vector<void*>& parts, bool to_parts);

}  // namespace halfgrad::cuda
