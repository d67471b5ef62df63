// softmax.h - softmax and log-softmax along one dimension (autocast FP32 list).
//   softmax:      y_i = exp(x_i - max) / sum_j exp(x_j - max);   dx = y * (dy - sum(dy * y))
//   log_softmax:  y_i = x_i - max - log sum_j exp(x_j - max);    dx = dy - softmax(x) * sum(dy)
// Non-finite inputs as PyTorch: a NaN or a +inf along the dim makes the whole slice NaN (x - max is
// NaN or inf - inf), a -inf gets probability 0 (log_softmax -inf), an all -inf slice is NaN.
// Errors: dim out of range.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace halfgrad::ops
