// norm_cuda.cu - batch_norm, instance_norm and group_norm on the GPU (the ops, their errors and
// autograd: norm.cpp).
//
// Math (a "group" g shares one mean and variance: channel c for batch_norm, M = N*S values; (n, c) for
// instance_norm, M = S values; (n, the cpg = C/G channels of group gc) for group_norm, M = cpg*S
// values, instance_norm being group_norm with cpg = 1; S = prod(spatial)):
//   forward   K = the group's first value (a shift: the one-pass variance then has no cancellation when
//             |mean| >> std), or 0 when it is inf or NaN; s1 = sum (x - K), s2 = sum (x - K)^2,
//             mean = K + s1/M, var = s2/M - (s1/M)^2 clamped at 0 keeping NaN (biased),
//             invstd = 1/sqrt(var + eps)
//             (evaluation: mean, var = running_mean, running_var),
//             y = (x - mean) * (w * invstd) + b,
//             batch_norm training: running_mean = (1-m) running_mean + m mean,
//                                  running_var  = (1-m) running_var  + m var * M/(M-1)   (unbiased)
//   backward  per (n, c): sdy = sum dy, sdyx = sum dy * (x - mean);  dbias_c = sum_n sdy,
//             dweight_c = sum_n invstd*sdyx;  per group: SA = sum_c w_c sdy, SB = sum_c w_c sdyx
//             dx = A dy + B (x - mean) + C0,  A = w_c*invstd,
//             B = -invstd^3 SB / M, C0 = -invstd SA / M  (training; in evaluation dx = A dy alone)
// Every op is the same three passes, reading x (and dy) twice and writing once:
//   1. reduce   per block, FP32 sums per thread, combined in FP64 -> partials (FP64) in a buffer
//   2. finalize one block per channel (batch_norm) or per group column gc (the groups (n, gc) of every
//               sample) sums its groups' partials in a fixed order (FP64) and writes the per-(n, c)
//               coefficients (m, A, B, C0) as float; forward also saves (mean, invstd) per group.
//               For group_norm that is C/G blocks, each walking its cpg channels one block reduction
//               (~1 us) at a time: a few groups of many channels (G = 1, C = 320) make this pass
//               serial.
//   3. apply    out = A dy + B (x - m) + C0 (forward: A unused, B = w invstd, C0 = b)
// Bytes: forward 1 read (stats) + 1 read + 1 write of x; backward 2 reads (x, dy) + 2 reads + 1 write.
//
// Shapes and layouts: x, dy, y, dx (N, C, *spatial) in one memory format, float or half:
//   NCDHW  the (n, c) "chunk" is S contiguous values. A block takes one piece (kIters vectors per
//          thread) of one chunk: grid.x = N*C*P (P pieces per chunk), partial index = chunk*P + piece.
//   NDHWC  a (rows, C) matrix, rows = (n, s). A block takes a tile of tile_rows rows of one "sample"
//          (all N*S rows for batch_norm, the S rows of sample n for instance_norm) and a slice of
//          channel vectors: threads (ro, cv), cv the fastest, so a warp reads whole rows (coalesced);
//          thread (ro, cv) walks rows ro, ro + R, ... of the tile holding V channels' sums in
//          registers, and the block sums its R row-threads through shared memory.
//          grid = (samples * T tiles, channel slices), partial index = (sample*T + tile)*C + c.
//   Loads and stores are V-wide vectors (16 bytes: 8 halfs or 4 floats) when S (NCDHW) or C (NDHWC)
//   is a multiple of V, else scalar (V = 1). Buffers come from the allocator 256-byte aligned.
//   Per-channel tensors: weight, bias, running stats float32 [C]; saved (2, G), coef (4, N*C) (the
//   per-sample norms) or (4, C) (batch_norm) float32. Partials are per (n, c) chunk in every norm.
// Non-finite values propagate as in PyTorch and as norm.cpp: a NaN makes its group's mean, var, y and
// running stats NaN; an inf among finite values gives mean +-inf and var NaN (inf - inf).
// Precision: x, dy, y, dx float or half (loaded as half, math in FP32, rounded once). Each thread sums
// at most 64 (NCDHW) or kMaxTileIters (NDHWC) shifted values per channel in FP32; everything above
// that (block, grid, group) is FP64, in a fixed order: results do not depend on timing.
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/norm/norm_cuda.h"
#include "ops/norm/norm_reduce.cuh"

