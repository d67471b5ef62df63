// conv3d_wgrad_paths.h - cuda_conv3d_wgrad with its kernel forced, so that tests can hold the halo
// wgrad (conv3d_wgrad_halo_cuda.cu) against the implicit-GEMM wgrad it replaces for the "same"
// 3x3x3 layers (conv3d_wgrad_cuda.cu, kept as the oracle), and benches can time both. Private to
// ops/conv/, tests/ and bench/; programs call cuda_conv3d_wgrad (conv3d_cuda.h).
#pragma once
#include "core/tensor.h"
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// The weight-gradient kernels of cuda_conv3d_wgrad.
enum class WgradPath {
  kAuto,          // cuda_conv3d_wgrad's own choice: kHalo where it applies (16-bit, supported geometry), else kImplicitGemm
  kImplicitGemm,  // tc_wgrad (FP16/BF16) or simt_wgrad (FP32): every geometry
  kHalo,          // halo_wgrad: FP16/BF16, 3x3x3 stride 1 dilation 1 padding 1, Cin 1 or 8..32 (multiple of 8), Cout 8..32 (multiple of 8)
};

/// cuda_conv3d_wgrad(g, x, dy, w_format) on the given path. Checks its arguments as cuda_conv3d_wgrad
/// does; kHalo on a problem it does not support throws halfgrad::Error naming the op and the reason.
Tensor cuda_conv3d_wgrad_on(const ConvGeometry& g, const Tensor& x, const Tensor& dy, MemoryFormat w_format, WgradPath path);

/// The path kAuto takes for (g, dtype) with 16-byte aligned channels-last operands (what
/// cuda_conv3d_wgrad makes of its inputs): kHalo or kImplicitGemm.
WgradPath cuda_conv3d_wgrad_auto_path(const ConvGeometry& g, Dtype dt);

}  // namespace halfgrad::ops::conv
