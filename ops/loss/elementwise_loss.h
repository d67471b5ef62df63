// elementwise_loss.h - the losses that are a sum of per-element terms (torch.nn.functional.mse_loss,
// l1_loss, binary_cross_entropy_with_logits), with PyTorch's reduction: Mean (default), Sum, None.
//
//   mse_loss                          l = (x - t)^2                  dl/dx = 2 (x - t),   dl/dt = -dl/dx
//   l1_loss                           l = |x - t|                    dl/dx = sign(x - t), dl/dt = -dl/dx
//   binary_cross_entropy_with_logits  l = w [(1 - t) x + lw softplus(-x)],  lw = 1 + (pw - 1) t,
//                                     softplus(-x) = max(-x, 0) + log1p(exp(-|x|))  (no overflow; the
//                                     same value as PyTorch's max(x, 0) - x t + log1p(exp(-|x|)) form)
//                                     dl/dx = w [lw sigmoid(x) - pw t],  dl/dt = w [(pw - 1) softplus(-x) - x]
//   reduction  None: l (x's shape);  Sum: sum l (0-d; 0 for an empty input);  Mean: sum l / numel
//              (0-d; an empty input throws ops::mean's error, where PyTorch returns NaN)
// weight w (optional) broadcasts against x (torch's `weight`, a rescaling per element or per class);
// pos_weight pw (optional) broadcasts against x, typically (C) along the last dim (torch's
// `pos_weight`). Gradients flow to input and target, and to weight too (halfgrad multiplies by it
// with ops::mul; PyTorch refuses a weight that requires grad); not to pos_weight (throws when it
// requires grad, where PyTorch gives one).
// Shapes: target must have input's shape (PyTorch broadcasts mse / l1 targets with a warning: not here).
// dtypes: input and target floating; the loss is in the wider of their dtypes (after autocast).
// Autocast: the FP32 list (rows mse_loss, l1_loss, binary_cross_entropy_with_logits, CastInputs::First):
// the input is cast to FP32 and the target is converted to the op's dtype, so an FP16 network output
// gives an FP32 loss, as PyTorch's fp32 list.
// Device: CPU (NCDHW) or CUDA (float32 / float16 / bfloat16, NCDHW or NDHWC; the None output keeps x's format).
// Float16 and bfloat16 are computed in FP32 and rounded once; float64 in double.
// Errors: halfgrad::Error naming the op for undefined / non-floating tensors, a target shape that
// differs from input's, weight or pos_weight that do not broadcast, tensors on different devices,
// Mean of an empty input.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace halfgrad::ops {

/// torch.nn.functional's `reduction`: "none", "mean", "sum" (libtorch's torch::kNone / kMean / kSum).
enum class Reduction : uint8_t { None, Mean, Sum };

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(), Reduction reduction = Reduction::Mean);

}  // namespace halfgrad::ops