#include <algorithm>
#include <type_traits>

namespace halfgrad::cuda {
namespace {

using norm_reduce::block_sum2;
using norm_reduce::kThreads;
using norm_reduce::norm_shift;
// NCDHW: each thread of a piece loads kIters vectors: 64 halfs / 32 floats per thread, a piece of
// 16 Ki halfs: big enough to amortise the block reduction, small enough to give 4096 blocks for the
// U-Net's first layer.
constexpr int kIters = 8;
// NDHWC: the grid is sized to about kTargetBlocks blocks (~8 waves of 2 blocks per SM on 132 SMs)
// with at most kMaxTileIters rows per thread (the bound on a thread's FP32 sum).
constexpr int64_t kTargetBlocks = 2048;
constexpr int64_t kMaxTileIters = 256;

// V consecutive elements moved as one 16-byte (or narrower) load / store.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> load_vec(const T* p) { return *reinterpret_cast<const Vec<T, V>*>(p); }
template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, V>& v) { *reinterpret_cast<Vec<T, V>*>(p) = v; }

struct NormGeo {
  int64_t N, C, S;
  bool per_sample;     // instance_norm, group_norm: groups within each sample
  int64_t cpg;         // channels per group (per_sample): C / G; 1 for instance_norm and batch_norm
  bool channels_last;  // NDHWC
  // NCDHW
  int64_t P;      // pieces per chunk
  int64_t piece;  // elements per piece (a multiple of V)
  // NDHWC
  int64_t samples;    // N (instance_norm) or 1 (batch_norm: all N*S rows are one sample)
  int64_t rows;       // rows per sample: S or N*S
  int64_t T;          // tiles per sample
  int64_t tile_rows;  // rows per tile (a multiple of R)
  int CVb;            // channel vectors per block slice
  int R;              // rows in flight per block (kThreads / CVb)
  int slices;         // channel slices (grid.y)
  int64_t items;      // partials per array: grid.x (NCDHW) or grid.x * C (NDHWC)

  __host__ __device__ int64_t groups() const { return per_sample ? N * C / cpg : C; }
  __host__ __device__ int64_t group_size() const { return per_sample ? cpg * S : N * S; }
  // Coefficient columns: one per (n, c) for the per-sample norms, one per channel for batch_norm.
  __host__ __device__ int64_t coefs() const { return per_sample ? N * C : C; }
  // Blocks of the finalize kernels: one per group column (per-sample norms) or channel.
  __host__ __device__ int64_t columns() const { return per_sample ? C / cpg : C; }
  // The group of channel c of sample n (n = 0 for batch_norm).
  __device__ int64_t group_of(int64_t n, int64_t c) const { return per_sample ? (n * C + c) / cpg : c; }
  // Partials of the group of (sample n, channel c) (n = 0 for batch_norm): J of them, j-th at index(j).
  __device__ int64_t partials_per_group() const { return channels_last ? T : (per_sample ? P : N * P); }
  __device__ int64_t partial_index(int64_t n, int64_t c, int64_t j) const {
    if (!channels_last) return per_sample ? (n * C + c) * P + j : ((j / P) * C + c) * P + j % P;
    return per_sample ? (n * T + j) * C + c : j * C + c;
  }
  // Offset of the group's first value (the shift K).
  __device__ int64_t first_offset(int64_t n, int64_t c) const {
    return channels_last ? n * S * C + c : (n * C + c) * S;
  }
};

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- pass 1: reduce -------------------------------------------------------------------------------
// kGrad false: s1 = sum (x - K), s2 = sum (x - K)^2, K read from x.
// kGrad true:  s1 = sum dy,      s2 = sum dy (x - mean), mean = saved[g].

// x, dy (N, C, S) NCDHW; part[2][items].
template <typename T, int V, bool kGrad>
__global__ void __launch_bounds__(kThreads)
    reduce_ncdhw_kernel(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ saved, NormGeo g,
                        double* __restrict__ part) {
  const int64_t chunk = blockIdx.x / g.P, p = blockIdx.x % g.P, c = chunk % g.C;
  const int64_t grp = g.per_sample ? chunk / g.cpg : c;
  // The group's first value: chunk grp*cpg (per-sample norms) or chunk (0, c) (batch_norm), at chunk*S.
  const float shift = kGrad ? saved[grp] : norm_shift(to_float(x[(g.per_sample ? grp * g.cpg : c) * g.S]));
  const int64_t begin = chunk * g.S + p * g.piece;
  const int64_t len = min64(g.piece, g.S - p * g.piece);
  float s1 = 0.f, s2 = 0.f;
#pragma unroll 4
  for (int64_t i = int64_t(threadIdx.x) * V; i < len; i += int64_t(kThreads) * V) {
    const Vec<T, V> xv = load_vec<T, V>(x + begin + i);
    if constexpr (kGrad) {
      const Vec<T, V> dv = load_vec<T, V>(dy + begin + i);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float d = to_float(dv.v[v]);
        s1 += d;
        s2 = fmaf(d, to_float(xv.v[v]) - shift, s2);
      }
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float d = to_float(xv.v[v]) - shift;
        s1 += d;
        s2 = fmaf(d, d, s2);
      }
    }
  }
  double a = s1, b = s2;
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    part[blockIdx.x] = a;
    part[g.items + blockIdx.x] = b;
  }
}

