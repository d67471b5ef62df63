// matmul.h - matrix products (autocast FP16 list: FP16 operands, FP32 accumulation).
//   matmul: a (M, K) x b (K, N) -> (M, N);          da = dy b^T,  db = a^T dy
//   linear: x (B, in), w (out, in), b (out) -> x w^T + b;  dx = dy w, dw = dy^T x, db = sum_rows dy
// (torch.matmul for 2-D operands; torch.nn.functional.linear.)
// Errors: operands not 2-D, inner extents differ, bias of the wrong length.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

}  // namespace halfgrad::ops
