// conv_direct_fprop.cpp - the FP32 3x3x3 stride-1 convolution read from the padded input in place
// (math, register blocking and parallel mapping in conv_direct.h).
//
// The register blocks are written out with macros over named variables, and kept out of line: GCC keeps
// an array of __m256 accumulators in memory (storing it every iteration) in some of these loops, and
// inlined into the driver a block runs out of registers and spills an accumulator; either halves the
// speed.
#include <omp.h>

#include <algorithm>
#include <cstdint>
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

// Below this many outputs (e.g. a 2^3 bottleneck at batch 2 has 16) the per-call costs of the direct
// kernels (packing the weights, the register blocks' edges) outweigh their gain over the column GEMM.
constexpr int64_t kMinDirectOutputs = 128;

bool direct_fprop_applies(const ConvGeometry& g) {
  return HALFGRAD_CONV_DIRECT && g.cubic(3, 1) && g.cols() >= kMinDirectOutputs;
}

#if HALFGRAD_CONV_DIRECT

namespace {

constexpr int64_t kWide = 16;        // output channels of a wide block (2 registers)
constexpr int64_t kNarrow = 8;       // output channels of a narrow block (1 register)
constexpr int64_t kWidePositions = 6;  // outputs per wide register block: 2 x 6 = 12 accumulators
constexpr int64_t kQuad = 4;           // output channels of a quad block
constexpr int64_t kQuadVectors = 3;    // vectors of 8 outputs per quad register block: 4 x 3 = 12
constexpr int64_t kLanes = 8;          // floats per AVX2 register

// ---- 16 output channels x 6 outputs --------------------------------------------------------------

#define HG_REP6(X) X(0) X(1) X(2) X(3) X(4) X(5)

// acc (2 registers of 8 channels per output v) = bias + sum over the K taps t of
// w[t][0..16) * xp[xbase[v] + tapoff[t]]. wq is [t][16]; tmp receives [v][16].
__attribute__((noinline)) void fprop_wide(const float* xp, const int64_t* xbase, const int64_t* tapoff, int64_t taps, const float* wq,
                const float* bias, float* tmp) {
  const __m256 b0 = _mm256_loadu_ps(bias), b1 = _mm256_loadu_ps(bias + 8);
#define HG_INIT(v) __m256 lo##v = b0, hi##v = b1; const float* p##v = xp + xbase[v];
  HG_REP6(HG_INIT)
#undef HG_INIT
  for (int64_t t = 0; t < taps; ++t, wq += kWide) {
    const int64_t off = tapoff[t];
    const __m256 w0 = _mm256_loadu_ps(wq), w1 = _mm256_loadu_ps(wq + 8);
#define HG_TAP(v)                                           \
  {                                                         \
    const __m256 b = _mm256_broadcast_ss(p##v + off);      \
    lo##v = _mm256_fmadd_ps(b, w0, lo##v);                   \
    hi##v = _mm256_fmadd_ps(b, w1, hi##v);                   \
  }
    HG_REP6(HG_TAP)
#undef HG_TAP
  }
#define HG_STORE(v)                                 \
  _mm256_storeu_ps(tmp + v * kWide, lo##v);         \
  _mm256_storeu_ps(tmp + v * kWide + 8, hi##v);
  HG_REP6(HG_STORE)
#undef HG_STORE
}

// ---- 8 output channels x NV consecutive outputs of a row -----------------------------------------

// Per (c, i, j) tap row r at xp offset rowoff[r]: the broadcast of s[u] (s = xp + xbase + rowoff[r])
// feeds output u with tap l = 0, output u - 1 with l = 1 and output u - 2 with l = 2. wq is [r][l][8];
// tmp receives [v][8].
#define HG_U_FIRST(u) { const __m256 b = _mm256_broadcast_ss(s + u); a##u = _mm256_fmadd_ps(b, w0, a##u); }
#define HG_U_SECOND(u, m1)                                  \
  {                                                         \
    const __m256 b = _mm256_broadcast_ss(s + u);           \
    a##u = _mm256_fmadd_ps(b, w0, a##u);                     \
    a##m1 = _mm256_fmadd_ps(b, w1, a##m1);                   \
  }
#define HG_U_MID(u, m1, m2)                                 \
  {                                                         \
    const __m256 b = _mm256_broadcast_ss(s + u);           \
    a##u = _mm256_fmadd_ps(b, w0, a##u);                     \
    a##m1 = _mm256_fmadd_ps(b, w1, a##m1);                   \
    a##m2 = _mm256_fmadd_ps(b, w2, a##m2);                   \
  }
#define HG_U_TAIL(u, m1, m2)                                \
  {                                                         \
    const __m256 b = _mm256_broadcast_ss(s + u);           \
    a##m1 = _mm256_fmadd_ps(b, w1, a##m1);                   \
    a##m2 = _mm256_fmadd_ps(b, w2, a##m2);                   \
  }
#define HG_U_LAST(u, m2) { const __m256 b = _mm256_broadcast_ss(s + u); a##m2 = _mm256_fmadd_ps(b, w2, a##m2); }
#define HG_A_INIT(v) __m256 a##v = b0;
#define HG_A_STORE(v) _mm256_storeu_ps(tmp + v * kNarrow, a##v);

__attribute__((noinline)) void fprop_narrow8(const float* xp, int64_t xbase, const int64_t* rowoff, int64_t rows, const float* wq,
                   const float* bias, float* tmp) {
  const __m256 b0 = _mm256_loadu_ps(bias);
  HG_A_INIT(0) HG_A_INIT(1) HG_A_INIT(2) HG_A_INIT(3) HG_A_INIT(4) HG_A_INIT(5) HG_A_INIT(6) HG_A_INIT(7)
  const float* base = xp + xbase;
  for (int64_t r = 0; r < rows; ++r, wq += 3 * kNarrow) {
    const float* s = base + rowoff[r];
    const __m256 w0 = _mm256_loadu_ps(wq), w1 = _mm256_loadu_ps(wq + 8), w2 = _mm256_loadu_ps(wq + 16);
    HG_U_FIRST(0) HG_U_SECOND(1, 0) HG_U_MID(2, 1, 0) HG_U_MID(3, 2, 1) HG_U_MID(4, 3, 2) HG_U_MID(5, 4, 3)
    HG_U_MID(6, 5, 4) HG_U_MID(7, 6, 5) HG_U_TAIL(8, 7, 6) HG_U_LAST(9, 7)
  }
  HG_A_STORE(0) HG_A_STORE(1) HG_A_STORE(2) HG_A_STORE(3) HG_A_STORE(4) HG_A_STORE(5) HG_A_STORE(6) HG_A_STORE(7)
}

__attribute__((noinline)) void fprop_narrow11(const float* xp, int64_t xbase, const int64_t* rowoff, int64_t rows, const float* wq,
                    const float* bias, float* tmp) {
  const __m256 b0 = _mm256_loadu_ps(bias);
  HG_A_INIT(0) HG_A_INIT(1) HG_A_INIT(2) HG_A_INIT(3) HG_A_INIT(4) HG_A_INIT(5) HG_A_INIT(6) HG_A_INIT(7)
  HG_A_INIT(8) HG_A_INIT(9) HG_A_INIT(10)
  const float* base = xp + xbase;
  for (int64_t r = 0; r < rows; ++r, wq += 3 * kNarrow) {
    const float* s = base + rowoff[r];
    const __m256 w0 = _mm256_loadu_ps(wq), w1 = _mm256_loadu_ps(wq + 8), w2 = _mm256_loadu_ps(wq + 16);
    HG_U_FIRST(0) HG_U_SECOND(1, 0) HG_U_MID(2, 1, 0) HG_U_MID(3, 2, 1) HG_U_MID(4, 3, 2) HG_U_MID(5, 4, 3)
    HG_U_MID(6, 5, 4) HG_U_MID(7, 6, 5) HG_U_MID(8, 7, 6) HG_U_MID(9, 8, 7) HG_U_MID(10, 9, 8)
    HG_U_TAIL(11, 10, 9) HG_U_LAST(12, 10)
  }
  HG_A_STORE(0) HG_A_STORE(1) HG_A_STORE(2) HG_A_STORE(3) HG_A_STORE(4) HG_A_STORE(5) HG_A_STORE(6) HG_A_STORE(7)
  HG_A_STORE(8) HG_A_STORE(9) HG_A_STORE(10)
}

// ---- 4 output channels x 3 vectors of 8 consecutive outputs (rows a multiple of 8 wide) -----------

// For channel counts that are not a multiple of 8 (the width-12 U-Net's 12, 24 + 12 ...): vectors run
// along the outputs, so no lane is spent on a missing channel. Vector v (8 outputs of one row) starts at
// xp + xbase[v] (its tap 0) and at y + ybase[v]; per tap, 3 unaligned loads of xp and 4 broadcasts of w
// ([r][l][4]) feed 12 FMAs. Channels past `valid` are not stored.
__attribute__((noinline)) void fprop_quad(const float* xp, const int64_t* xbase, const int64_t* rowoff, int64_t rows,
                                          const float* wq, const float* bias, int64_t valid, float* y,
                                          int64_t ystride, const int64_t* ybase) {
  __m256 a00 = _mm256_set1_ps(bias[0]), a01 = a00, a02 = a00;
  __m256 a10 = _mm256_set1_ps(bias[1]), a11 = a10, a12 = a10;
  __m256 a20 = _mm256_set1_ps(bias[2]), a21 = a20, a22 = a20;
  __m256 a30 = _mm256_set1_ps(bias[3]), a31 = a30, a32 = a30;
  const float* p0 = xp + xbase[0];
  const float* p1 = xp + xbase[1];
  const float* p2 = xp + xbase[2];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = rowoff[r];
    for (int l = 0; l < 3; ++l, wq += kQuad) {
      const __m256 x0 = _mm256_loadu_ps(p0 + off + l), x1 = _mm256_loadu_ps(p1 + off + l),
                   x2 = _mm256_loadu_ps(p2 + off + l);
#define HG_CH(o)                                    {                                                   const __m256 w = _mm256_broadcast_ss(wq + o);     a##o##0 = _mm256_fmadd_ps(w, x0, a##o##0);        a##o##1 = _mm256_fmadd_ps(w, x1, a##o##1);        a##o##2 = _mm256_fmadd_ps(w, x2, a##o##2);      }
      HG_CH(0) HG_CH(1) HG_CH(2) HG_CH(3)
#undef HG_CH
    }
  }
#define HG_ST(o)                                                  if (valid > o) {                                                  _mm256_storeu_ps(y + o * ystride + ybase[0], a##o##0);          _mm256_storeu_ps(y + o * ystride + ybase[1], a##o##1);          _mm256_storeu_ps(y + o * ystride + ybase[2], a##o##2);        }
  HG_ST(0) HG_ST(1) HG_ST(2) HG_ST(3)
#undef HG_ST
}

// Measured single-core rates (GFLOP/s of useful and wasted lanes alike) of the kernels, for choosing
// among them: wide 138, quad 119, narrow 128 with 11 outputs a call and 118 with 8 (8 divides rows of
// 8, 16, 24 and 48 exactly; 11 wastes less on rows of 32: chunks 11, 11, 10).
constexpr int64_t kWideRate = 138, kQuadRate = 119, kNarrow8Rate = 118, kNarrow11Rate = 128;

// A block of output channels [o0, o0 + valid) computed as `width` (16, 8 or 4) channels, the rest zero.
struct ChannelBlock {
  int64_t o0, valid, width;
  int64_t wq_offset;  // into the packed weights, [K][width]
};

// 16-channel blocks while 16 channels remain; the rest (1..15) in whichever of these takes least time
// by the rates above: one zero-padded wide block; quad blocks (rows a multiple of 8 wide); a narrow
// block (rows of at least 8) for up to 8 channels, followed by quad blocks for the others.
std::vector<ChannelBlock> channel_blocks(const ConvGeometry& g, int64_t narrow_rate) {
  std::vector<int64_t> widths;
  int64_t o0 = 0;
  for (; g.cout - o0 >= kWide; o0 += kWide) widths.push_back(kWide);
  const int64_t rem = g.cout - o0;
  if (rem > 0) {
    const bool quad_ok = g.ow % kLanes == 0, narrow_ok = g.ow >= kNarrow;
    const auto quads = [](int64_t n) { return (n + kQuad - 1) / kQuad; };
    // time per output, in units of 1 / (rate * 1000): lanes computed / rate
    const double t_wide = double(kWide) / kWideRate;
    const double t_quad = quad_ok ? double(kQuad * quads(rem)) / kQuadRate : 1e9;
    const double t_narrow = !narrow_ok ? 1e9
                            : rem <= kNarrow ? double(kNarrow) / narrow_rate
                            : quad_ok        ? double(kNarrow) / narrow_rate + double(kQuad * quads(rem - kNarrow)) / kQuadRate
                                             : 1e9;
    if (t_narrow <= t_quad && t_narrow <= t_wide) {
      widths.push_back(kNarrow);
      for (int64_t left = rem - kNarrow; left > 0; left -= kQuad) widths.push_back(kQuad);
    } else if (t_quad <= t_wide) {
      for (int64_t left = rem; left > 0; left -= kQuad) widths.push_back(kQuad);
    } else {
      widths.push_back(kWide);
    }
  }
  std::vector<ChannelBlock> blocks;
  int64_t off = 0;
  o0 = 0;
  for (int64_t width : widths) {
    const int64_t valid = std::min(g.cout - o0, width);
    blocks.push_back({o0, valid, width, off});
    off += g.col_rows() * width;
    o0 += valid;
  }
  return blocks;
}

}  // namespace

void conv3d_fprop_direct(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y) {
  HG_CHECK(direct_fprop_applies(g), "conv3d: internal error: direct fprop called for an unsupported geometry");
  const Padded P = padded_extents(g);
  const int64_t K = g.col_rows(), rows = g.cin * 9, ovol = g.out_vol(), oplane = g.oh * g.ow;
  // Narrow blocks: 11 or 8 outputs a call, whichever takes less time per row.
  const auto row_cost = [&](int64_t nv, int64_t rate) { return (g.ow + nv - 1) / nv * nv * 1000 / rate; };
  const int64_t narrow = g.ow >= 11 && row_cost(11, kNarrow11Rate) < row_cost(8, kNarrow8Rate) ? 11 : 8;
  const std::vector<ChannelBlock> blocks = channel_blocks(g, narrow == 11 ? kNarrow11Rate : kNarrow8Rate);
  // Weights packed per block as [k][width] (zero beyond the valid channels), 32-byte aligned so that
  // no weight load splits a cache line; biases likewise padded.
  std::vector<float> packed(static_cast<size_t>(blocks.size() * K * kWide + 8), 0.0f);
  float* wq = packed.data() + (8 - (reinterpret_cast<uintptr_t>(packed.data()) / sizeof(float)) % 8) % 8;
  std::vector<float> bias(blocks.size() * kWide, 0.0f);
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const ChannelBlock& B = blocks[bi];
    for (int64_t k = 0; k < K; ++k)
      for (int64_t o = 0; o < B.valid; ++o) wq[B.wq_offset + k * B.width + o] = w[(B.o0 + o) * K + k];
    if (b)
      for (int64_t o = 0; o < B.valid; ++o) bias[bi * kWide + o] = b[B.o0 + o];
  }
  // xp offsets of every tap (c, i, j, l) and of every tap row (c, i, j), relative to an output's tap 0.
  std::vector<int64_t> tapoff, rowoff;
  for (int64_t c = 0; c < g.cin; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        rowoff.push_back(c * P.channel() + i * P.plane() + j * P.wp);
        for (int64_t l = 0; l < 3; ++l) tapoff.push_back(rowoff.back() + l);
      }
  const PaddedGroup group = padded_group(g, P);
  bool any_wide = false, any_quad = false;
  int64_t narrow_block = -1;  // at most one
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    any_wide |= blocks[bi].width == kWide;
    any_quad |= blocks[bi].width == kQuad;
    if (blocks[bi].width == kNarrow) narrow_block = static_cast<int64_t>(bi);
  }
#pragma omp parallel if (run_parallel(g))
  {
    float tmp[kWidePositions * kWide];
    for (int64_t n0 = 0; n0 < g.n; n0 += group.samples) {
      const int64_t nb = std::min(group.samples, g.n - n0);
      pad_samples(g, P, x, n0, nb, group.xp);
      // Wide blocks: 6 consecutive outputs of the group per iteration (across rows, planes and samples,
      // so that small volumes waste no lanes); the last iteration repeats the group's last output.
      const int64_t outputs = any_wide ? nb * g.od * oplane : 0;
#pragma omp for schedule(static) nowait
      for (int64_t q0 = 0; q0 < outputs; q0 += kWidePositions) {
        int64_t xbase[kWidePositions], ybase[kWidePositions];
        for (int64_t v = 0; v < kWidePositions; ++v) {
          const int64_t q = std::min(q0 + v, outputs - 1);
          const int64_t nz = q / oplane, yx = q % oplane, nl = nz / g.od, z = nz % g.od;
          xbase[v] = nl * P.sample(g.cin) + z * P.plane() + (yx / g.ow) * P.wp + yx % g.ow;
          ybase[v] = (n0 + nl) * g.cout * ovol + z * oplane + yx;
        }
        const int64_t nv = std::min(kWidePositions, outputs - q0);
        for (size_t bi = 0; bi < blocks.size(); ++bi) {
          const ChannelBlock& B = blocks[bi];
          if (B.width != kWide) continue;
          fprop_wide(group.xp, xbase, tapoff.data(), K, wq + B.wq_offset, bias.data() + bi * kWide, tmp);
          for (int64_t o = 0; o < B.valid; ++o)
            for (int64_t v = 0; v < nv; ++v) y[ybase[v] + (B.o0 + o) * ovol] = tmp[v * kWide + o];
        }
      }
      // The narrow block: rows of at least 8 outputs, 11 or 8 at a time (the last call of a row is
      // shifted left to end at the row's end, recomputing a few outputs).
      if (narrow_block >= 0) {
        const size_t bi = static_cast<size_t>(narrow_block);
        const ChannelBlock& B = blocks[bi];
#pragma omp for schedule(static) nowait
        for (int64_t row = 0; row < nb * g.od * g.oh; ++row) {
          const int64_t nz = row / g.oh, yy = row % g.oh, nl = nz / g.od, z = nz % g.od;
          const int64_t xrow = nl * P.sample(g.cin) + z * P.plane() + yy * P.wp;
          float* yrow = y + ((n0 + nl) * g.cout + B.o0) * ovol + z * oplane + yy * g.ow;
          for (int64_t x0 = 0; x0 < g.ow; x0 += narrow) {
            const int64_t xs = std::min(x0, g.ow - narrow);
            if (narrow == 11)
              fprop_narrow11(group.xp, xrow + xs, rowoff.data(), rows, wq + B.wq_offset, bias.data() + bi * kWide, tmp);
            else
              fprop_narrow8(group.xp, xrow + xs, rowoff.data(), rows, wq + B.wq_offset, bias.data() + bi * kWide, tmp);
            for (int64_t o = 0; o < B.valid; ++o)
              for (int64_t v = 0; v < narrow; ++v) yrow[o * ovol + xs + v] = tmp[v * kNarrow + o];
          }
        }
      }
      // Quad blocks: 3 vectors of 8 outputs per iteration (any rows, planes and samples of the group);
      // the last iteration repeats the group's last vector.
      const int64_t vectors = any_quad ? nb * g.od * g.oh * (g.ow / kLanes) : 0;
#pragma omp for schedule(static) nowait
      for (int64_t v0 = 0; v0 < vectors; v0 += kQuadVectors) {
        int64_t xbase[kQuadVectors], ybase[kQuadVectors];
        for (int64_t v = 0; v < kQuadVectors; ++v) {
          const int64_t q = std::min(v0 + v, vectors - 1) * kLanes;  // first output of the vector
          const int64_t nz = q / oplane, yx = q % oplane, nl = nz / g.od, z = nz % g.od;
          xbase[v] = nl * P.sample(g.cin) + z * P.plane() + (yx / g.ow) * P.wp + yx % g.ow;
          ybase[v] = (n0 + nl) * g.cout * ovol + z * oplane + yx;
        }
        for (size_t bi = 0; bi < blocks.size(); ++bi) {
          const ChannelBlock& B = blocks[bi];
          if (B.width != kQuad) continue;
          fprop_quad(group.xp, xbase, rowoff.data(), rows, wq + B.wq_offset, bias.data() + bi * kWide, B.valid,
                     y + B.o0 * ovol, ovol, ybase);
        }
      }
#pragma omp barrier
    }
  }
}

#else  // no AVX2 + FMA: direct_fprop_applies() is false and this is never called

void conv3d_fprop_direct(const ConvGeometry&, const float*, const float*, const float*, float*) {
  HG_FAIL("conv3d: internal error: the direct kernels need an AVX2 + FMA build");
}

#endif

}  // namespace halfgrad::ops::conv