// x, dy (N, S, C) NDHWC; part[2][items].
template <typename T, int V, bool kGrad>
__global__ void __launch_bounds__(kThreads)
    reduce_ndhwc_kernel(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ saved, NormGeo g,
                        double* __restrict__ part) {
  __shared__ float sh1[kThreads * V], sh2[kThreads * V];  // [ro][cvl*V + v]: 16 KiB for halfs
  const int64_t sample = blockIdx.x / g.T, t = blockIdx.x % g.T;
  const int cvl = threadIdx.x % g.CVb, ro = threadIdx.x / g.CVb;
  const int64_t cv = int64_t(blockIdx.y) * g.CVb + cvl;
  const int width = g.CVb * V;
  float s1[V], s2[V];
#pragma unroll
  for (int v = 0; v < V; ++v) s1[v] = s2[v] = 0.f;
  if (ro < g.R && cv * V < g.C) {
    const int64_t c0 = cv * V;
    float shift[V];
    // The V channels may lie in different groups (cpg not a multiple of V): one shift each, the
    // group's mean (kGrad) or its first value (row 0 of the sample, the group's first channel).
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if constexpr (kGrad) shift[v] = saved[g.group_of(sample, c0 + v)];
      else shift[v] = norm_shift(to_float(x[sample * g.rows * g.C + ((c0 + v) / g.cpg) * g.cpg]));
    }
    const int64_t r_end = min64(g.rows, (t + 1) * g.tile_rows);
    const T* xs = x + sample * g.rows * g.C + c0;
    const T* ds = kGrad ? dy + sample * g.rows * g.C + c0 : nullptr;
#pragma unroll 4
    for (int64_t r = t * g.tile_rows + ro; r < r_end; r += g.R) {
      const Vec<T, V> xv = load_vec<T, V>(xs + r * g.C);
      if constexpr (kGrad) {
        const Vec<T, V> dv = load_vec<T, V>(ds + r * g.C);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float d = to_float(dv.v[v]);
          s1[v] += d;
          s2[v] = fmaf(d, to_float(xv.v[v]) - shift[v], s2[v]);
        }
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float d = to_float(xv.v[v]) - shift[v];
          s1[v] += d;
          s2[v] = fmaf(d, d, s2[v]);
        }
      }
    }
  }
  if (ro < g.R) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      sh1[ro * width + cvl * V + v] = s1[v];
      sh2[ro * width + cvl * V + v] = s2[v];
    }
  }
  __syncthreads();
  // Column sums over the R row-threads, in row order, FP64.
  for (int col = threadIdx.x; col < width; col += kThreads) {
    const int64_t c = int64_t(blockIdx.y) * width + col;
    if (c >= g.C) continue;
    double a = 0, b = 0;
    for (int r = 0; r < g.R; ++r) {
      a += sh1[r * width + col];
      b += sh2[r * width + col];
    }
    part[int64_t(blockIdx.x) * g.C + c] = a;
    part[g.items + int64_t(blockIdx.x) * g.C + c] = b;
  }
}

