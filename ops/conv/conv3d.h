// conv3d.h - 3-D convolution and transposed convolution, NCDHW, CPU reference (Eigen GEMM).
//
// conv3d (cross-correlation, as PyTorch):
//   x (N, Cin, D, H, W), w (Cout, Cin, k, k, k), b (Cout) or undefined
//   y (N, Cout, Do, Ho, Wo),  Do = (D + 2p - k) / s + 1 (floor)
//   y[n,o,z,y,x] = b[o] + sum_{c,i,j,l} w[o,c,i,j,l] * x[n,c, s*z+i-p, s*y+j-p, s*x+l-p]
//   fprop as GEMM:  Y_n (Cout, DoHoWo) = W (Cout, Cin k^3) * col(X_n) (Cin k^3, DoHoWo)
//   dgrad:          col(dX_n) = W^T * dY_n, scattered back (col2vol)
//   wgrad:          dW += dY_n * col(X_n)^T;   db = sum over n, z, y, x of dY
// conv_transpose3d (the adjoint of conv3d w.r.t. its input, as PyTorch's ConvTranspose3d):
//   x (N, Cin, D, H, W), w (Cin, Cout, k, k, k), b (Cout)
//   y (N, Cout, Do, Ho, Wo),  Do = (D - 1) * s - 2p + k
// Precision: autocast's FP16 list: operands are cast to FP16, products accumulate in FP32, the output
// is FP16. Float64 computes in double (gradcheck).
// CPU implementation: GEMMs over column tiles (ops/conv/conv_gemm.h); FP32/FP16 3x3x3 stride-1
// convolutions (fprop, and dgrad as an fprop with flipped weights; wgrad) run on direct AVX2 kernels
// instead (ops/conv/conv_direct.h). Timings: bench/conv3d_cpu_bench.cpp.
// CUDA: with x on CUDA (w and b must be too) both ops run the kernels of conv3d_cuda.h (FP16 Tensor
// Core / FP32 FFMA implicit GEMMs, channels-last inside; x may be NCDHW or NDHWC and y comes back in
// x's format).
// Errors (halfgrad::Error, naming the op and the shapes): x not 5-D, w not 5-D, channel mismatch,
// non-cubic or empty kernel, bias of the wrong length, output extent < 1, stride < 1, padding < 0,
// operands on different devices.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace halfgrad::ops {

/// Chainable options: Conv3dParams().stride(2).padding(1).
struct Conv3dParams {
  int64_t stride_ = 1;
  int64_t padding_ = 0;
  Conv3dParams& stride(int64_t s) { stride_ = s; return *this; }
  Conv3dParams& padding(int64_t p) { padding_ = p; return *this; }
};

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dParams& p = Conv3dParams());
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dParams& p = Conv3dParams());

}  // namespace halfgrad::ops
