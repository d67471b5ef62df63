// conv_bn.h - the U-Net block's pair of Conv3d -> BatchNorm -> ReLU stages as one fused op
// (issue 11, item 2). The unfused ops (conv3d, batch_norm, relu) stay the reference and the oracle.
//
//   h1 = conv3d(x, w1)               (3x3x3, stride 1, padding 1, no bias)
//   a1 = relu(batch_norm(h1; gamma1, beta1, running stats 1))
//   h2 = conv3d(a1, w2)
//   y  = relu(batch_norm(h2; gamma2, beta2, running stats 2))
// Shapes: x (N, Cin, D, H, W), w1 (C1, Cin, 3, 3, 3), w2 (C2, C1, 3, 3, 3), per-channel tensors [C1] / [C2];
// y (N, C2, D, H, W) in x's memory format and the convs' autocast dtype (float16 or bfloat16).
// Batch statistics, running-stat updates (momentum, unbiased variance), evaluation mode and eps are
// batch_norm's (ops/norm/norm.h); gradients flow to x, w1, w2, gamma1/2 and beta1/2, as the unfused chain.
//
// How it is fused (CUDA, conv_bn_cuda.h): conv 1 runs the halo kernel with BN 1's statistics in its
// epilogue; conv 2 loads h1 and applies relu(BN 1) while it fills its halo tile (a1 is never written),
// with BN 2's statistics in its epilogue; one elementwise pass writes y. Backward: relu 2 and BN 2 on the
// unfused kernels; conv 2's dgrad applies relu 1's mask and sums BN 1's two reductions in its epilogue
// (the gradient of a1 is never written); a1 is recomputed from h1 for conv 2's weight gradient only.
// Precision: as the unfused chain under autocast: 16-bit activations, FP32 accumulation and statistics
// (FP64 across tiles), FP32 affine and running buffers; results agree with it to FP16 rounding, not bit
// for bit (the statistics are summed in another order).
// Autocast: the row ConvBnRelu of autocast/autocast.h (the conv's list: operands to FP16/BF16).
#pragma once
#include "core/tensor.h"
#include "ops/norm/norm.h"

namespace halfgrad::ops {

/// One Conv3d (no bias) -> BatchNorm -> ReLU stage: the conv weight and the BN's tensors, any of
/// bn_weight, bn_bias, running_mean, running_var may be undefined (as batch_norm's).
struct ConvBnReluStage {
  Tensor conv_weight;                // (Cout, Cin, 3, 3, 3)
  Tensor bn_weight, bn_bias;         // [Cout] (gamma, beta)
  Tensor running_mean, running_var;  // [Cout] float32, updated in place in training
  BatchNormParams bn;                // training (batch statistics), momentum, eps
};

/// Whether conv_bn_relu_pair runs fused for these operands: x on CUDA, 5-D, under the autocast dtype
/// float16 or bfloat16 (the ConvBnRelu, Conv3d, BatchNorm and Relu rows agreeing), both convs 3x3x3 with 16 or 32
/// output channels and 1 (first conv only), 16 or 32 input channels (the halo kernels; conv_halo_path.h's
/// switch off), the per-
/// channel tensors float32 on CUDA, and either training with more than one value per channel or
/// evaluation with both running statistics defined. Host logic only.
bool conv_bn_relu_pair_fusable(const Tensor& x, const ConvBnReluStage& first, const ConvBnReluStage& second);

/// The fused pair (file comment). Throws halfgrad::Error naming "conv_bn_relu" where !fusable (callers
/// take the unfused ops there) or a shape disagrees.
Tensor conv_bn_relu_pair(const Tensor& x, const ConvBnReluStage& first, const ConvBnReluStage& second);

}  // namespace halfgrad::ops