// ---- pass 2: finalize (one block per channel c, its groups in order) -------------------------------

// FP64 sums of the group (n, c)'s partials in index order; valid in thread 0. Every thread calls it.
__device__ void sum_group(const NormGeo& g, const double* __restrict__ part, int64_t n, int64_t c, double& s1,
                          double& s2) {
  const int64_t J = g.partials_per_group();
  double a = 0, b = 0;
  for (int64_t j = threadIdx.x; j < J; j += kThreads) {
    const int64_t i = g.partial_index(n, c, j);
    a += part[i];
    b += part[g.items + i];
  }
  block_sum2(a, b);
  s1 = a;
  s2 = b;
}

// saved (2, G) = (mean, invstd); coef (4, G) = (m, A, B, C0) for the forward apply; running stats
// updated when batch_stats (batch_norm only) or read when not. part is null without batch_stats.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    finalize_forward_kernel(const T* __restrict__ x, NormGeo g, const double* __restrict__ part,
                            const float* __restrict__ w, const float* __restrict__ b, float* rm, float* rv,
                            double momentum, double eps, float* __restrict__ saved, float* __restrict__ coef) {
  const int64_t col = blockIdx.x, G = g.groups(), NC = g.coefs(), samples = g.per_sample ? g.N : 1;
  const int64_t c_begin = g.per_sample ? col * g.cpg : col, c_end = c_begin + (g.per_sample ? g.cpg : 1);
  const double M = static_cast<double>(g.group_size());
  for (int64_t n = 0; n < samples; ++n) {
    double s1 = 0, s2 = 0;
    if (part)
      for (int64_t c = c_begin; c < c_end; ++c) {  // the group's chunks in channel order (FP64)
        double a = 0, b2 = 0;
        sum_group(g, part, n, c, a, b2);
        s1 += a;
        s2 += b2;
      }
    if (threadIdx.x != 0) continue;
    const int64_t grp = g.group_of(n, c_begin);
    double mean, var;
    if (part) {
      const double K = norm_shift(to_float(x[g.first_offset(n, c_begin)]));
      const double m1 = s1 / M;
      mean = K + m1;
      var = s2 / M - m1 * m1;
      if (var < 0.0) var = 0.0;  // rounding; not fmax(0.0, var), which turns a NaN into 0
      if (!g.per_sample && rm) rm[col] = static_cast<float>((1 - momentum) * rm[col] + momentum * mean);
      if (!g.per_sample && rv) rv[col] = static_cast<float>((1 - momentum) * rv[col] + momentum * var * M / (M - 1));
    } else {
      mean = rm[col];
      var = rv[col];
    }
    const double invstd = 1.0 / sqrt(var + eps);
    saved[grp] = static_cast<float>(mean);
    saved[G + grp] = static_cast<float>(invstd);
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t k = g.per_sample ? n * g.C + c : c;
      const double wc = w ? w[c] : 1.0, bc = b ? b[c] : 0.0;
      coef[k] = static_cast<float>(mean);
      coef[NC + k] = 0.f;
      coef[2 * NC + k] = static_cast<float>(wc * invstd);
      coef[3 * NC + k] = static_cast<float>(bc);
    }
  }
}

