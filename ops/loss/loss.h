// loss.h - segmentation losses (autocast FP32 list).
//
// cross_entropy(logits (N, C, *spatial), target int64 (N, *spatial)), mean over N*spatial:
//   L = -mean_v log_softmax(logits)[target_v, v]   (torch.nn.functional.cross_entropy, reduction mean)
//   dlogits = (softmax - one_hot(target)) / (N * spatial) * dL
// soft_dice_loss(logits, target), exactly the Dice term of ../shared/reference/torch_unet_step.py:
//   p = softmax(logits, 1), oh = one_hot(target, C),
//   inter_c = sum_{n,v} p*oh, den_c = sum_{n,v} p + sum_{n,v} oh,
//   L = 1 - mean_c (2 inter_c + smooth) / (den_c + smooth),  smooth = 1e-5
// segmentation_loss = cross_entropy + soft_dice_loss (the reference U-Net's loss).
// Device: CPU, or CUDA logits (NCDHW or NDHWC) with a CUDA target; the loss is a 0-d tensor on logits'
// device, dlogits keeps their memory format.
// Non-finite logits as PyTorch: a NaN, or a +inf, at a position makes CE NaN (and Dice NaN, since
// its sums pool every position), with dlogits NaN at that position for CE and everywhere for Dice; a
// -inf at a non-target class is probability 0 (finite loss); a -inf at the target class makes CE +inf.
// Errors: logits not (N, C, ...), target shape not logits' without C, target not int64, a target
// value outside [0, C) (names the value and its position).
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& target);
Tensor soft_dice_loss(const Tensor& logits, const Tensor& target, double smooth = 1e-5);
Tensor segmentation_loss(const Tensor& logits, const Tensor& target);

}  // namespace halfgrad::ops
