// conv_bn_cuda.h - the CUDA pieces of the fused Conv-BN-ReLU pair (ops/conv/conv_bn.h), plain C++;
// defined in conv_bn_cuda.cu (math, layouts, kernels there).
//
// A "stage" is Conv3d(3x3x3, padding 1, no bias) -> BatchNorm -> ReLU. The convolution runs the halo
// kernel with BatchNorm's statistics in its epilogue, and, when its input is the previous stage's raw
// convolution output, that stage's normalise + ReLU in its prologue. Tensors are CUDA, channels-last
// (NDHWC storage, shapes (N, C, D, H, W)), float16 or bfloat16; per-channel tensors float32 [C].
#pragma once
#include "core/tensor.h"
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// One BatchNorm's parameters and mode, as the kernels read them.
struct BnCudaState {
  Tensor weight, bias;               // float32 [C], or undefined (1, 0)
  Tensor running_mean, running_var;  // float32 [C], or undefined (then batch_stats must hold)
  bool batch_stats = true;           // training (or no running stats): normalise with the batch's statistics
  double momentum = 0.1;
  double eps = 1e-5;
};

struct ConvBnCudaForward {
  Tensor y;      // (N, Cout, D, H, W) channels-last: the raw convolution output, rounded once
  Tensor saved;  // (2, Cout) float32: mean, invstd = 1/sqrt(var + eps) (norm_cuda.h's saved, for norm_backward)
  Tensor coef;   // (3, Cout) float32: mean, scale = weight * invstd, beta (bias or 0): BN + ReLU of y
};

/// Whether cuda_conv3d_bn_fprop serves geometry g in dtype dt: float16 / bfloat16, kernel 3, stride 1,
/// padding 1, dilation 1, Cin 1 (the direct kernel; then without an input normalisation), 16 or 32 (the
/// Tensor Core kernel), Cout 16 or 32; false under conv_halo_path.h's ForceImplicitGemm. Pure host logic.
bool conv_bn_halo_applies(const ConvGeometry& g, Dtype dt);

/// y = conv3d(src', w) with src' = relu((x - mean) * scale + beta) for in_coef (3, Cin) defined (the
/// previous stage's coef; x is then its raw y), else src' = x; and the statistics of y for bn: batch
/// mean and biased variance when bn.batch_stats (running stats updated in place, unbiased variance,
/// momentum, as batch_norm), else the running ones. x (N, Cin, D, H, W) channels-last in w's dtype,
/// w (Cout, Cin, 3, 3, 3). Throws halfgrad::Error (naming "conv_bn_relu") where !conv_bn_halo_applies
/// or a shape disagrees with g.
ConvBnCudaForward cuda_conv3d_bn_fprop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& in_coef,
                                       const BnCudaState& bn);

struct BnReluGradCuda {
  Tensor dh;       // (N, C, D, H, W) channels-last, the 16-bit dtype: dL/dh of the stage's raw conv output
  Tensor dweight;  // [C] float32 dL/dgamma (undefined unless asked)
  Tensor dbias;    // [C] float32 dL/dbeta (undefined unless asked)
};

/// The backward through conv g's input a = relu(BN(h)), fused (conv_bn_cuda.cu): from dy (N, Cout, ...)
/// of conv g (weight w), the forward's raw h (N, Cin, ...) channels-last, coef (3, Cin) and saved (2, Cin)
/// (ConvBnCudaForward's) and gamma (float32 [Cin] or undefined). dL/da is never written: the halo dgrad's
/// epilogue applies relu's mask and sums BN's two reductions. Needs conv_bn_halo_applies(g) and Cin 16/32.
BnReluGradCuda cuda_conv3d_dgrad_bn_relu_backward(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& h,
                                                 const Tensor& coef, const Tensor& saved, const Tensor& gamma,
                                                 bool batch_stats, bool need_w, bool need_b);

/// relu((y - mean) * scale + beta) per channel, coef (3, C) as ConvBnCudaForward's; y channels-last
/// 16-bit, the result the same (the same FP32 formula, rounded once, as the fused prologue).
Tensor cuda_bn_relu_apply(const Tensor& y, const Tensor& coef);

}  // namespace halfgrad::ops::conv
