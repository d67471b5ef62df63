// sqrt_clamp.h - two pointwise ops: square root and clamp (torch.sqrt, torch.clamp).
//   sqrt(x)            y = sqrt(x)                        dx = dy / (2 y)          (saves y)
//                      sqrt(-1) = NaN, sqrt(0) = 0 with gradient inf (dy / 0), as PyTorch.
//   clamp(x, lo, hi)   y = min(max(x, lo), hi)            dx = dy where lo <= x <= hi, else 0  (saves x)
//                      either bound may be absent (std::nullopt), not both; NaN stays NaN (gradient
//                      0); lo > hi gives hi everywhere, as torch.clamp. The bounds are compared in the
//                      compute type (float for float32 / float16, double for float64), as PyTorch's
//                      CUDA kernel does (its CPU kernel rounds them to float16 first).
// Sources: PyTorch's tools/autograd/derivatives.yaml (sqrt: grad / (2 * result); clamp:
// clamp_backward, a mask with both ends included).
// Autocast: on no list, as PyTorch (autocast/autocast.h rows sqrt, clamp): the input's dtype, unless
// amp::set_op_fp32 / --fp32-op moved the op to FP32, when the input is cast (differentiably) first.
// Shapes: any; y has x's shape, dtype and memory format. Float16 is computed in FP32 and rounded
// once; float64 in double. CPU (contiguous) or CUDA (NCDHW or NDHWC).
// Errors: halfgrad::Error naming the op for an undefined or non-floating input, or clamp without bounds.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace halfgrad::ops {

Tensor sqrt(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);

}  // namespace halfgrad::ops
