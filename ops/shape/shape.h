// shape.h - ops that move or relabel elements without arithmetic.
//   reshape(x, s):   same elements, new shape (numel equal); dx = reshape(dy, x.shape)
//   flatten(x, start_dim, end_dim): reshape that merges dims start_dim..end_dim (inclusive; negative
//                    dims count from the end, as torch.flatten); a 0-d input gives shape [1]; the
//                    elements keep their logical (NCDHW) order, so a channels-last input gives
//                    PyTorch's values (it is copied to contiguous first, as Tensor::view_as_shape).
//                    start_dim == end_dim returns x itself. Errors: a dim outside [-dim, dim) (for a
//                    0-d input, outside [-1, 1)), or start_dim after end_dim.
//   one_hot(t, C):   int64 (N, D, H, W) -> float32 (N, C, D, H, W) with 1 at the label's channel;
//                    not differentiable; labels outside [0, C) throw naming the value.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor reshape(const Tensor& x, const Shape& shape);
/// torch.flatten(x, start_dim, end_dim) (defaults of torch.nn.Flatten: start_dim 1, end_dim -1).
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);
/// Labels (N, spatial...) -> one-hot (N, C, spatial...) in `dtype` (channel dim inserted at 1).
Tensor one_hot(const Tensor& labels, int64_t num_classes, Dtype dtype = kFloat32);

}  // namespace halfgrad::ops
