// smooth.h - the smooth pointwise activations: sigmoid, tanh, silu and gelu (run in the input's
// dtype: on no autocast list, as in PyTorch's CUDA autocast; autocast/autocast.h's table).
//   sigmoid    y = 1 / (1 + exp(-x))                        dx = dy * y * (1 - y)          (saves y)
//   tanh       y = tanh(x)                                   dx = dy * (1 - y^2)            (saves y)
//   silu       y = x * s,  s = sigmoid(x)                    dx = dy * s * (1 + x (1 - s))  (saves x)
//   gelu       y = x * Phi(x) = x/2 (1 + erf(x / sqrt 2))    dx = dy * (Phi(x) + x phi(x))  (saves x)
//              phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   gelu tanh  y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//              dx = dy * (1/2 (1 + tanh u) + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
// Sources: torch.sigmoid, torch.tanh, torch.nn.functional.silu (Elfwing et al. 2018) and
// torch.nn.functional.gelu(approximate='none' | 'tanh') (Hendrycks & Gimpel 2016); the backward
// formulas are PyTorch's (aten/src/ATen/native/cpu/Activation.cpp), including where they give NaN:
// silu and gelu at x = -inf (0 * inf), as PyTorch does. NaN in gives NaN out and NaN gradient.
// Autocast: on no list (autocast/autocast.h's rows sigmoid, tanh, silu, gelu): the input's dtype, unless
// amp::set_op_fp32 / --fp32-op moved the op to FP32, when the input is cast (differentiably) first.
// Shapes: any; y has x's shape, dtype and memory format. Float16 is computed in FP32 and rounded once;
// float64 in double. CPU (contiguous) or CUDA (NCDHW or NDHWC).
// Errors: halfgrad::Error naming the op for an undefined or non-floating input.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace halfgrad::ops {

/// torch.nn.functional.gelu's `approximate`: the exact erf form (None) or the tanh approximation.
enum class GeluApproximate : uint8_t { None, Tanh };

Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);

}  // namespace halfgrad::ops
