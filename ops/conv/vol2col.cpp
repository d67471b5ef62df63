// vol2col.cpp - volume <-> column-tile copies (see vol2col.h for the layout).
//
// A column tile [q0, q1) is cut into output-row segments: runs of consecutive x positions with the same
// (n, z, y). For each column-matrix row r = (c, i, j, l) and each segment, the input row it reads is
// x[n, c, sd*z + dd*i - pd, sh*y + dh*j - ph, :], so the copy is a zero-filled head, a contiguous
// (W stride 1) or strided run, and a zero-filled tail. Each call runs on one thread: the callers parallelise over tiles
// (vol2col) or over channels (col2vol).
#include "ops/conv/vol2col.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace halfgrad::ops::conv {

ConvGeometry make_geometry(int64_t n, int64_t cin, int64_t cout, int64_t d, int64_t h, int64_t w,
                           const ExpandingArray<3>& k, const ExpandingArray<3>& s, const ExpandingArray<3>& p,
                           const ExpandingArray<3>& dil) {
  ConvGeometry g;
  g.n = n; g.cin = cin; g.cout = cout;
  g.d = d; g.h = h; g.w = w;
  g.k = k.array(); g.s = s.array(); g.p = p.array(); g.dil = dil.array();
  auto out = [&](int64_t e, int a) {
    const int64_t span = e + 2 * g.p[a] - g.dil[a] * (g.k[a] - 1) - 1;
    return span < 0 ? 0 : span / g.s[a] + 1;
  };
  g.od = out(d, 0); g.oh = out(h, 1); g.ow = out(w, 2);
  return g;
}

namespace {

// The output positions (n, z, y, x) for x in [x0, x1): tile columns off .. off + (x1 - x0) - 1.
struct RowSegment {
  int64_t n, z, y, x0, x1, off;
};

// The segments of tile [q0, q1), in a per-thread vector reused across calls.
const std::vector<RowSegment>& segments(const ConvGeometry& g, int64_t q0, int64_t q1) {
  thread_local std::vector<RowSegment> segs;
  segs.clear();
  const int64_t vol = g.out_vol();
  for (int64_t q = q0; q < q1;) {
    const int64_t n = q / vol, rem = q % vol;
    const int64_t z = rem / (g.oh * g.ow), y = (rem / g.ow) % g.oh, x = rem % g.ow;
    const int64_t len = std::min(g.ow - x, q1 - q);
    segs.push_back({n, z, y, x, x + len, q - q0});
    q += len;
  }
  return segs;
}

// The x positions of a segment whose input index sw*x + dw*l - pw lies in [0, w): [lo, hi) relative to x0.
inline void valid_span(const ConvGeometry& g, const RowSegment& sg, int64_t l, int64_t& lo, int64_t& hi) {
  const int64_t len = sg.x1 - sg.x0;
  const int64_t s = g.s[2], off = g.p[2] - g.dil[2] * l;
  // s*x - off >= 0  <=>  x >= ceil(off / s);   s*x - off < w  <=>  x <= floor((w - 1 + off) / s)
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  const int64_t first = ceil_div(off, s), last = floor_div(g.w - 1 + off, s);
  lo = std::clamp(first - sg.x0, int64_t{0}, len);
  hi = std::clamp(last + 1 - sg.x0, lo, len);
}

}  // namespace

template <typename T>
void vol2col(const ConvGeometry& g, const T* x, int64_t q0, int64_t q1, T* col, int64_t ld) {
  const auto& segs = segments(g, q0, q1);
  const int64_t kd = g.k[0], kh = g.k[1], kw = g.k[2], sw = g.s[2];
  for (int64_t c = 0; c < g.cin; ++c)
    for (int64_t i = 0; i < kd; ++i)
      for (int64_t j = 0; j < kh; ++j)
        for (int64_t l = 0; l < kw; ++l) {
          T* row = col + (((c * kd + i) * kh + j) * kw + l) * ld;
          for (const RowSegment& sg : segs) {
            T* dst = row + sg.off;
            const int64_t len = sg.x1 - sg.x0;
            const int64_t zi = g.s[0] * sg.z + g.dil[0] * i - g.p[0], yi = g.s[1] * sg.y + g.dil[1] * j - g.p[1];
            if (zi < 0 || zi >= g.d || yi < 0 || yi >= g.h) {
              std::fill(dst, dst + len, T(0));
              continue;
            }
            const T* src = x + (((sg.n * g.cin + c) * g.d + zi) * g.h + yi) * g.w;
            int64_t lo, hi;
            valid_span(g, sg, l, lo, hi);
            std::fill(dst, dst + lo, T(0));
            const int64_t xi0 = sw * sg.x0 + g.dil[2] * l - g.p[2];  // input x of the segment's first position
            if (sw == 1) {
              std::memcpy(dst + lo, src + xi0 + lo, sizeof(T) * (hi - lo));
            } else {
              for (int64_t t = lo; t < hi; ++t) dst[t] = src[xi0 + sw * t];
            }
            std::fill(dst + hi, dst + len, T(0));
          }
        }
}

template <typename T>
void col2vol(const ConvGeometry& g, const T* col, int64_t ld, int64_t q0, int64_t q1, int64_t c0, int64_t c1, T* x) {
  const auto& segs = segments(g, q0, q1);
  const int64_t kd = g.k[0], kh = g.k[1], kw = g.k[2], sw = g.s[2];
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t i = 0; i < kd; ++i)
      for (int64_t j = 0; j < kh; ++j)
        for (int64_t l = 0; l < kw; ++l) {
          const T* row = col + (((c * kd + i) * kh + j) * kw + l) * ld;
          for (const RowSegment& sg : segs) {
            const int64_t zi = g.s[0] * sg.z + g.dil[0] * i - g.p[0], yi = g.s[1] * sg.y + g.dil[1] * j - g.p[1];
            if (zi < 0 || zi >= g.d || yi < 0 || yi >= g.h) continue;
            const T* src = row + sg.off;
            // dst + t is the input x of position x0 + t (it lies in the volume for t in [lo, hi)).
            T* dst = x + (((sg.n * g.cin + c) * g.d + zi) * g.h + yi) * g.w + (sw * sg.x0 + g.dil[2] * l - g.p[2]);
            int64_t lo, hi;
            valid_span(g, sg, l, lo, hi);
            if (sw == 1) {
              for (int64_t t = lo; t < hi; ++t) dst[t] += src[t];
            } else {
              for (int64_t t = lo; t < hi; ++t) dst[sw * t] += src[t];
            }
          }
        }
}

template void vol2col<float>(const ConvGeometry&, const float*, int64_t, int64_t, float*, int64_t);
template void vol2col<double>(const ConvGeometry&, const double*, int64_t, int64_t, double*, int64_t);
template void col2vol<float>(const ConvGeometry&, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, float*);
template void col2vol<double>(const ConvGeometry&, const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                              double*);

}  // namespace halfgrad::ops::conv
