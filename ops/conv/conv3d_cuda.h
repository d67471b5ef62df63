// conv3d_cuda.h - conv3d and conv_transpose3d on CUDA tensors (plain C++; defined in the .cu files of
// ops/conv/). conv3d.cpp calls these from its forward and backward when the input is on CUDA.
//
// Every function takes CUDA tensors of one floating dtype (float32, float16 or bfloat16; dy may differ
// and is cast to the weight's dtype), in either memory format, and works in channels-last (NDHWC)
// internally (format_copy when a tensor is NCDHW). FP16 and BF16 run on Tensor Cores (16-bit
// operands, FP32 accumulation, output rounded once; conv_igemm.cuh's TcOperand, picked by
// tensor_core_operand); FP32 runs on FFMA. Kernels, math and layouts:
//   conv_igemm.cuh        the implicit-GEMM view (gathers, GatherKind), pointer launchers; the PTX
//                         wrappers and tile shapes are ops/tensor_core/'s, shared with the GEMM
//   conv3d_fprop_cuda.cu  Tensor Core implicit GEMM: fprop, dgrad, conv_transpose3d forward; K split
//                         into slices where the output has few tiles (conv_split_k.h: the rule, and
//                         ForceSplitK, the tests' switch)
//   conv3d_fprop_halo_cuda.cu  fprop and dgrad of the 3x3x3 stride-1 padding-1 layers with 1/16/32 -> 16/32
//                         channels in FP16/BF16: halo tiles in shared memory (conv_halo_path.h decides)
//   conv3d_wgrad_cuda.cu  Tensor Core weight gradient (split over M, deterministic sum)
//   conv3d_wgrad_halo_cuda.cu  Tensor Core weight gradient of the "same" 3x3x3 layers with <= 32
//                         channels (halo tile in shared memory); conv3d_wgrad_paths.h forces either
//   conv3d_simt_cuda.cu   the FP32 (FFMA) twins of both
//   conv_bn_cuda.cu       the fused Conv-BN-ReLU stage (conv_bn_cuda.h, for ops/conv/conv_bn.h): the halo
//                         fprop with BatchNorm statistics / input normalisation (conv_bn_halo.cuh)
//   conv3d_cuda.cu        these launchers: weight packing, split sums, format and dtype handling
//   conv_transpose3d_cuda.cu  conv_transpose3d's forward and the bias gradient
// `g` is the geometry of the convolution (ops/conv/vol2col.h); for conv_transpose3d it is the
// geometry of its adjoint convolution G, as in conv3d.cpp. Errors (halfgrad::Error) name the op and
// the shapes.
#pragma once
#include "core/tensor.h"
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// y (N, Cout, Do, Ho, Wo) in `format` = conv3d(x (N, Cin, D, H, W), w (Cout, Cin, kd, kh, kw)) + b (Cout)
/// (b may be undefined); per-axis stride, padding and dilation from g.
Tensor cuda_conv3d_fprop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, MemoryFormat format);
/// dx (N, Cin, D, H, W) in `format` from dy (N, Cout, Do, Ho, Wo) and w (Cout, Cin, kd, kh, kw). Any
/// stride (an axis of stride s > 1 runs the same kernel with its zero taps skipped by predication:
/// correct, s x the MMAs per such axis).
Tensor cuda_conv3d_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w, MemoryFormat format);
/// dw (Cout, Cin, kd, kh, kw) in `w_format` from x (N, Cin, D, H, W) and dy (N, Cout, Do, Ho, Wo).
/// FP16/BF16 3x3x3 stride-1 undilated padding-1 convolutions with Cin 1 or 8..32 and Cout 8..32 (multiples of 8)
/// run the halo kernel, everything else the implicit GEMM (conv3d_wgrad_paths.h).
Tensor cuda_conv3d_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, MemoryFormat w_format);
/// conv_transpose3d's y (N, Cout_t, ...) = dgrad_G(x, w) + b, x (N, Cin_t, ...), w (Cin_t, Cout_t, kd, kh, kw).
/// kernel == stride per axis with padding 0, dilation 1 and no output_padding (the U-Net's
/// up-convolution): one pointwise GEMM (N = kd kh kw Cout_t) with a scatter epilogue; otherwise the
/// dgrad kernel with the bias in its epilogue.
Tensor cuda_conv_transpose3d_fprop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                   MemoryFormat format);
/// db (C) = sums of t (N, C, ...) over all but the channel dim, FP32 accumulation, in t's dtype.
Tensor cuda_channel_sums(const Tensor& t);

}  // namespace halfgrad::ops::conv