// coef (4, NC) = (mean, A, B, C0) for dx; dw, db [C] (each may be null). part is null when neither the
// mean terms (evaluation) nor dweight / dbias need the sums. One block per group column (or channel):
// first the coefficients per sample, then dweight / dbias per channel summed over the samples in FP64
// (the partials are read twice: they are a few per chunk).
__global__ void __launch_bounds__(kThreads)
    finalize_backward_kernel(NormGeo g, const double* __restrict__ part, const float* __restrict__ w,
                             const float* __restrict__ saved, bool batch_stats, float* __restrict__ coef,
                             float* __restrict__ dw, float* __restrict__ db) {
  const int64_t col = blockIdx.x, G = g.groups(), NC = g.coefs(), samples = g.per_sample ? g.N : 1;
  const int64_t c_begin = g.per_sample ? col * g.cpg : col, c_end = c_begin + (g.per_sample ? g.cpg : 1);
  const double M = static_cast<double>(g.group_size());
  for (int64_t n = 0; n < samples; ++n) {
    double SA = 0, SB = 0;  // sum_c w_c sdy_c, sum_c w_c sdyx_c over the group's channels (thread 0)
    if (part)
      for (int64_t c = c_begin; c < c_end; ++c) {
        double sdy = 0, sdyx = 0;
        sum_group(g, part, n, c, sdy, sdyx);
        const double wc = w ? w[c] : 1.0;
        SA += wc * sdy;
        SB += wc * sdyx;
      }
    if (threadIdx.x != 0) continue;
    const int64_t grp = g.group_of(n, c_begin);
    const double invstd = saved[G + grp];
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t k = g.per_sample ? n * g.C + c : c;
      coef[k] = saved[grp];
      coef[NC + k] = static_cast<float>((w ? w[c] : 1.0) * invstd);
      coef[2 * NC + k] = batch_stats ? static_cast<float>(-invstd * invstd * invstd * SB / M) : 0.f;
      coef[3 * NC + k] = batch_stats ? static_cast<float>(-invstd * SA / M) : 0.f;
    }
  }
  if (!part || (!dw && !db)) return;
  for (int64_t c = c_begin; c < c_end; ++c) {
    double dwc = 0, dbc = 0;
    for (int64_t n = 0; n < samples; ++n) {
      double sdy = 0, sdyx = 0;
      sum_group(g, part, n, c, sdy, sdyx);
      if (threadIdx.x != 0) continue;
      dbc += sdy;
      dwc += saved[G + g.group_of(n, c)] * sdyx;
    }
    if (threadIdx.x == 0) {
      if (dw) dw[c] = static_cast<float>(dwc);
      if (db) db[c] = static_cast<float>(dbc);
    }
  }
}

// ---- pass 3: apply  out = A dy + B (x - m) + C0  (kGrad false: no dy term) -------------------------
// x_terms false (the backward in evaluation, B = C0 = 0): out = A dy alone, so that a NaN or inf in x
// or in the running mean does not reach dx through 0 * (x - m) (PyTorch's dx = dy * w * invstd).

template <typename T, int V, bool kGrad>
__global__ void __launch_bounds__(kThreads)
    apply_ncdhw_kernel(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ coef, NormGeo g,
                       T* __restrict__ out, bool x_terms) {
  const int64_t chunk = blockIdx.x / g.P, p = blockIdx.x % g.P, c = chunk % g.C;
  const int64_t k = g.per_sample ? chunk : c, NC = g.coefs();  // the chunk's coefficient column
  const float m = coef[k], A = coef[NC + k], B = coef[2 * NC + k], C0 = coef[3 * NC + k];
  const int64_t begin = chunk * g.S + p * g.piece;
  const int64_t len = min64(g.piece, g.S - p * g.piece);
#pragma unroll 4
  for (int64_t i = int64_t(threadIdx.x) * V; i < len; i += int64_t(kThreads) * V) {
    const Vec<T, V> xv = load_vec<T, V>(x + begin + i);
    Vec<T, V> o;
    if constexpr (kGrad) {
      const Vec<T, V> dv = load_vec<T, V>(dy + begin + i);
#pragma unroll
      for (int v = 0; v < V; ++v)
        o.v[v] = from_float<T>(x_terms ? A * to_float(dv.v[v]) + B * (to_float(xv.v[v]) - m) + C0 : A * to_float(dv.v[v]));
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = from_float<T>((to_float(xv.v[v]) - m) * B + C0);
    }
    store_vec<T, V>(out + begin + i, o);
  }
}

