// conv_direct.cpp - FP32 3x3x3 stride-1 convolution kernels that read the padded input in place
// (math, register blocking and parallel mapping in conv_direct.h).
#include "ops/conv/conv_direct.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HALFGRAD_CONV_DIRECT 1
#else
#define HALFGRAD_CONV_DIRECT 0
#endif

namespace halfgrad::ops::conv {

namespace {

constexpr int64_t kLanes = 8;    // floats per AVX2 register
constexpr int kOutChannels = 4;  // output channels per register block
constexpr int kVectors = 3;      // fprop: vectors of 8 outputs per register block
constexpr int64_t kTaps = 3;     // the kernel's x extent: taps l = 0, 1, 2 of one (c, i, j) row
// Rows of outputs narrower than 4 waste half or more of each vector (see PlaneLayout); the
// column-tile GEMM does better there.
constexpr int64_t kMinRowWidth = 4;
// wgrad adds a block's 12 accumulators to memory after each run over outputs; runs of at least this many
// vectors keep that (and the call) under a tenth of the run's arithmetic.
constexpr int64_t kMinWgradVectors = 96;
// Samples padded together (so that the planes of small volumes from several samples can be shared out
// among the threads) as long as their padded copies fit in this many floats (16 MiB).
constexpr int64_t kPaddedGroupFloats = int64_t{4} << 20;

}  // namespace

bool direct_applies(const ConvGeometry& g) {
  return HALFGRAD_CONV_DIRECT && g.k == 3 && g.s == 1 && g.cols() > 0 && (g.ow % kLanes == 0 || g.ow >= kMinRowWidth);
}

#if HALFGRAD_CONV_DIRECT

namespace {

// The padded sample xp (Cin, D + 2p, H + 2p, W + 2p): its extents and strides.
struct Padded {
  int64_t dp, hp, wp;
  int64_t plane() const { return hp * wp; }
  int64_t channel() const { return dp * hp * wp; }
};

Padded padded_extents(const ConvGeometry& g) { return {g.d + 2 * g.p, g.h + 2 * g.p, g.w + 2 * g.p}; }

// How the vectors of 8 outputs of one output plane sit in xp (relative to the plane's first output).
//   exact (Wo a multiple of 8): Ho rows of Wo / 8 vectors; vector v is row v / vpr, x 8 (v % vpr).
//   flat (other Wo): the plane is computed on the padded row width Wp = Wo + 2 as one row of
//     ceil(Ho Wp / 8) vectors, vector v covering f = 8v .. 8v + 7 with f = y Wp + x. The lanes with
//     x >= Wo (or past the plane) are thrown away by fprop and meet a zero dy in wgrad, so a fraction
//     Wo / (Wo + 2) of the arithmetic is useful: 67% for Wo = 4, 86% for Wo = 12.
struct PlaneLayout {
  bool flat;
  int64_t rows, vpr;  // rows of vpr vectors, row stride Wp in xp
  int64_t nvec() const { return rows * vpr; }
  int64_t x_offset(int64_t v, int64_t wp) const { return (v / vpr) * wp + (v % vpr) * kLanes; }
};

PlaneLayout plane_layout(const ConvGeometry& g, const Padded& P) {
  if (g.ow % kLanes == 0) return {false, g.oh, g.ow / kLanes};
  return {true, 1, (g.oh * P.wp + kLanes - 1) / kLanes};
}

// Per-thread buffers kept across calls (the OpenMP pool's threads live as long as the process).
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(n);
  return buf.data();
}

// The flat layout's last vectors read up to 8 floats past a padded sample (the largest index read is
// Cin * Dp * Hp * Wp + 8), so the group's buffer ends in this many zeros.
constexpr int64_t kPaddedSlack = 16;

// Samples [n0, n0 + nb) of x, padded with zeros, into xp. An orphaned `omp for`: every thread of the
// enclosing region must call it (it ends in a barrier).
void pad_samples(const ConvGeometry& g, const Padded& P, const float* x, int64_t n0, int64_t nb, float* xp) {
#pragma omp for schedule(static)
  for (int64_t cz = 0; cz < nb * g.cin * P.dp; ++cz) {
    const int64_t nc = cz / P.dp, zi = cz % P.dp - g.p;  // nc = local sample * Cin + channel
    float* dst = xp + cz * P.plane();
    if (zi < 0 || zi >= g.d) {
      std::fill(dst, dst + P.plane(), 0.0f);
      continue;
    }
    const float* src = x + ((n0 * g.cin + nc) * g.d + zi) * g.h * g.w;
    for (int64_t yp = 0; yp < P.hp; ++yp) {
      float* row = dst + yp * P.wp;
      const int64_t yi = yp - g.p;
      if (yi < 0 || yi >= g.h) {
        std::fill(row, row + P.wp, 0.0f);
        continue;
      }
      std::fill(row, row + g.p, 0.0f);
      std::memcpy(row + g.p, src + yi * g.w, sizeof(float) * g.w);
      std::fill(row + g.p + g.w, row + P.wp, 0.0f);
    }
  }
}

// The padded-sample buffer (calling thread's, shared with its team) and how many samples it holds.
struct PaddedGroup {
  float* xp;
  int64_t samples;
};

PaddedGroup padded_group(const ConvGeometry& g, const Padded& P) {
  thread_local std::vector<float> buf;
  const int64_t per_sample = g.cin * P.channel();
  const int64_t nb = std::clamp<int64_t>(kPaddedGroupFloats / per_sample, 1, g.n);
  float* xp = scratch(buf, nb * per_sample + kPaddedSlack);
  std::fill(xp + nb * per_sample, xp + nb * per_sample + kPaddedSlack, 0.0f);
  return {xp, nb};
}

// xp offsets of the (c, i, j) tap rows, relative to an output's tap (0, 0, 0).
std::vector<int64_t> row_offsets(const ConvGeometry& g, const Padded& P) {
  std::vector<int64_t> off;
  off.reserve(g.cin * 9);
  for (int64_t c = 0; c < g.cin; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) off.push_back(c * P.channel() + i * P.plane() + j * P.wp);
  return off;
}

// ---- fprop -------------------------------------------------------------------------------------------

// MO output channels x NV vectors of 8 outputs. `rows` (c, i, j) rows of taps, each at xp offset
// rowoff[r] and with 3 x taps; wpk holds the block's weights as [r][l][MO]. Output vector v starts at
// xp + xbase[v] (its tap (0, 0, 0)) and at y + ybase[v] in each of the MO output channel planes.
template <int MO, int NV>
void fprop_block(const float* xp, const int64_t* rowoff, int64_t rows, const float* wpk, const float* bias,
                 const int64_t* xbase, float* y, int64_t ystride, const int64_t* ybase) {
  __m256 acc[MO][NV];
  for (int o = 0; o < MO; ++o) {
    const __m256 b = _mm256_set1_ps(bias ? bias[o] : 0.0f);
    for (int v = 0; v < NV; ++v) acc[o][v] = b;
  }
  const float* src[NV];
  for (int v = 0; v < NV; ++v) src[v] = xp + xbase[v];
  for (int64_t r = 0; r < rows; ++r, wpk += kTaps * MO) {
    const int64_t off = rowoff[r];
#pragma GCC unroll 3
    for (int l = 0; l < kTaps; ++l) {
      __m256 xv[NV];
      for (int v = 0; v < NV; ++v) xv[v] = _mm256_loadu_ps(src[v] + off + l);
      for (int o = 0; o < MO; ++o) {
        const __m256 wv = _mm256_broadcast_ss(wpk + l * MO + o);
        for (int v = 0; v < NV; ++v) acc[o][v] = _mm256_fmadd_ps(wv, xv[v], acc[o][v]);
      }
    }
  }
  for (int o = 0; o < MO; ++o)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(y + o * ystride + ybase[v], acc[o][v]);
}

using FpropBlock = void (*)(const float*, const int64_t*, int64_t, const float*, const float*, const int64_t*, float*,
                            int64_t, const int64_t*);
template <int MO>
constexpr FpropBlock fprop_for(int nv) {
  return nv == 1 ? fprop_block<MO, 1> : nv == 2 ? fprop_block<MO, 2> : fprop_block<MO, 3>;
}
FpropBlock fprop_kernel(int mo, int nv) {
  switch (mo) {
    case 1: return fprop_for<1>(nv);
    case 2: return fprop_for<2>(nv);
    case 3: return fprop_for<3>(nv);
    default: return fprop_for<4>(nv);
  }
}

// ---- wgrad -------------------------------------------------------------------------------------------

// A run of output planes for wgrad: plane q's outputs start at xp + xoff[q] (tap (0, 0, 0)) and at
// dy + doff[q]; each plane has `rows` rows of vpr vectors (row stride Wp in xp, vpr * 8 in dy).
struct PlaneRun {
  const int64_t* xoff;
  const int64_t* doff;
  int64_t planes, rows, vpr, wp;
};

// MO output channels x the 3 x taps of one (c, i, j) tap row (at xp offset `row`), summed over the
// run's outputs. dy's channel o is at dy + o * dystride. The 8 partial sums of (o, l) are added to
// out[o * ostride + l * 8 ..].
template <int MO>
void wgrad_block(const float* xp, int64_t row, const float* dy, int64_t dystride, const PlaneRun& run, float* out,
                 int64_t ostride) {
  __m256 acc[MO][kTaps];
  for (int o = 0; o < MO; ++o)
    for (int l = 0; l < kTaps; ++l) acc[o][l] = _mm256_setzero_ps();
  for (int64_t q = 0; q < run.planes; ++q)
    for (int64_t yy = 0; yy < run.rows; ++yy) {
      const float* xr = xp + run.xoff[q] + row + yy * run.wp;
      const float* d = dy + run.doff[q] + yy * run.vpr * kLanes;
      for (int64_t xv = 0; xv < run.vpr; ++xv) {
        const float* xs = xr + xv * kLanes;
        const __m256 x0 = _mm256_loadu_ps(xs), x1 = _mm256_loadu_ps(xs + 1), x2 = _mm256_loadu_ps(xs + 2);
        for (int o = 0; o < MO; ++o) {
          const __m256 dv = _mm256_loadu_ps(d + o * dystride + xv * kLanes);
          acc[o][0] = _mm256_fmadd_ps(dv, x0, acc[o][0]);
          acc[o][1] = _mm256_fmadd_ps(dv, x1, acc[o][1]);
          acc[o][2] = _mm256_fmadd_ps(dv, x2, acc[o][2]);
        }
      }
    }
  for (int o = 0; o < MO; ++o)
    for (int l = 0; l < kTaps; ++l) {
      float* p = out + o * ostride + l * kLanes;
      _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), acc[o][l]));
    }
}

