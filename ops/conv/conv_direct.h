// conv_direct.h - direct FP32 kernels for the 3x3x3, stride-1 convolutions that dominate a 3-D U-Net
// on the CPU (internal to ops/conv/; conv_gemm.cpp dispatches to them, and its dgrad reaches them as an
// fprop with flipped weights).
//
// Why: with few channels (the U-Net's top levels have 8 and 16), a column-matrix GEMM does only Cout
// multiply-adds per element of the column matrix it builds, so building and packing that matrix costs
// as much as the arithmetic. These kernels read a zero-padded copy xp of the input in place instead:
//   fprop:  y[o, z, y, x] = b[o] + sum_{c,i,j,l} w[o,c,i,j,l] * xp[c, z+i, y+j, x+l]
//   wgrad:  dw[o,c,i,j,l] = sum_{n,z,y,x} dy[o, z, y, x] * xp[c, z+i, y+j, x+l]
//
// Register blocking (AVX2: sixteen 8-float registers; this core needs about 12 independent FMA chains
// to keep its two FMA pipes busy):
//   fprop, 16 output channels: 2 registers of 8 channels x 6 output positions = 12 accumulators. Per
//          tap: 2 aligned weight loads and 6 broadcasts of xp feed 12 FMAs; the positions are any 6
//          outputs of a plane (each has its own pointer), so no lane is wasted on padding.
//   fprop, 8 output channels (Cout = 8, 24, ...): 1 register x 11 (or 8) consecutive outputs of a row.
//          Each broadcast of xp[.., x + u] serves the three taps l = 0, 1, 2 (outputs x + u - l), so per
//          (c, i, j) row: 3 weight loads and 13 broadcasts feed 33 FMAs.
//   fprop, 4 output channels (Cout = 12, 4, ...; rows a multiple of 8 wide): 4 channels x 3 vectors of 8
//          consecutive outputs; per tap, 3 unaligned loads of xp and 4 broadcasts of w feed 12 FMAs.
//          Channels that are not a multiple of 16 go to whichever mix of blocks wastes least.
//   wgrad, rows a multiple of 8 wide: 4 output channels x the taps l = 0, 1, 2 of one (c, i, j) = 12
//          accumulators of 8 partial sums over outputs; per vector of 8 outputs, 3 loads of xp (shifted
//          by l) and 4 of dy feed 12 FMAs.
//   wgrad, other rows: dy transposed to [output][channel]; 16 channels x 6 taps = 12 accumulators; per
//          output, 2 loads of dy and 6 broadcasts of xp feed 12 FMAs.
// Outputs of fprop are accumulated per channel register and written to y (N, Cout, Do, Ho, Wo) through
// a small transposing copy.
// Parallel mapping: samples are padded a group at a time by all threads; then the output planes
// (sample, z) are shared out (static schedule). fprop computes every output in registers, in one fixed
// order. wgrad cuts its runs of outputs into 4 fixed chunks, each with its own partial sums, added in
// chunk order at the end: results depend neither on timing nor on the thread count.
#pragma once
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// Kernel 3, stride 1 and dilation 1 on every axis (any per-axis padding), at least 128 outputs
/// (N Do Ho Wo), and a build with AVX2 and FMA (FP32 only).
bool direct_fprop_applies(const ConvGeometry& g);
/// The same conditions as direct_fprop_applies.
bool direct_wgrad_applies(const ConvGeometry& g);

/// y (N, Cout, Do, Ho, Wo) = conv(x, w) + b (b may be null). Requires direct_fprop_applies(g).
void conv3d_fprop_direct(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y);
/// dw (Cout, Cin, 3, 3, 3) = sum over the batch of dy * x (overwritten). Requires direct_wgrad_applies(g).
void conv3d_wgrad_direct(const ConvGeometry& g, const float* x, const float* dy, float* dw);

}  // namespace halfgrad::ops::conv
