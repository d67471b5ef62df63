// conv_direct_wgrad.cpp - the FP32 3x3x3 stride-1 weight gradient read from the padded input in place
// (math and parallel mapping in conv_direct.h). Two register blockings:
//   rows (Wo a multiple of 8): vectors of 8 consecutive outputs of a row. 4 output channels x the 3 taps
//     l of one (c, i, j) = 12 accumulators of 8 partial sums; per vector, 3 loads of xp (shifted by l)
//     and 4 of dy feed 12 FMAs.
//   channels (other Wo, e.g. the 4^3 and 2^3 levels): vectors of 8 output channels, any outputs. dy is
//     first transposed to [output][channel]; 16 channels x 6 taps = 12 accumulators; per output, 2 loads
//     of dy and 6 broadcasts of xp feed 12 FMAs. No lane is wasted on row ends.
// Both sum over the outputs of a "run" in registers, then add to the partial sums of the run's chunk
// (a fixed cut of the runs, see Chunks), which are added in chunk order at the end.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/conv/conv_direct.h"
#include "ops/conv/padded_volume.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HALFGRAD_CONV_DIRECT 1
#else
#define HALFGRAD_CONV_DIRECT 0
#endif

namespace halfgrad::ops::conv {

bool direct_wgrad_applies(const ConvGeometry& g) { return direct_fprop_applies(g); }

#if HALFGRAD_CONV_DIRECT

namespace {

constexpr int64_t kLanes = 8;      // floats per AVX2 register
constexpr int kOutChannels = 4;    // rows: output channels per register block
constexpr int64_t kTaps = 3;       // rows: the taps l = 0, 1, 2 of one (c, i, j) row per block
// rows: a block adds its 12 accumulators to memory after each run; runs of at least this many vectors
// keep that (and the call) under a tenth of the run's arithmetic.
constexpr int64_t kMinRunVectors = 96;
constexpr int64_t kWide = 16;      // channels: output channels per register block (2 registers)
constexpr int64_t kTapGroup = 6;   // channels: taps per register block: 2 x 6 = 12 accumulators
// channels: a run's transposed dy stays within 256 KiB, in L2 while every tap group sweeps it.
constexpr int64_t kRunFloats = 64 << 10;

// The runs of a group are cut into `count` chunks of consecutive runs; chunk c sums its runs, in order,
// into its own partial buffer (part_size floats), and the partials are added in chunk order at the
// end. The chunks follow from the problem's size alone: kChunks of them, fewer only where kChunks
// partial buffers would exceed kMaxPartialFloats. Work is shared out a chunk at a time (static
// schedule), so the sums depend neither on the thread count nor on timing.
constexpr int64_t kChunks = 4;
constexpr int64_t kMaxPartialFloats = int64_t{8} << 20;  // 32 MiB of partial sums at most
struct Chunks {
  int64_t count, part_size;
  int64_t begin(int64_t c, int64_t runs) const { return c * runs / count; }
  int64_t end(int64_t c, int64_t runs) const { return (c + 1) * runs / count; }
};

// ---- rows ------------------------------------------------------------------------------------------

// A run of output planes: plane q's outputs start at xp + xoff[q] (tap (0, 0, 0)) and at dy + doff[q];
// each plane has `rows` rows of vpr vectors (row stride Wp in xp, vpr * 8 in dy).
struct PlaneRun {
  const int64_t* xoff;
  const int64_t* doff;
  int64_t planes, rows, vpr, wp;
};

// MO output channels x the 3 x taps of one (c, i, j) tap row (at xp offset `row`), summed over the
// run's outputs. dy's channel o is at dy + o * dystride. The 8 partial sums of (o, l) are added to
// out[o * ostride + l * 8 ..].
template <int MO>
void rows_block(const float* xp, int64_t row, const float* dy, int64_t dystride, const PlaneRun& run, float* out,
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

using RowsBlock = void (*)(const float*, int64_t, const float*, int64_t, const PlaneRun&, float*, int64_t);
RowsBlock rows_kernel(int mo) {
  switch (mo) {
    case 1: return rows_block<1>;
    case 2: return rows_block<2>;
    case 3: return rows_block<3>;
    default: return rows_block<4>;
  }
}

// Accumulates chunk partials [o][k][lane] of all the planes of the group: the runs of chunk c, in
// order, into parts + c * part_size.
void wgrad_rows(const ConvGeometry& g, const Padded& P, const float* xp, const float* dy, int64_t n0, int64_t nb,
                int64_t run_planes, const Chunks& ch, float* parts) {
  const int64_t K = g.col_rows(), ovol = g.out_vol(), oplane = g.oh * g.ow, vpr = g.ow / kLanes;
  thread_local std::vector<int64_t> offsets;
  offsets.resize(2 * run_planes);
  const int64_t planes = nb * g.od, runs = (planes + run_planes - 1) / run_planes;
#pragma omp for schedule(static)
  for (int64_t chunk = 0; chunk < ch.count; ++chunk)
    for (int64_t t = ch.begin(chunk, runs); t < ch.end(chunk, runs); ++t) {
      float* part = parts + chunk * ch.part_size;
      const int64_t q0 = t * run_planes, nq = std::min(run_planes, planes - q0);
      int64_t* xoff = offsets.data();
      int64_t* doff = offsets.data() + run_planes;
      for (int64_t q = 0; q < nq; ++q) {
        const int64_t nl = (q0 + q) / g.od, z = (q0 + q) % g.od;
        xoff[q] = nl * P.sample(g.cin) + z * P.plane();
        doff[q] = (n0 + nl) * g.cout * ovol + z * oplane;
      }
      const PlaneRun run{xoff, doff, nq, g.oh, vpr, P.wp};
      for (int64_t o0 = 0; o0 < g.cout; o0 += kOutChannels) {
        const RowsBlock kernel = rows_kernel(static_cast<int>(std::min<int64_t>(kOutChannels, g.cout - o0)));
        for (int64_t c = 0; c < g.cin; ++c)
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 3; ++j) {
              const int64_t r = (c * 3 + i) * 3 + j;
              kernel(xp, c * P.channel() + i * P.plane() + j * P.wp, dy + o0 * ovol, ovol, run,
                     part + (o0 * K + r * kTaps) * kLanes, K * kLanes);
            }
      }
    }
}

// ---- channels --------------------------------------------------------------------------------------

#define HG_REP6(X) X(0) X(1) X(2) X(3) X(4) X(5)

// 16 output channels x 6 taps (xp offsets tap[0..6)), summed over n outputs: output q reads
// xp + xbase[q] + tap[t] and dyT + q * stride (16 channels). Adds to out[t * ostride + 0..16).
// Kept out of line: inlined, GCC runs out of registers and spills an accumulator.
__attribute__((noinline)) void channels_block(const float* xp, const int64_t* xbase, int64_t n, const float* dyT,
                                              int64_t stride, const int64_t* tap, float* out, int64_t ostride) {
#define HG_INIT(t) __m256 lo##t = _mm256_setzero_ps(), hi##t = _mm256_setzero_ps(); const int64_t k##t = tap[t];
  HG_REP6(HG_INIT)
#undef HG_INIT
  for (int64_t q = 0; q < n; ++q, dyT += stride) {
    const float* s = xp + xbase[q];
    const __m256 d0 = _mm256_loadu_ps(dyT), d1 = _mm256_loadu_ps(dyT + 8);
#define HG_TAP(t)                                     \
  {                                                   \
    const __m256 b = _mm256_broadcast_ss(s + k##t);  \
    lo##t = _mm256_fmadd_ps(b, d0, lo##t);             \
    hi##t = _mm256_fmadd_ps(b, d1, hi##t);             \
  }
    HG_REP6(HG_TAP)
#undef HG_TAP
  }
#define HG_ADD(t)                                                                               \
  _mm256_storeu_ps(out + t * ostride, _mm256_add_ps(_mm256_loadu_ps(out + t * ostride), lo##t)); \
  _mm256_storeu_ps(out + t * ostride + 8, _mm256_add_ps(_mm256_loadu_ps(out + t * ostride + 8), hi##t));
  HG_REP6(HG_ADD)
#undef HG_ADD
}

// Accumulates chunk partials [k][channel] (channels padded to a multiple of 16, taps to a multiple of
// 6 by repeating the last tap) of all outputs of the group: the runs of chunk c, in order, into
// parts + c * part_size.
void wgrad_channels(const ConvGeometry& g, const Padded& P, const float* xp, const float* dy, int64_t n0, int64_t nb,
                    const std::vector<int64_t>& tapoff, int64_t cpad, int64_t run_len, const Chunks& ch,
                    float* parts) {
  const int64_t ovol = g.out_vol(), oplane = g.oh * g.ow;
  thread_local std::vector<float> dyT_buf;
  thread_local std::vector<int64_t> xbase_buf;
  float* dyT = grow(dyT_buf, run_len * cpad);
  xbase_buf.resize(run_len);
  int64_t* xbase = xbase_buf.data();
  const int64_t outputs = nb * g.od * oplane, runs = (outputs + run_len - 1) / run_len;
#pragma omp for schedule(static)
  for (int64_t chunk = 0; chunk < ch.count; ++chunk)
    for (int64_t t = ch.begin(chunk, runs); t < ch.end(chunk, runs); ++t) {
      float* part = parts + chunk * ch.part_size;
      const int64_t q0 = t * run_len, nq = std::min(run_len, outputs - q0);
      std::fill(dyT, dyT + nq * cpad, 0.0f);
      for (int64_t q = 0; q < nq;) {  // one plane segment at a time: dy reads are contiguous per channel
        const int64_t nz = (q0 + q) / oplane, yx = (q0 + q) % oplane, len = std::min(oplane - yx, nq - q);
        const int64_t nl = nz / g.od, z = nz % g.od;
        for (int64_t v = 0; v < len; ++v) {
          const int64_t p = yx + v;
          xbase[q + v] = nl * P.sample(g.cin) + z * P.plane() + (p / g.ow) * P.wp + p % g.ow;
        }
        for (int64_t o = 0; o < g.cout; ++o) {
          const float* src = dy + ((n0 + nl) * g.cout + o) * ovol + z * oplane + yx;
          for (int64_t v = 0; v < len; ++v) dyT[(q + v) * cpad + o] = src[v];
        }
        q += len;
      }
      for (int64_t o0 = 0; o0 < cpad; o0 += kWide)
        for (size_t k0 = 0; k0 < tapoff.size(); k0 += kTapGroup)
          channels_block(xp, xbase, nq, dyT + o0, cpad, tapoff.data() + k0, part + k0 * cpad + o0, cpad);
    }
}

}  // namespace

void conv3d_wgrad_direct(const ConvGeometry& g, const float* x, const float* dy, float* dw) {
  HG_CHECK(direct_wgrad_applies(g), "conv3d: internal error: direct wgrad called for an unsupported geometry");
  const Padded P = padded_extents(g);
  const int64_t K = g.col_rows(), wsize = g.cout * K;
  const bool rows = g.ow % kLanes == 0;
  const PaddedGroup group = padded_group(g, P);
  // Chunks (see Chunks): kChunks for a parallel run, as memory allows.
  std::vector<int64_t> tapoff;
  for (int64_t c = 0; c < g.cin; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t l = 0; l < 3; ++l) tapoff.push_back(c * P.channel() + i * P.plane() + j * P.wp + l);
  while (tapoff.size() % kTapGroup) tapoff.push_back(tapoff.back());
  const int64_t kpad = static_cast<int64_t>(tapoff.size()), cpad = (g.cout + kWide - 1) / kWide * kWide;
  const int64_t part_size = rows ? wsize * kLanes : kpad * cpad;
  const Chunks ch{run_parallel(g) ? std::clamp<int64_t>(kMaxPartialFloats / part_size, 1, kChunks) : 1, part_size};
  // rows: planes per run, enough for kMinRunVectors vectors (a run may span samples), but no more than
  // leaves every chunk a run.
  const int64_t nvec = std::max<int64_t>(1, g.oh * (g.ow / kLanes));
  const int64_t run_planes =
      std::clamp<int64_t>((kMinRunVectors + nvec - 1) / nvec, 1, std::max<int64_t>(1, group.samples * g.od / ch.count));
  // channels: outputs per run bounded by kRunFloats and by leaving every chunk a run.
  const int64_t group_outputs = group.samples * g.od * g.oh * g.ow;
  const int64_t run_len = std::clamp<int64_t>(kRunFloats / cpad, 1, std::max<int64_t>(1, group_outputs / ch.count));
  thread_local std::vector<float> parts_buf;  // the calling thread's, shared with the team
  float* parts = grow(parts_buf, ch.count * part_size);
#pragma omp parallel if (run_parallel(g))
  {
#pragma omp for schedule(static)
    for (int64_t c = 0; c < ch.count; ++c) std::fill(parts + c * part_size, parts + (c + 1) * part_size, 0.0f);
    for (int64_t n0 = 0; n0 < g.n; n0 += group.samples) {
      const int64_t nb = std::min(group.samples, g.n - n0);
      pad_samples(g, P, x, n0, nb, group.xp);
      if (rows) wgrad_rows(g, P, group.xp, dy, n0, nb, run_planes, ch, parts);
      else wgrad_channels(g, P, group.xp, dy, n0, nb, tapoff, cpad, run_len, ch, parts);
    }
    // The partials in chunk order: rows [o][k][lane] (lanes summed in order), channels [k][o] (transposed).
#pragma omp for schedule(static)
    for (int64_t e = 0; e < wsize; ++e) {
      float s = 0.0f;
      for (int64_t c = 0; c < ch.count; ++c) {
        const float* p = parts + c * part_size;
        if (rows) {
          for (int64_t l = 0; l < kLanes; ++l) s += p[e * kLanes + l];
        } else {
          const int64_t o = e / K, k = e % K;
          s += p[k * cpad + o];
        }
      }
      dw[e] = s;
    }
  }
}

#else  // no AVX2 + FMA: direct_wgrad_applies() is false and this is never called

void conv3d_wgrad_direct(const ConvGeometry&, const float*, const float*, float*) {
  HG_FAIL("conv3d: internal error: the direct kernels need an AVX2 + FMA build");
}

#endif

}  // namespace halfgrad::ops::conv