using WgradBlock = void (*)(const float*, int64_t, const float*, int64_t, const PlaneRun&, float*, int64_t);
WgradBlock wgrad_kernel(int mo) {
  switch (mo) {
    case 1: return wgrad_block<1>;
    case 2: return wgrad_block<2>;
    case 3: return wgrad_block<3>;
    default: return wgrad_block<4>;
  }
}

}  // namespace

void conv3d_fprop_direct(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y) {
  HG_CHECK(direct_applies(g), "conv3d: internal error: direct kernel called for an unsupported geometry");
  const Padded P = padded_extents(g);
  const PlaneLayout L = plane_layout(g, P);
  const int64_t K = g.col_rows(), rows = g.cin * 9, ovol = g.out_vol(), oplane = g.oh * g.ow, nvec = L.nvec();
  // Weights packed per block of kOutChannels output channels as [k][o], k = (c, i, j, l) in w's order.
  std::vector<float> wp(static_cast<size_t>(g.cout * K));
  for (int64_t o0 = 0; o0 < g.cout; o0 += kOutChannels) {
    const int64_t mo = std::min<int64_t>(kOutChannels, g.cout - o0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t o = 0; o < mo; ++o) wp[o0 * K + k * mo + o] = w[(o0 + o) * K + k];
  }
  const std::vector<int64_t> rowoff = row_offsets(g, P);
  const PaddedGroup group = padded_group(g, P);
#pragma omp parallel
  {
    // flat layout: the block's outputs on the padded row width, before the valid ones are copied out
    thread_local std::vector<float> flat_buf;
    float* flat = L.flat ? scratch(flat_buf, kOutChannels * nvec * kLanes) : nullptr;
    for (int64_t n0 = 0; n0 < g.n; n0 += group.samples) {
      const int64_t nb = std::min(group.samples, g.n - n0);
      pad_samples(g, P, x, n0, nb, group.xp);
      // One output plane (of one sample) per iteration.
#pragma omp for schedule(static)
      for (int64_t nz = 0; nz < nb * g.od; ++nz) {
        const int64_t n = n0 + nz / g.od, z = nz % g.od;
        const int64_t xplane = (nz / g.od) * g.cin * P.channel() + z * P.plane();
        for (int64_t o0 = 0; o0 < g.cout; o0 += kOutChannels) {
          const int mo = static_cast<int>(std::min<int64_t>(kOutChannels, g.cout - o0));
          float* yb = y + (n * g.cout + o0) * ovol + z * oplane;
          float* out = L.flat ? flat : yb;
          const int64_t ostride = L.flat ? nvec * kLanes : ovol;
          for (int64_t v0 = 0; v0 < nvec; v0 += kVectors) {
            const int nv = static_cast<int>(std::min<int64_t>(kVectors, nvec - v0));
            int64_t xbase[kVectors], ybase[kVectors];
            for (int v = 0; v < nv; ++v) {
              xbase[v] = xplane + L.x_offset(v0 + v, P.wp);
              ybase[v] = (v0 + v) * kLanes;
            }
            fprop_kernel(mo, nv)(group.xp, rowoff.data(), rows, wp.data() + o0 * K, b ? b + o0 : nullptr, xbase,
                                 out, ostride, ybase);
          }
          if (L.flat)
            for (int64_t o = 0; o < mo; ++o)
              for (int64_t yy = 0; yy < g.oh; ++yy)
                std::memcpy(yb + o * ovol + yy * g.ow, flat + o * ostride + yy * P.wp, sizeof(float) * g.ow);
        }
      }
    }
  }
}

