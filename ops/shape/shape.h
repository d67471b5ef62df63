// shape.h - ops that move or relabel elements without arithmetic.
//   reshape(x, s):   same elements, new shape (numel equal; one extent may be -1, inferred, as
//                    torch.reshape); dx = reshape(dy, x.shape)
//   flatten(x, start_dim, end_dim): reshape that merges dims start_dim..end_dim (inclusive; negative
//                    dims count from the end, as torch.flatten); a 0-d input gives shape [1]; the
//                    elements keep their logical (NCDHW) order, so a channels-last input gives
//                    PyTorch's values (it is copied to contiguous first, as Tensor::view_as_shape).
//                    start_dim == end_dim returns x itself. Errors: a dim outside [-dim, dim) (for a
//                    0-d input, outside [-1, 1)), or start_dim after end_dim.
//   view(x, s):      the same as reshape (torch.Tensor.view). halfgrad tensors are dense, never
//                    strided (core/tensor.h), so every view PyTorch allows is a relabel of the buffer,
//                    and the views PyTorch refuses (of a permuted tensor) are possible here too: the
//                    result shares x's buffer (a channels-last x is first copied to NCDHW).
//   permute(x, dims): y.shape[i] = x.shape[dims[i]], y[i_0, ..] = x[.., i_k at dims[k], ..];
//                    dx = permute(dy, inverse(dims)). A copy, not a view (dense tensors): y is a new
//                    contiguous buffer (PyTorch returns a strided view of the same storage).
//   transpose(x, d0, d1): permute swapping d0 and d1 (also a copy).
//   Negative dims count from the end, as PyTorch. Any dtype (int64 too: permute moves bytes), CPU or
//   CUDA; a channels-last CUDA input is read through an NCDHW copy.
//   one_hot(t, C):   int64 (N, D, H, W) -> float32 (N, C, D, H, W) with 1 at the label's channel;
//                    not differentiable; labels outside [0, C) throw naming the value.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace halfgrad::ops {

Tensor reshape(const Tensor& x, const Shape& shape);
/// torch.flatten(x, start_dim, end_dim) (defaults of torch.nn.Flatten: start_dim 1, end_dim -1).
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);
Tensor view(const Tensor& x, const Shape& shape);
/// Errors: dims not a permutation of [0, x.dim()) (after wrapping negatives), naming the dims.
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
/// Errors: d0 or d1 out of [-x.dim(), x.dim()).
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
/// Labels (N, spatial...) -> one-hot (N, C, spatial...) in `dtype` (channel dim inserted at 1).
Tensor one_hot(const Tensor& labels, int64_t num_classes, Dtype dtype = kFloat32);

}  // namespace halfgrad::ops