template <typename T, int V, bool kGrad>
__global__ void __launch_bounds__(kThreads)
    apply_ndhwc_kernel(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ coef, NormGeo g,
                       T* __restrict__ out, bool x_terms) {
  const int64_t sample = blockIdx.x / g.T, t = blockIdx.x % g.T;
  const int cvl = threadIdx.x % g.CVb, ro = threadIdx.x / g.CVb;
  const int64_t cv = int64_t(blockIdx.y) * g.CVb + cvl;
  if (ro >= g.R || cv * V >= g.C) return;
  const int64_t c0 = cv * V, NC = g.coefs(), k0 = (g.per_sample ? sample * g.C : 0) + c0;
  float m[V], A[V], B[V], C0[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    m[v] = coef[k0 + v];
    A[v] = coef[NC + k0 + v];
    B[v] = coef[2 * NC + k0 + v];
    C0[v] = coef[3 * NC + k0 + v];
  }
  const int64_t base = sample * g.rows * g.C + c0;
  const int64_t r_end = min64(g.rows, (t + 1) * g.tile_rows);
#pragma unroll 4
  for (int64_t r = t * g.tile_rows + ro; r < r_end; r += g.R) {
    const int64_t off = base + r * g.C;
    const Vec<T, V> xv = load_vec<T, V>(x + off);
    Vec<T, V> o;
    if constexpr (kGrad) {
      const Vec<T, V> dv = load_vec<T, V>(dy + off);
#pragma unroll
      for (int v = 0; v < V; ++v)
        o.v[v] = from_float<T>(x_terms ? A[v] * to_float(dv.v[v]) + B[v] * (to_float(xv.v[v]) - m[v]) + C0[v]
                                       : A[v] * to_float(dv.v[v]));
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = from_float<T>((to_float(xv.v[v]) - m[v]) * B[v] + C0[v]);
    }
    store_vec<T, V>(out + off, o);
  }
}

// ---- launchers ------------------------------------------------------------------------------------

NormGeo make_geo(const Tensor& x, bool per_sample, int64_t cpg, int V) {
  NormGeo g{};
  g.N = x.shape()[0];
  g.C = x.shape()[1];
  g.S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) g.S *= x.shape()[d];
  g.per_sample = per_sample;
  g.cpg = per_sample ? cpg : 1;
  g.channels_last = x.is_channels_last();
  if (!g.channels_last) {
    g.piece = int64_t(kThreads) * V * kIters;
    g.P = (g.S + g.piece - 1) / g.piece;
    g.items = g.N * g.C * g.P;
    return g;
  }
  const int64_t CV = g.C / V;
  g.CVb = static_cast<int>(std::min<int64_t>(CV, kThreads));
  g.R = kThreads / g.CVb;
  g.slices = static_cast<int>((CV + g.CVb - 1) / g.CVb);
  g.samples = per_sample ? g.N : 1;
  g.rows = per_sample ? g.S : g.N * g.S;
  const int64_t total_rows = g.samples * g.rows;
  const int64_t want = (total_rows + g.R * kTargetBlocks - 1) / (g.R * kTargetBlocks);
  const int64_t iters = std::min<int64_t>(std::max<int64_t>(want, 1), kMaxTileIters);
  g.tile_rows = g.R * iters;
  g.T = (g.rows + g.tile_rows - 1) / g.tile_rows;
  g.items = g.samples * g.T * g.C;
  return g;
}

dim3 grid_of(const NormGeo& g) {
  if (!g.channels_last) return dim3(static_cast<unsigned>(g.N * g.C * g.P));
  return dim3(static_cast<unsigned>(g.samples * g.T), static_cast<unsigned>(g.slices));
}

// Calls f(T{}, std::integral_constant<int, V>{}) for x's dtype, V = 16 bytes' worth of elements when
// the vector dimension (S for NCDHW, C for NDHWC) is a multiple of it, else 1.
template <typename F>
void dispatch_vec(const Tensor& x, F&& f) {
  const int64_t C = x.shape()[1];
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.shape()[d];
  const int64_t vdim = x.is_channels_last() ? C : S;
  if (x.dtype() == kFloat16) {
    if (vdim % 8 == 0) f(__half{}, std::integral_constant<int, 8>{});
    else f(__half{}, std::integral_constant<int, 1>{});
  } else if (x.dtype() == kBFloat16) {
    if (vdim % 8 == 0) f(__nv_bfloat16{}, std::integral_constant<int, 8>{});
    else f(__nv_bfloat16{}, std::integral_constant<int, 1>{});
  } else {
    if (vdim % 4 == 0) f(float{}, std::integral_constant<int, 4>{});
    else f(float{}, std::integral_constant<int, 1>{});
  }
}

