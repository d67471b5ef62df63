// vol2col.h - the geometry of a 3-D convolution, and the copies between a volume and its column
// matrix (internal to ops/conv/).
//
// A convolution (kernel (kd, kh, kw), stride (sd, sh, sw), padding (pd, ph, pw), dilation (dd, dh, dw),
// all per axis, in the order D, H, W) maps x (N, Cin, D, H, W) to y (N, Cout, Do, Ho, Wo).
// Number its output positions q = n * DoHoWo + (z * Ho + y) * Wo + x: the "columns", Q = N * DoHoWo
// of them. The column matrix of x has one row per (c, i, j, l) in Cin x kd x kh x kw (row r =
// ((c * kd + i) * kh + j) * kw + l, the order of w's trailing dims) and one column per q:
//     col[r][q] = x[n, c, sd z + dd i - pd, sh y + dh j - ph, sw x + dw l - pw]     (0 outside the volume)
// so that y = W (Cout, Cin kd kh kw) * col. The convolution kernels work on a range [q0, q1) of columns
// at a time (a "column tile"), so the tile, not the whole matrix, is materialised.
//
// vol2col writes a tile of col; col2vol is its adjoint: it adds each element of a column tile back into
// the input position it was read from (positions in the padding are dropped).
#pragma once
#include <array>
#include <cstdint>

#include "core/expanding_array.h"

namespace halfgrad::ops::conv {

using Axes = std::array<int64_t, 3>;  // one integer per spatial axis: D, H, W

struct ConvGeometry {
  int64_t n = 0, cin = 0, cout = 0;  // batch, input channels, output channels
  int64_t d = 0, h = 0, w = 0;       // input extents
  Axes k{1, 1, 1};                   // kernel extents (kd, kh, kw)
  Axes s{1, 1, 1};                   // strides
  Axes p{0, 0, 0};                   // paddings (both ends of an axis)
  Axes dil{1, 1, 1};                 // dilations
  int64_t od = 0, oh = 0, ow = 0;    // output extents: (d + 2p - dil (k - 1) - 1) / s + 1 per axis

  int64_t in_vol() const { return d * h * w; }
  int64_t out_vol() const { return od * oh * ow; }
  int64_t kvol() const { return k[0] * k[1] * k[2]; }
  int64_t col_rows() const { return cin * kvol(); }  // GEMM inner extent of fprop and wgrad
  int64_t cols() const { return n * out_vol(); }     // Q
  /// Every axis has kernel kk, stride ss and dilation 1 (the cubic case the fast kernels serve).
  bool cubic(int64_t kk, int64_t ss) const {
    for (int a = 0; a < 3; ++a)
      if (k[a] != kk || s[a] != ss || dil[a] != 1) return false;
    return true;
  }
  /// k = 1, s = 1, p = 0 on every axis: the column matrix of a sample is the sample itself.
  bool is_pointwise() const { return cubic(1, 1) && p == Axes{0, 0, 0}; }
  /// Every window spans at most its stride, dil (k - 1) + 1 <= s on every axis: no input position is
  /// read by two (output position, kernel offset) pairs, so col2vol of disjoint column tiles writes
  /// disjoint input positions.
  bool windows_disjoint() const {
    for (int a = 0; a < 3; ++a)
      if (dil[a] * (k[a] - 1) + 1 > s[a]) return false;
    return true;
  }
  /// Multiply-adds of each of fprop, dgrad and wgrad: N DoHoWo x Cout x Cin kd kh kw.
  int64_t macs() const { return cols() * cout * col_rows(); }
};

/// Below this many multiply-adds (about 10 us on one core) a convolution runs on the calling thread:
/// an OpenMP region costs microseconds on a quiet machine, but a scheduler time slice (milliseconds)
/// when another process holds one of the cores the team waits for.
constexpr int64_t kMinParallelMacs = int64_t{1} << 20;
inline bool run_parallel(const ConvGeometry& g) { return g.macs() >= kMinParallelMacs; }

/// The output extents from the input extents (floor division; may be < 1: callers check). A single
/// integer for k, s, p or dil means every axis (ExpandingArray).
ConvGeometry make_geometry(int64_t n, int64_t cin, int64_t cout, int64_t d, int64_t h, int64_t w,
                           const ExpandingArray<3>& k, const ExpandingArray<3>& s, const ExpandingArray<3>& p,
                           const ExpandingArray<3>& dil = 1);

/// col (col_rows, q1 - q0), row-major with leading dimension ld >= q1 - q0, from x (N, Cin, D, H, W).
template <typename T>
void vol2col(const ConvGeometry& g, const T* x, int64_t q0, int64_t q1, T* col, int64_t ld);

/// x[...] += col[r][q] for the rows r of channels [c0, c1) of a column tile [q0, q1).
template <typename T>
void col2vol(const ConvGeometry& g, const T* col, int64_t ld, int64_t q0, int64_t q1, int64_t c0, int64_t c1, T* x);

}  // namespace halfgrad::ops::conv
