// conv3d.h - 3-D convolution and transposed convolution, NCDHW, CPU reference (Eigen GEMM).
//
// Per-axis integers: kernel (kd, kh, kw) from w's trailing dims; stride, padding, dilation and
// output_padding are ExpandingArray<3> over (D, H, W) (core/expanding_array.h: one integer means all
// three axes), as libtorch's torch::nn::functional::conv3d / conv_transpose3d options. Below, for
// each axis: input extent X, kernel k, stride s, padding p, dilation d.
//
// conv3d (cross-correlation, as PyTorch):
//   x (N, Cin, D, H, W), w (Cout, Cin, kd, kh, kw), b (Cout) or undefined
//   y (N, Cout, Do, Ho, Wo),  Xo = (X + 2p - d (k - 1) - 1) / s + 1 (floor)
//   y[n,o,z,y,x] = b[o] + sum_{c,i,j,l} w[o,c,i,j,l] * x[n,c, sd z + dd i - pd, sh y + dh j - ph, sw x + dw l - pw]
//   fprop as GEMM:  Y_n (Cout, DoHoWo) = W (Cout, Cin kd kh kw) * col(X_n) (Cin kd kh kw, DoHoWo)
//   dgrad:          col(dX_n) = W^T * dY_n, scattered back (col2vol)
//   wgrad:          dW += dY_n * col(X_n)^T;   db = sum over n, z, y, x of dY
// conv_transpose3d (the adjoint of conv3d w.r.t. its input, as PyTorch's ConvTranspose3d):
//   x (N, Cin, D, H, W), w (Cin, Cout, kd, kh, kw), b (Cout)
//   y (N, Cout, Do, Ho, Wo),  Xo = (X - 1) s - 2p + d (k - 1) + output_padding + 1
//   output_padding adds rows at the high end of an axis (PyTorch's way to pick which of the input
//   extents a strided conv3d maps to the same output extent to go back to); it must be < stride or
//   < dilation on its axis, as PyTorch requires; conv3d rejects a nonzero output_padding.
// Precision: autocast's FP16 list: operands are cast to FP16, products accumulate in FP32, the output
// is FP16. Float64 computes in double (gradcheck).
// CPU implementation: GEMMs over column tiles (ops/conv/conv_gemm.h), per axis; FP32/FP16 3x3x3
// stride-1 dilation-1 convolutions (fprop, and dgrad as an fprop with flipped weights; wgrad) run on
// direct AVX2 kernels instead (ops/conv/conv_direct.h). Timings: bench/conv3d_cpu_bench.cpp.
// CUDA: with x on CUDA (w and b must be too) both ops run the kernels of conv3d_cuda.h (FP16 Tensor
// Core / FP32 FFMA implicit GEMMs with per-axis gathers, channels-last inside; x may be NCDHW or NDHWC
// and y comes back in x's format).
// Errors (halfgrad::Error, naming the op and the shapes): x not 5-D, w not 5-D, channel mismatch,
// empty kernel, bias of the wrong length, output extent < 1, stride < 1, padding < 0, dilation < 1,
// output_padding < 0 or not below stride or dilation (or nonzero for conv3d), operands on different
// devices. A stride/padding/dilation list of the wrong length throws from ExpandingArray.
// Not supported (unlike PyTorch): groups, padding modes other than zeros, padding="same".
#pragma once
#include <cstdint>

#include "core/expanding_array.h"
#include "core/tensor.h"

namespace halfgrad::ops {

/// Chainable options: Conv3dParams().stride({1, 2, 2}).padding({0, 1, 1}); a single integer fills
/// all three axes (D, H, W). output_padding is read by conv_transpose3d only.
struct Conv3dParams {
  ExpandingArray<3> stride_ = 1;
  ExpandingArray<3> padding_ = 0;
  ExpandingArray<3> dilation_ = 1;
  ExpandingArray<3> output_padding_ = 0;
  Conv3dParams& stride(ExpandingArray<3> s) { stride_ = s; return *this; }
  Conv3dParams& padding(ExpandingArray<3> p) { padding_ = p; return *this; }
  Conv3dParams& dilation(ExpandingArray<3> d) { dilation_ = d; return *this; }
  Conv3dParams& output_padding(ExpandingArray<3> p) { output_padding_ = p; return *this; }
};

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dParams& p = Conv3dParams());
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dParams& p = Conv3dParams());

}  // namespace halfgrad::ops
