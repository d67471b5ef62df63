// deep_supervision.h - nnU-Net v2's deep-supervision loss over a U-Net's outputs at 1, 1/2, 1/4, ...
// resolution (nn::UNet3d::forward_deep), on top of segmentation_loss (loss.h).
//
// deep_supervision_weights(n): nnU-Net v2's nnUNetTrainer._build_loss,
//   w_i = 1 / 2^i for i = 0 .. n-1, then w_{n-1} = 0 (the lowest resolution is not trained), then
//   w /= sum(w):   n = 3: {2/3, 1/3, 0}   n = 4: {4/7, 2/7, 1/7, 0}   n = 5: {8/15, 4/15, 2/15, 1/15, 0}
//
// downsample_labels_nearest(target (N, D, H, W) int64, s): the label map at 1/s resolution,
// (N, D/s, H/s, W/s), by nearest neighbour with centre-aligned voxels:
//   out[n, z, y, x] = target[n, s z + s/2, s y + s/2, s x + s/2]     (s/2 in integers: 0 for s = 1)
// i.e. of every s x s x s block, the voxel just past its centre: for s = 2 the second voxel (index
// 1, 3, 5, ...), for s = 4 the third (2, 6, 10, ...). This is nnU-Net v2's target downsampling for
// power-of-two scales: batchgeneratorsv2's DownsampleSegForDSTransform (torch interpolate,
// mode 'nearest-exact': src = floor((o + 0.5) * s)) and batchgenerators' DownsampleSegForDSTransform2
// (skimage resize, order 0: scipy rounds the centre-aligned coordinate s o + (s - 1)/2 by
// floor(c + 0.5)) both take s o + s/2. (mode 'nearest', PyTorch's default, would take s o.)
// s must be >= 1 and divide D, H and W. Not differentiable (integer labels). A CUDA target is
// downsampled on the host and copied back (one label map per step; no kernel of its own).
//
// deep_supervision_loss(logits {L_0, L_1, ...}, target (N, D, H, W)):
//   L = sum_{i : w_i > 0} w_i * segmentation_loss(L_i, downsample_labels_nearest(target, 2^i))
// with w = deep_supervision_weights(logits.size()); L_i must be (N, C, D/2^i, H/2^i, W/2^i), the
// highest resolution first (forward_deep's order). An output whose weight is 0 (the lowest
// resolution) is not evaluated at all, as nnU-Net's DeepSupervisionWrapper skips it; it gets no
// gradient. The loss is a 0-d tensor in the dtype segmentation_loss gives; its gradient reaches
// every logits tensor with w_i > 0, scaled by w_i. Note: segmentation_loss is the reference's
// CE + soft Dice, not nnU-Net's DC_and_CE_loss (batch Dice without the background class); only the
// weighting and the target downsampling are nnU-Net's.
//
// Errors (halfgrad::Error naming the function): fewer than 2 outputs, a logits tensor not 5-D, a
// target not (N, D, H, W) int64, an output whose shape is not (N, C, D/2^i, H/2^i, W/2^i) (names i and
// both shapes), an extent not divisible by the scale; and segmentation_loss's own errors.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace halfgrad::ops {

std::vector<double> deep_supervision_weights(size_t n);
Tensor downsample_labels_nearest(const Tensor& target, int64_t s);
Tensor deep_supervision_loss(const std::vector<Tensor>& logits, const Tensor& target);

}  // namespace halfgrad::ops
