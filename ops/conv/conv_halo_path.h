// conv_halo_path.h - which kernel runs conv3d's fprop and dgrad on CUDA for the "same" 3x3x3
// convolution (kernel 3, stride 1, padding 1, dilation 1 on every axis) in FP16 or BF16: the
// halo-tiled kernels of conv3d_fprop_halo_cuda.cu where halo_conv_applies says so, the implicit GEMM
// of conv3d_fprop_cuda.cu (tc_igemm) everywhere else. Private to ops/conv/ and its tests: programs
// call conv3d (ops/conv/conv3d.h) and never choose.
//
// The implicit GEMM stays as the oracle: a test holds a ForceImplicitGemm while it computes the
// reference, then compares the halo path's result with it (tests/cuda/conv3d_halo_cuda_test.cpp).
#pragma once
#include "core/dtype.h"
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// Whether conv3d's fprop (dgrad = false: src x, N = Cout output channels) or its input gradient
/// (dgrad = true: src dy, N = Cin output channels; also conv_transpose3d's forward through its adjoint
/// geometry g) of geometry g in dtype dt runs on the halo kernels: dt float16 or bfloat16, kernel 3,
/// stride 1, padding 1 and dilation 1 on every axis (output extents = input extents), the gathered
/// channels (Cin for fprop, Cout for dgrad) 1 (the direct kernel), 16 or 32 (the Tensor Core kernel),
/// and N = 16 or 32. Pure host logic; false while a ForceImplicitGemm lives on this thread.
bool halo_conv_applies(const ConvGeometry& g, Dtype dt, bool dgrad);

/// While an instance lives, halo_conv_applies is false on the constructing thread, so conv3d's fprop and
/// dgrad run the implicit GEMM (the oracle). Nests (restores the previous state on destruction).
class ForceImplicitGemm {
 public:
  ForceImplicitGemm();
  ~ForceImplicitGemm();
  ForceImplicitGemm(const ForceImplicitGemm&) = delete;
  ForceImplicitGemm& operator=(const ForceImplicitGemm&) = delete;

 private:
  bool previous_;
};

}  // namespace halfgrad::ops::conv