template <typename T>
const T* dptr(const Tensor& t) { return dev<T>(t); }
template <typename T>
T* dptr_mut(const Tensor& t) { return dev<T>(t); }
const float* fptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* fptr_mut(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

void check_x(const char* op, const Tensor& x) {
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  HG_CHECK(x.dtype() == kFloat32 || is_reduced_float(x.dtype()),
           op << ": CUDA input must be float32, float16 or bfloat16, got " << dtype_name(x.dtype()) << " of shape "
              << shape_str(x.shape()));
  HG_CHECK(x.dim() >= 2, op << ": input must be (N, C, *spatial), got shape " << shape_str(x.shape()));
  HG_CHECK(!x.is_channels_last() || x.dim() == 5,
           op << ": channels-last input must be 5-D, got " << shape_str(x.shape()));
}

void check_param(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  HG_CHECK(t.is_cuda() && t.dtype() == kFloat32 && t.dim() == 1 && t.shape()[0] == x.shape()[1],
           op << ": " << what << " must be a float32 CUDA tensor of shape [" << x.shape()[1] << "] for input "
              << shape_str(x.shape()) << ", got " << dtype_name(t.dtype()) << " " << shape_str(t.shape()) << " on "
              << device_name(t.device()));
}

}  // namespace

NormCudaForward norm_forward(const NormCudaArgs& a, const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var) {
  check_x(a.op, x);
  HG_CHECK(a.channels_per_group >= 1 && x.shape()[1] % a.channels_per_group == 0,
           a.op << ": " << x.shape()[1] << " channels do not split into groups of " << a.channels_per_group);
  check_param(a.op, "weight", weight, x);
  check_param(a.op, "bias", bias, x);
  check_param(a.op, "running_mean", running_mean, x);
  check_param(a.op, "running_var", running_var, x);
  HG_CHECK(a.batch_stats || (running_mean.defined() && running_var.defined() && !a.per_sample),
           a.op << ": evaluation mode needs running_mean and running_var (input " << shape_str(x.shape()) << ")");
  NormCudaForward r;
  r.y = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  if (x.numel() == 0) return r;
  dispatch_vec(x, [&](auto tag, auto vtag) {
    using T = decltype(tag);
    constexpr int V = decltype(vtag)::value;
    const NormGeo g = make_geo(x, a.per_sample, a.channels_per_group, V);
    const int64_t G = g.groups();
    r.saved = Tensor::empty({2, G}, kFloat32, Device::CUDA);
    Tensor coef = Tensor::empty({4, g.coefs()}, kFloat32, Device::CUDA);
    Tensor part;
    const T* px = dptr<T>(x);
    if (a.batch_stats) {
      part = Tensor::empty({2 * g.items}, kFloat64, Device::CUDA);
      if (g.channels_last)
        reduce_ndhwc_kernel<T, V, false><<<grid_of(g), kThreads, 0, stream()>>>(px, nullptr, nullptr, g,
                                                                                part.data<double>());
      else
        reduce_ncdhw_kernel<T, V, false><<<grid_of(g), kThreads, 0, stream()>>>(px, nullptr, nullptr, g,
                                                                                part.data<double>());
      HG_CUDA_LAUNCH_CHECK(a.op);
    }
    finalize_forward_kernel<T><<<static_cast<unsigned>(g.columns()), kThreads, 0, stream()>>>(
        px, g, part.defined() ? part.data<double>() : nullptr, fptr(weight), fptr(bias), fptr_mut(running_mean),
        fptr_mut(running_var), a.momentum, a.eps, r.saved.data<float>(), coef.data<float>());
    HG_CUDA_LAUNCH_CHECK(a.op);
    if (g.channels_last)
      apply_ndhwc_kernel<T, V, false><<<grid_of(g), kThreads, 0, stream()>>>(px, nullptr, coef.data<float>(), g,
                                                                             dptr_mut<T>(r.y), true);
    else
      apply_ncdhw_kernel<T, V, false><<<grid_of(g), kThreads, 0, stream()>>>(px, nullptr, coef.data<float>(), g,
                                                                             dptr_mut<T>(r.y), true);
    HG_CUDA_LAUNCH_CHECK(a.op);
  });
  if (a.batch_stats) {  // finalize_forward_kernel updated the running statistics in place
    if (running_mean.defined()) running_mean.bump_version();
    if (running_var.defined()) running_var.bump_version();
  }
  return r;
}

