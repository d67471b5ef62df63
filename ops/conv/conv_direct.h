// conv_direct.h - direct (implicit-GEMM) FP32 kernels for the 3x3x3, stride-1 convolutions that dominate
// a 3-D U-Net on the CPU (internal to ops/conv/; conv_gemm.cpp dispatches to them).
//
// Why: with few channels (the U-Net's top levels have 8 and 16), a column-matrix GEMM does only Cout
// multiply-adds per element of the column matrix it builds, so building and packing that matrix costs
// as much as the arithmetic. These kernels read the (zero-padded) input in place instead:
//   fprop:  y[o, z, y, x..x+7] = b[o] + sum_{c,i,j,l} w[o,c,i,j,l] * xp[c, z+i, y+j, x+l .. x+l+7]
//   wgrad:  dw[o,c,i,j,l] = sum_{z,y,x} dy[o, z, y, x] * xp[c, z+i, y+j, x+l]
// with xp the input padded by p on every side (dgrad is an fprop with flipped weights, conv_gemm.cpp).
//
// Register blocking (AVX2: sixteen 8-float registers):
//   fprop: a block of kOutChannels = 4 output channels x kVectors = 3 vectors of 8 consecutive x (24
//          outputs) lives in 12 accumulators; per tap, 3 unaligned loads of xp and 4 broadcasts of w feed
//          12 FMAs. The 3 xp vectors and one broadcast take the last 4 registers.
//   wgrad: 4 output channels x the 3 taps l = 0, 1, 2 of one (c, i, j) in 12 accumulators of 8 partial
//          sums; per vector of 8 outputs, 3 loads of xp (shifted by l) and 4 loads of dy feed 12 FMAs.
// Parallel mapping: one sample at a time; its padded copy is built by all threads, then the output
// planes z are shared out (static schedule); wgrad keeps per-thread partial sums, added in thread order.
#pragma once
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// FP32 kernel 3, stride 1, output rows a multiple of 8 wide, and a build with AVX2 and FMA.
bool direct_applies(const ConvGeometry& g);

/// y (N, Cout, Do, Ho, Wo) = conv(x, w) + b (b may be null). Requires direct_applies(g).
void conv3d_fprop_direct(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y);
/// dw (Cout, Cin, 3, 3, 3) = sum over the batch of dy * x (overwritten). Requires direct_applies(g).
void conv3d_wgrad_direct(const ConvGeometry& g, const float* x, const float* dy, float* dw);

}  // namespace halfgrad::ops::conv
