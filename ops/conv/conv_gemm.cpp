// conv_gemm.cpp - fprop, dgrad and wgrad of a 3-D convolution as Eigen GEMMs over column tiles
// (math, layouts and the parallel mapping in conv_gemm.h).
#include "ops/conv/conv_gemm.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "ops/common.h"
#include "ops/conv/conv_direct.h"

namespace halfgrad::ops::conv {

namespace {

template <typename T>
using MatR = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapR = Eigen::Map<MatR<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using ConstMapR = Eigen::Map<const MatR<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using ConstVecMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

// A column block (K x tile) of 256 KiB leaves room in a 1 MiB L2 for Eigen's packed copy of it and
// for the output block, so the GEMM reads its operands from L2, not from memory.
constexpr int64_t kColTileBytes = 256 << 10;
// Below 64 columns the GEMM's fixed costs (packing W, the micro-kernel's edges) outweigh cache reuse.
constexpr int64_t kMinTileCols = 64;

struct Tiling {
  int64_t cols;   // Q
  int64_t width;  // columns per tile (the last tile may be narrower)
  int64_t count;  // number of tiles
  int64_t begin(int64_t t) const { return t * width; }
  int64_t end(int64_t t) const { return std::min(cols, (t + 1) * width); }
};

// A parallel run cuts the columns into a multiple of kTileGroup tiles (when there are enough columns),
// so that a static schedule gives 1, 2 or 4 threads the same work; wgrad keeps one partial sum per
// group of tiles (kTileGroup of them).
constexpr int64_t kTileGroup = 4;
// To make kTileGroup tiles a parallel run lets tiles shrink below kMinTileCols, but not below this.
constexpr int64_t kMinSplitCols = 8;

// Tiles of at most kColTileBytes (and at least kMinTileCols wide). For a parallel run (run_parallel),
// at least kTileGroup tiles where the columns allow, their number a multiple of kTileGroup. The tiling
// depends on the problem's size only, never on the thread count: Eigen's GEMM gives the last rows of
// a product (here a tile's last columns) split accumulators, so the bits of a column depend on where
// it falls in its tile, and a thread-count-dependent tiling made them depend on OMP_NUM_THREADS. The
// GEMMs run single-threaded inside our parallel loops; Eigen's own GEMM threading is never used (see
// SerialEigen).
Tiling plan_tiles(int64_t cols, int64_t rows, int64_t elem_bytes, bool parallel) {
  const int64_t group = parallel ? kTileGroup : 1;
  int64_t width = std::max(kMinTileCols, kColTileBytes / std::max<int64_t>(1, rows * elem_bytes));
  if (parallel) width = std::min(width, std::max(kMinSplitCols, (cols + group - 1) / group));
  width = std::max<int64_t>(1, std::min(width, cols));
  int64_t count = (cols + width - 1) / width;
  if (count > 1) {
    count = (count + group - 1) / group * group;
    width = std::max<int64_t>(1, (cols + count - 1) / count);
    count = (cols + width - 1) / width;
  }
  return {cols, width, std::max<int64_t>(1, count)};
}

// Per-thread scratch buffers, grown on demand and kept across calls (the OpenMP pool's threads live
// as long as the process), so training steps do not re-allocate megabytes of column tiles. Poisoned
// on every take when the allocator's poison is on (core/allocator.h): no caller may read what an
// earlier call left in them.
enum Slot { kColSlot, kRowsSlot, kAccSlot, kSlotCount };
template <typename T>
T* scratch(Slot slot, int64_t n) {
  thread_local std::vector<T> bufs[kSlotCount];
  std::vector<T>& b = bufs[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(n);
  cpu_poison_fill(b.data(), sizeof(T) * static_cast<size_t>(n));
  return b.data();
}

// Columns [q0, q1) of t (N, C, vol) as a (C, q1 - q0) matrix: a view into t when the tile lies in one
// sample, else a copy gathered into buf.
template <typename T>
ConstMapR<T> gather_cols(const T* t, int64_t c, int64_t vol, int64_t q0, int64_t q1, T* buf) {
  const int64_t width = q1 - q0;
  if (q0 / vol == (q1 - 1) / vol)
    return ConstMapR<T>(t + (q0 / vol) * c * vol + q0 % vol, c, width, Eigen::OuterStride<>(vol));
  for (int64_t q = q0; q < q1;) {
    const int64_t n = q / vol, v = q % vol, run = std::min(vol - v, q1 - q);
    for (int64_t ch = 0; ch < c; ++ch) std::copy_n(t + (n * c + ch) * vol + v, run, buf + ch * width + (q - q0));
    q += run;
  }
  return ConstMapR<T>(buf, c, width, Eigen::OuterStride<>(width));
}

// The adjoint of gather_cols for a copied block: t's columns [q0, q1) = buf.
template <typename T>
void scatter_cols(const T* buf, int64_t c, int64_t vol, int64_t q0, int64_t q1, T* t) {
  const int64_t width = q1 - q0;
  for (int64_t q = q0; q < q1;) {
    const int64_t n = q / vol, v = q % vol, run = std::min(vol - v, q1 - q);
    for (int64_t ch = 0; ch < c; ++ch) std::copy_n(buf + ch * width + (q - q0), run, t + (n * c + ch) * vol + v);
    q += run;
  }
}

// The column block of x for tile [q0, q1): x itself for a pointwise conv within one sample, else vol2col.
template <typename T>
ConstMapR<T> col_block(const ConvGeometry& g, const T* x, int64_t q0, int64_t q1) {
  const int64_t vol = g.out_vol(), rows = g.col_rows();
  if (g.is_pointwise()) return gather_cols(x, g.cin, vol, q0, q1, scratch<T>(kColSlot, rows * (q1 - q0)));
  T* col = scratch<T>(kColSlot, rows * (q1 - q0));
  vol2col(g, x, q0, q1, col, q1 - q0);
  return ConstMapR<T>(col, rows, q1 - q0, Eigen::OuterStride<>(q1 - q0));
}

}  // namespace

template <typename T>
void conv3d_fprop(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  if (g.cols() == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (direct_fprop_applies(g)) return conv3d_fprop_direct(g, x, w, b, y);
  }
  const int64_t rows = g.col_rows(), vol = g.out_vol();
  const ConstMapR<T> W(w, g.cout, rows, Eigen::OuterStride<>(rows));
  const bool parallel = run_parallel(g);
  const Tiling tiles = plan_tiles(g.cols(), rows, sizeof(T), parallel);
  const SerialEigen serial(!(parallel && tiles.count > 1));
#pragma omp parallel for schedule(static) if (parallel && tiles.count > 1)
  for (int64_t t = 0; t < tiles.count; ++t) {
    const int64_t q0 = tiles.begin(t), q1 = tiles.end(t), width = q1 - q0;
    const ConstMapR<T> C = col_block(g, x, q0, q1);
    const bool one_sample = q0 / vol == (q1 - 1) / vol;
    T* out = one_sample ? y + (q0 / vol) * g.cout * vol + q0 % vol : scratch<T>(kRowsSlot, g.cout * width);
    MapR<T> Y(out, g.cout, width, Eigen::OuterStride<>(one_sample ? vol : width));
    Y.noalias() = W * C;
    if (b) Y.colwise() += ConstVecMap<T>(b, g.cout);
    if (!one_sample) scatter_cols(out, g.cout, vol, q0, q1, y);
  }
}

template <typename T>
void conv3d_dgrad(const ConvGeometry& g, const T* dy, const T* w, T* dx) {
  const int64_t kv = g.kvol();
  // Stride 1 on every axis: dx is the convolution of dy with the flipped, transposed kernel, the same
  // dilation and padding dil (k - 1) - p per axis,
  //   dx[n,c,z,y,x] = sum_{o,i,j,l} w[o,c,kd-1-i,kh-1-j,kw-1-l] * dy[n,o, z + dd i - (dd (kd-1) - pd), ...]
  // so it runs as an fprop (a GEMM with inner extent Cout kd kh kw, tiles in parallel, no scatter-add).
  // It applies when that padding is >= 0 and the flipped convolution's output is exactly dx (not so
  // for a conv_transpose3d with output_padding, whose adjoint has a shorter output than dx).
  Axes fp{};
  bool flipped = g.s == Axes{1, 1, 1};
  for (int a = 0; a < 3; ++a) {
    fp[a] = g.dil[a] * (g.k[a] - 1) - g.p[a];
    flipped = flipped && fp[a] >= 0;
  }
  if (flipped) {
    const ConvGeometry f = make_geometry(g.n, g.cout, g.cin, g.od, g.oh, g.ow, g.k, 1, fp, g.dil);
    flipped = f.od == g.d && f.oh == g.h && f.ow == g.w;
    if (flipped) {
      std::vector<T> wf(static_cast<size_t>(g.cin * g.cout * kv));  // (Cin, Cout, kd, kh, kw), flipped
      for (int64_t o = 0; o < g.cout; ++o)
        for (int64_t c = 0; c < g.cin; ++c)
          for (int64_t t = 0; t < kv; ++t) wf[(c * g.cout + o) * kv + (kv - 1 - t)] = w[(o * g.cin + c) * kv + t];
      conv3d_fprop(f, dy, wf.data(), static_cast<const T*>(nullptr), dx);
      return;
    }
  }
  const int64_t rows = g.col_rows(), vol = g.out_vol();
  std::fill(dx, dx + g.n * g.cin * g.in_vol(), T(0));
  if (g.cols() == 0) return;
  const ConstMapR<T> W(w, g.cout, rows, Eigen::OuterStride<>(rows));
  const bool parallel = run_parallel(g);
  const Tiling tiles = plan_tiles(g.cols(), rows, sizeof(T), parallel);
  // Parallel loops below run whenever `parallel` (the overlapping case always opens its region).
  const SerialEigen serial(!(parallel && (tiles.count > 1 || !g.windows_disjoint())));
  if (g.windows_disjoint()) {
    // Disjoint windows (e.g. the k2 s2 of conv_transpose3d's fprop): tiles scatter to disjoint parts of dx.
#pragma omp parallel for schedule(static) if (parallel && tiles.count > 1)
    for (int64_t t = 0; t < tiles.count; ++t) {
      const int64_t q0 = tiles.begin(t), q1 = tiles.end(t), width = q1 - q0;
      const ConstMapR<T> dY = gather_cols(dy, g.cout, vol, q0, q1, scratch<T>(kRowsSlot, g.cout * width));
      T* col = scratch<T>(kColSlot, rows * width);
      MapR<T>(col, rows, width, Eigen::OuterStride<>(width)).noalias() = W.transpose() * dY;
      col2vol(g, col, width, q0, q1, int64_t{0}, g.cin, dx);
    }
    return;
  }
  // Overlapping windows with stride > 1: tiles one after another; within a tile the threads share the
  // rows of the GEMM, then the scatter-add, split over input channels (which write disjoint planes of dx).
  // Row blocks fixed by the problem size (kTileGroup of them), not by the thread count, so that every
  // row's GEMM is the same whatever the number of threads.
  const int64_t row_block = parallel ? (rows + kTileGroup - 1) / kTileGroup : rows;
  for (int64_t t = 0; t < tiles.count; ++t) {
    const int64_t q0 = tiles.begin(t), q1 = tiles.end(t), width = q1 - q0;
    const ConstMapR<T> dY = gather_cols(dy, g.cout, vol, q0, q1, scratch<T>(kRowsSlot, g.cout * width));
    T* col = scratch<T>(kColSlot, rows * width);
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
      for (int64_t r0 = 0; r0 < rows; r0 += row_block) {
        const int64_t nr = std::min(row_block, rows - r0);
        MapR<T>(col + r0 * width, nr, width, Eigen::OuterStride<>(width)).noalias() =
            W.middleCols(r0, nr).transpose() * dY;
      }
#pragma omp for schedule(static)
      for (int64_t c = 0; c < g.cin; ++c) col2vol(g, static_cast<const T*>(col), width, q0, q1, c, c + 1, dx);
    }
  }
}

template <typename T>
void conv3d_wgrad(const ConvGeometry& g, const T* x, const T* dy, T* dw) {
  const int64_t rows = g.col_rows(), vol = g.out_vol(), wsize = g.cout * rows;
  if (g.cols() == 0) {
    std::fill(dw, dw + wsize, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (direct_wgrad_applies(g)) return conv3d_wgrad_direct(g, x, dy, dw);
  }
  const bool parallel = run_parallel(g);
  const Tiling tiles = plan_tiles(g.cols(), rows, sizeof(T), parallel);
  // The tiles are cut into `chunks` consecutive runs; each chunk accumulates its tiles' dY * col^T, in
  // tile order, into its own (Cout, K) buffer, and the buffers are then summed in chunk order. Chunks
  // depend on the problem size only, so the result depends neither on timing nor on the thread count.
  const int64_t chunks = std::min(tiles.count, parallel ? kTileGroup : int64_t{1});
  const SerialEigen serial(chunks == 1);
  T* acc = scratch<T>(kAccSlot, chunks * wsize);  // the calling thread's, shared with the team
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    T* part = acc + c * wsize;
    std::fill(part, part + wsize, T(0));
    MapR<T> A(part, g.cout, rows, Eigen::OuterStride<>(rows));
    for (int64_t t = c * tiles.count / chunks; t < (c + 1) * tiles.count / chunks; ++t) {
      const int64_t q0 = tiles.begin(t), q1 = tiles.end(t), width = q1 - q0;
      const ConstMapR<T> C = col_block(g, x, q0, q1);
      const ConstMapR<T> dY = gather_cols(dy, g.cout, vol, q0, q1, scratch<T>(kRowsSlot, g.cout * width));
      A.noalias() += dY * C.transpose();
    }
  }
#pragma omp parallel for schedule(static) if (chunks > 1 && parallel_worth(chunks * wsize))
  for (int64_t e = 0; e < wsize; ++e) {
    T s = acc[e];
    for (int64_t c = 1; c < chunks; ++c) s += acc[c * wsize + e];
    dw[e] = s;
  }
}

template <typename T>
void channel_sums(const T* t, int64_t n, int64_t c, int64_t vol, T* out) {
#pragma omp parallel for schedule(static) if (parallel_worth(n * c * vol))
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;  // one FP32 (vectorised) sum per plane, planes added in double
    for (int64_t i = 0; i < n; ++i) s += ConstVecMap<T>(t + (i * c + ch) * vol, vol).sum();
    out[ch] = static_cast<T>(s);
  }
}

template void conv3d_fprop<float>(const ConvGeometry&, const float*, const float*, const float*, float*);
template void conv3d_fprop<double>(const ConvGeometry&, const double*, const double*, const double*, double*);
template void conv3d_dgrad<float>(const ConvGeometry&, const float*, const float*, float*);
template void conv3d_dgrad<double>(const ConvGeometry&, const double*, const double*, double*);
template void conv3d_wgrad<float>(const ConvGeometry&, const float*, const float*, float*);
template void conv3d_wgrad<double>(const ConvGeometry&, const double*, const double*, double*);
template void channel_sums<float>(const float*, int64_t, int64_t, int64_t, float*);
template void channel_sums<double>(const double*, int64_t, int64_t, int64_t, double*);

}  // namespace halfgrad::ops::conv