NormCudaGrads norm_backward(const NormCudaArgs& a, const Tensor& x, const Tensor& weight, const Tensor& saved,
                            const Tensor& dy_in, bool need_x, bool need_w, bool need_b) {
  check_x(a.op, x);
  check_param(a.op, "weight", weight, x);
  HG_CHECK(dy_in.defined() && dy_in.shape() == x.shape(),
           a.op << ": backward got a gradient of shape " << (dy_in.defined() ? shape_str(dy_in.shape()) : "(undefined)")
                << " for input " << shape_str(x.shape()));
  // The gradient in x's device, dtype and format (a no-op in the usual case).
  Tensor dy = dy_in.copy_to(Device::CUDA);
  if (dy.dtype() != x.dtype()) dy = dy.cast_copy(x.dtype());
  dy = dy.format_copy(x.memory_format());
  NormCudaGrads r;
  const int64_t C = x.shape()[1];
  if (need_x) r.dx = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  if (need_w) r.dweight = Tensor::empty({C}, kFloat32, Device::CUDA);
  if (need_b) r.dbias = Tensor::empty({C}, kFloat32, Device::CUDA);
  if (x.numel() == 0) {
    if (need_w) r.dweight.zero_();
    if (need_b) r.dbias.zero_();
    return r;
  }
  dispatch_vec(x, [&](auto tag, auto vtag) {
    using T = decltype(tag);
    constexpr int V = decltype(vtag)::value;
    const NormGeo g = make_geo(x, a.per_sample, a.channels_per_group, V);
    HG_CHECK(saved.defined() && saved.is_cuda() && saved.numel() == 2 * g.groups(),
             a.op << ": backward needs the forward's saved statistics (2, " << g.groups() << ")");
    Tensor coef = Tensor::empty({4, g.coefs()}, kFloat32, Device::CUDA);
    const T* px = dptr<T>(x);
    const T* pd = dptr<T>(dy);
    Tensor part;
    if (a.batch_stats || need_w || need_b) {
      part = Tensor::empty({2 * g.items}, kFloat64, Device::CUDA);
      if (g.channels_last)
        reduce_ndhwc_kernel<T, V, true><<<grid_of(g), kThreads, 0, stream()>>>(px, pd, saved.data<float>(), g,
                                                                               part.data<double>());
      else
        reduce_ncdhw_kernel<T, V, true><<<grid_of(g), kThreads, 0, stream()>>>(px, pd, saved.data<float>(), g,
                                                                               part.data<double>());
      HG_CUDA_LAUNCH_CHECK(a.op);
    }
    finalize_backward_kernel<<<static_cast<unsigned>(g.columns()), kThreads, 0, stream()>>>(
        g, part.defined() ? part.data<double>() : nullptr, fptr(weight), saved.data<float>(), a.batch_stats,
        coef.data<float>(), fptr_mut(r.dweight), fptr_mut(r.dbias));
    HG_CUDA_LAUNCH_CHECK(a.op);
    if (!need_x) return;
    if (g.channels_last)
      apply_ndhwc_kernel<T, V, true><<<grid_of(g), kThreads, 0, stream()>>>(px, pd, coef.data<float>(), g,
                                                                            dptr_mut<T>(r.dx), a.batch_stats);
    else
      apply_ncdhw_kernel<T, V, true><<<grid_of(g), kThreads, 0, stream()>>>(px, pd, coef.data<float>(), g,
                                                                            dptr_mut<T>(r.dx), a.batch_stats);
    HG_CUDA_LAUNCH_CHECK(a.op);
  });
  return r;
}

}  // namespace halfgrad::cuda