void conv3d_wgrad_direct(const ConvGeometry& g, const float* x, const float* dy, float* dw) {
  HG_CHECK(direct_applies(g), "conv3d: internal error: direct kernel called for an unsupported geometry");
  const Padded P = padded_extents(g);
  const PlaneLayout L = plane_layout(g, P);
  const int64_t K = g.col_rows(), rows = g.cin * 9, ovol = g.out_vol(), oplane = g.oh * g.ow, nvec = L.nvec();
  const int64_t wsize = g.cout * K;
  const std::vector<int64_t> rowoff = row_offsets(g, P);
  const PaddedGroup group = padded_group(g, P);
  // Planes per run: enough for kMinWgradVectors vectors (a run may span samples), but no more than
  // leaves every thread a run.
  const int64_t threads = omp_get_max_threads(), group_planes = group.samples * g.od;
  const int64_t run_planes = std::clamp<int64_t>((kMinWgradVectors + nvec - 1) / nvec, 1,
                                                 std::max<int64_t>(1, group_planes / threads));
  std::vector<float*> partial(omp_get_max_threads(), nullptr);
  // partial[t] holds thread t's 8 lane sums of every dw element, [o][k][lane].
#pragma omp parallel
  {
    thread_local std::vector<float> part_buf, flat_buf;
    thread_local std::vector<int64_t> offsets;
    float* part = scratch(part_buf, wsize * kLanes);
    std::fill(part, part + wsize * kLanes, 0.0f);
    partial[omp_get_thread_num()] = part;
    // flat layout: dy of a run's planes on the padded row width, zero in the thrown-away lanes
    const int64_t flat_plane = nvec * kLanes, flat_channel = run_planes * flat_plane;
    float* flat = L.flat ? scratch(flat_buf, g.cout * flat_channel) : nullptr;
    offsets.resize(2 * run_planes);
    for (int64_t n0 = 0; n0 < g.n; n0 += group.samples) {
      const int64_t nb = std::min(group.samples, g.n - n0);
      pad_samples(g, P, x, n0, nb, group.xp);
      const int64_t planes = nb * g.od, runs = (planes + run_planes - 1) / run_planes;
#pragma omp for schedule(static)
      for (int64_t t = 0; t < runs; ++t) {
        const int64_t q0 = t * run_planes, nq = std::min(run_planes, planes - q0);
        int64_t* xoff = offsets.data();
        int64_t* doff = offsets.data() + run_planes;
        for (int64_t q = 0; q < nq; ++q) {
          const int64_t nl = (q0 + q) / g.od, z = (q0 + q) % g.od;
          xoff[q] = nl * g.cin * P.channel() + z * P.plane();
          doff[q] = L.flat ? q * flat_plane : ((n0 + nl) * g.cout * ovol + z * oplane);
        }
        if (L.flat) {
          std::fill(flat, flat + g.cout * flat_channel, 0.0f);
          for (int64_t q = 0; q < nq; ++q) {
            const int64_t n = n0 + (q0 + q) / g.od, z = (q0 + q) % g.od;
            for (int64_t o = 0; o < g.cout; ++o)
              for (int64_t yy = 0; yy < g.oh; ++yy)
                std::memcpy(flat + o * flat_channel + doff[q] + yy * P.wp, dy + (n * g.cout + o) * ovol + z * oplane +
                            yy * g.ow, sizeof(float) * g.ow);
          }
        }
        const PlaneRun run{xoff, doff, nq, L.rows, L.vpr, P.wp};
        const float* dyb = L.flat ? flat : dy;
        const int64_t dystride = L.flat ? flat_channel : ovol;
        for (int64_t o0 = 0; o0 < g.cout; o0 += kOutChannels) {
          const int mo = static_cast<int>(std::min<int64_t>(kOutChannels, g.cout - o0));
          const WgradBlock kernel = wgrad_kernel(mo);
          for (int64_t r = 0; r < rows; ++r)
            kernel(group.xp, rowoff[r], dyb + o0 * dystride, dystride, run, part + (o0 * K + r * kTaps) * kLanes,
                   K * kLanes);
        }
      }
    }
#pragma omp for schedule(static)
    for (int64_t e = 0; e < wsize; ++e) {
      float s = 0.0f;
      for (const float* p : partial)
        if (p)
          for (int64_t l = 0; l < kLanes; ++l) s += p[e * kLanes + l];
      dw[e] = s;
    }
  }
}

#else  // no AVX2 + FMA: direct_applies() is false and these are never called

void conv3d_fprop_direct(const ConvGeometry&, const float*, const float*, const float*, float*) {
  HG_FAIL("conv3d: internal error: direct kernels need an AVX2 + FMA build");
}
void conv3d_wgrad_direct(const ConvGeometry&, const float*, const float*, float*) {
  HG_FAIL("conv3d: internal error: direct kernels need an AVX2 + FMA build");
}

#endif

}  // namespace halfgrad::ops::conv
