// dropout.h - inverted dropout (torch.nn.functional.dropout) and channel dropout (dropout3d).
//
//   dropout(x, p, training, gen):   y = x * m / (1 - p), m_i ~ Bernoulli(1 - p) per element
//   dropout3d(x, p, training, gen): the same with one m per (n, c) of x (N, C, D, H, W): whole
//                                    channels are zeroed (torch.nn.functional.dropout3d)
//   backward: dx = dy * m / (1 - p), the same mask (recomputed from the saved seed, not stored)
//   y = x * 0 where dropped, so a NaN or inf there stays NaN (as PyTorch's x * mask);
//   p = 1 gives zeros (and zero gradients); p = 0 or training false return x itself (the identity,
//   as PyTorch's eval mode).
// The mask: one 64-bit seed is drawn from `gen` per call, and each decision is a counter-based hash
// of (seed, element or channel index) (dropout_math.h): a run with the same seed gets the same mask
// on the CPU and on CUDA, in either memory format and with any thread count. The masks are NOT
// PyTorch's (its Philox stream differs): only their distribution is the same.
// Shapes: dropout any; dropout3d 5-D (N, C, D, H, W) (PyTorch also takes an unbatched 4-D input:
// not here). y has x's shape, dtype and memory format. Float16 is scaled in FP32 and rounded once;
// float64 in double. CPU (NCDHW) or CUDA (float32 / float16 / bfloat16, NCDHW or NDHWC).
// Autocast: on no list (rows "dropout", "dropout3d"): the input's dtype.
// Errors: halfgrad::Error for an undefined or non-floating input, p outside [0, 1] (or NaN), a
// dropout3d input that is not 5-D.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator& gen = default_generator());
Tensor dropout3d(const Tensor& x, double p = 0.5, bool training = true, Generator& gen = default_generator());

}  // namespace halfgrad::ops
