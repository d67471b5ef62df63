// layer_norm.h - layer normalisation over the trailing dims (torch.nn.functional.layer_norm; Ba, Kiros
// and Hinton 2016).
//
//   x (*, normalized_shape) is viewed as (R, K) rows, K = prod(normalized_shape); per row r:
//   mu = mean(x_r), var = mean((x_r - mu)^2) (biased, as PyTorch), invstd = 1 / sqrt(var + eps),
//   xhat = (x - mu) invstd, y = xhat * weight_k + bias_k (weight, bias of shape normalized_shape,
//   elementwise, or undefined: no affine).
//   backward: dxhat = weight_k dy;  dx = invstd (dxhat - mean_k(dxhat) - xhat mean_k(dxhat xhat));
//             dweight_k = sum_r dy xhat, dbias_k = sum_r dy.
// Autocast: on the FP32 list (row "layer_norm"), as PyTorch: under autocast an FP16 input is cast to
// FP32 and the output is FP32; outside autocast the output has x's dtype (the affine parameters are
// read in FP32 inside either way, and their gradients come back in their own dtype).
// Statistics in FP64 (CPU) or FP32 per thread and FP64 across threads (CUDA); results do not depend
// on the thread count. Non-finite values as PyTorch: a NaN or inf in a row makes that row's y NaN.
// Device: CPU or CUDA (float32 / float16 / bfloat16). The output (and dx) is contiguous: a channels-last 5-D
// input is read in its logical order (copied to contiguous first), as PyTorch's layer_norm does.
// Errors: halfgrad::Error for an empty normalized_shape, an input whose trailing dims are not
// normalized_shape ("expected input with shape [*, ...]"), weight / bias not of normalized_shape,
// tensors on different devices, a non-floating input.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace halfgrad::ops
