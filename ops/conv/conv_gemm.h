// conv_gemm.h - the three halves of a 3-D convolution on the CPU as GEMMs over column tiles
// (internal to ops/conv/; conv3d.cpp builds conv3d and conv_transpose3d from them).
//
// With col = the column matrix of x (vol2col.h), K = Cin kd kh kw and Q = N DoHoWo:
//   fprop:  Y (Cout, Q) = W (Cout, K) * col (K, Q) + b
//   dgrad:  dX = col2vol(W^T (K, Cout) * dY (Cout, Q))
//   wgrad:  dW (Cout, K) = dY (Cout, Q) * col^T (Q, K)
// Every pointer is a dense row-major buffer: x, dx (N, Cin, D, H, W); w, dw (Cout, Cin, kd, kh, kw);
// b (Cout) or null; y, dy (N, Cout, Do, Ho, Wo). T is float (FP32 and FP16 tensors, FP32 accumulation)
// or double (FP64). Outputs are overwritten, not accumulated.
//
// Parallel mapping (OpenMP, no nested regions): the Q columns are cut into tiles whose column block
// (K x tile) fits in L2, a multiple of 4 of them for a parallel run; the tiles are shared out among
// the threads, each of which builds its block with vol2col and runs a single-threaded Eigen GEMM on
// it (Eigen's own GEMM threading is never used: see plan_tiles). wgrad sums its tiles in 4 fixed
// chunks, then the chunks in order. dgrad with overlapping windows and stride > 1 runs the tiles in
// turn, the threads sharing each tile's GEMM rows (4 fixed blocks) and then its scatter-add.
// Same bits whatever the thread count: tiles, chunks and row blocks follow from the problem's size
// alone, and every sum runs in a fixed order.
//
// FP32 3x3x3 stride-1 dilation-1 convolutions (the U-Net's) go to the direct kernels of conv_direct.h instead, and
// so does their dgrad, which for stride 1 is an fprop with flipped weights.
#pragma once
#include <cstdint>

#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

template <typename T>
void conv3d_fprop(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y);
template <typename T>
void conv3d_dgrad(const ConvGeometry& g, const T* dy, const T* w, T* dx);
template <typename T>
void conv3d_wgrad(const ConvGeometry& g, const T* x, const T* dy, T* dw);

/// out[c] = sum over n and the vol positions of t (N, C, vol): the bias gradient.
template <typename T>
void channel_sums(const T* t, int64_t n, int64_t c, int64_t vol, T* out);

}  // namespace halfgrad::ops::conv
