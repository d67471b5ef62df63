// shape.h - ops that move or relabel elements without arithmetic.
//   reshape(x, s):   same elements, new shape (numel equal); dx = reshape(dy, x.shape)
//   one_hot(t, C):   int64 (N, D, H, W) -> float32 (N, C, D, H, W) with 1 at the label's channel;
//                    not differentiable; labels outside [0, C) throw naming the value.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor reshape(const Tensor& x, const Shape& shape);
/// Labels (N, spatial...) -> one-hot (N, C, spatial...) in `dtype` (channel dim inserted at 1).
Tensor one_hot(const Tensor& labels, int64_t num_classes, Dtype dtype = kFloat32);

}  // namespace halfgrad::ops
