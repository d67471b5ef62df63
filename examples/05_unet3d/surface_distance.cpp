// surface_distance.cpp - HD95 and NSD (surface_distance.h has the definitions and their sources).
#include "examples/05_unet3d/surface_distance.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace unet3d_app {

using halfgrad::Tensor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The lower envelope of the parabolas w2 (x - q)^2 + f(q) over the samples q with finite f (FH 2012,
// algorithm DT(f)): out[x] = min over q of that, +inf when every f(q) is. In place along a line of n
// samples `stride` apart; v, z, g are scratch of at least n, n + 1, n.
void transform_line(double* data, int64_t n, int64_t stride, double w2, std::vector<int64_t>& v, std::vector<double>& z,
                    std::vector<double>& g) {
  for (int64_t i = 0; i < n; ++i) g[i] = data[i * stride];
  int64_t k = -1;
  for (int64_t q = 0; q < n; ++q) {
    if (g[q] == kInf) continue;
    if (k < 0) {
      k = 0;
      v[0] = q;
      z[0] = -kInf;
      z[1] = kInf;
      continue;
    }
    double s;
    while (true) {  // the first parabola's left edge is -inf: this stops at k = 0 at the latest
      const int64_t p = v[k];
      s = ((g[q] + w2 * static_cast<double>(q * q)) - (g[p] + w2 * static_cast<double>(p * p))) /
          (2.0 * w2 * static_cast<double>(q - p));
      if (s > z[k]) break;
      --k;
    }
    ++k;
    v[k] = q;
    z[k] = s;
    z[k + 1] = kInf;
  }
  if (k < 0) {
    for (int64_t i = 0; i < n; ++i) data[i * stride] = kInf;
    return;
  }
  k = 0;
  for (int64_t q = 0; q < n; ++q) {
    while (z[k + 1] < static_cast<double>(q)) ++k;
    const double d = static_cast<double>(q - v[k]);
    data[q * stride] = w2 * d * d + g[v[k]];
  }
}

// The voxels of mask m (a (d, h, w) grid) with a 6-neighbour outside m or outside the grid.
std::vector<uint8_t> mask_surface(const std::vector<uint8_t>& m, const std::array<int64_t, 3>& s) {
  std::vector<uint8_t> out(m.size(), 0);
  const int64_t d = s[0], h = s[1], w = s[2];
  for (int64_t z = 0; z < d; ++z)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const int64_t i = (z * h + y) * w + x;
        if (!m[i]) continue;
        const bool edge = z == 0 || z == d - 1 || y == 0 || y == h - 1 || x == 0 || x == w - 1 || !m[i - h * w] ||
                          !m[i + h * w] || !m[i - w] || !m[i + w] || !m[i - 1] || !m[i + 1];
        out[i] = edge ? 1 : 0;
      }
  return out;
}

// d(a, Y) in mm for every voxel a of surface `from`, Y's surface given by its distance transform.
std::vector<double> distances(const std::vector<uint8_t>& from, const std::vector<double>& to_transform) {
  std::vector<double> out;
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i]) out.push_back(std::sqrt(to_transform[i]));
  return out;
}

}  // namespace

std::vector<double> squared_distance_transform(const std::vector<uint8_t>& feature, const std::array<int64_t, 3>& shape,
                                               const std::array<double, 3>& spacing_mm) {
  const int64_t d = shape[0], h = shape[1], w = shape[2];
  HG_CHECK(static_cast<int64_t>(feature.size()) == d * h * w,
           "squared_distance_transform: " << feature.size() << " voxels for a " << d << "x" << h << "x" << w << " grid");
  std::vector<double> f(feature.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = feature[i] ? 0.0 : kInf;
  const int64_t longest = std::max({d, h, w, int64_t{1}});
  std::vector<int64_t> v(longest);
  std::vector<double> z(longest + 1), g(longest);
  const double wx = spacing_mm[2] * spacing_mm[2], wy = spacing_mm[1] * spacing_mm[1], wz = spacing_mm[0] * spacing_mm[0];
  for (int64_t zz = 0; zz < d; ++zz)
    for (int64_t y = 0; y < h; ++y) transform_line(&f[(zz * h + y) * w], w, 1, wx, v, z, g);
  for (int64_t zz = 0; zz < d; ++zz)
    for (int64_t x = 0; x < w; ++x) transform_line(&f[zz * h * w + x], h, w, wy, v, z, g);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) transform_line(&f[y * w + x], d, h * w, wz, v, z, g);
  return f;
}

Tensor own_grid(const Tensor& t, const std::array<int64_t, 3>& extent) {
  const halfgrad::Shape s = t.shape();
  HG_CHECK(t.dim() == 3 && t.dtype() == halfgrad::kInt64,
           "own_grid: expected a (D, H, W) int64 map, got " << halfgrad::shape_str(s));
  if (extent[0] == 0 || (extent[0] == s[0] && extent[1] == s[1] && extent[2] == s[2])) return t;
  HG_CHECK(extent[0] >= 1 && extent[1] >= 1 && extent[2] >= 1 && extent[0] <= s[0] && extent[1] <= s[1] &&
               extent[2] <= s[2],
           "own_grid: a volume's own grid (" << extent[0] << ", " << extent[1] << ", " << extent[2]
                                             << ") does not fit its padded map " << halfgrad::shape_str(s));
  const Tensor src = t.contiguous();
  Tensor out = Tensor::zeros({extent[0], extent[1], extent[2]}, halfgrad::kInt64);
  const int64_t* in = src.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  for (int64_t z = 0; z < extent[0]; ++z)
    for (int64_t y = 0; y < extent[1]; ++y)
      for (int64_t x = 0; x < extent[2]; ++x) o[(z * extent[1] + y) * extent[2] + x] = in[(z * s[1] + y) * s[2] + x];
  return out;
}

double linear_percentile(std::vector<double> values, double q) {
  HG_CHECK(!values.empty() && q >= 0 && q <= 100, "linear_percentile: " << values.size() << " values, q " << q
                                                                         << "; expected values and q in [0, 100]");
  std::sort(values.begin(), values.end());
  const double rank = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double t = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * t;
}

std::vector<SurfaceScores> surface_scores_per_class(const Tensor& pred, const Tensor& target, int64_t num_classes,
                                                    const std::array<double, 3>& spacing_mm, double tolerance_mm) {
  HG_CHECK(pred.dim() == 3 && pred.shape() == target.shape(),
           "surface metrics: prediction " << halfgrad::shape_str(pred.shape()) << " and target "
                                          << halfgrad::shape_str(target.shape()) << "; expected two (D, H, W) maps of one shape");
  HG_CHECK(pred.dtype() == halfgrad::kInt64 && target.dtype() == halfgrad::kInt64,
           "surface metrics: expected int64 label maps");
  for (double s : spacing_mm)
    HG_CHECK(std::isfinite(s) && s > 0, "surface metrics: spacing (" << spacing_mm[0] << ", " << spacing_mm[1] << ", "
                                                                     << spacing_mm[2] << ") mm; expected finite values > 0");
  HG_CHECK(std::isfinite(tolerance_mm) && tolerance_mm >= 0,
           "surface metrics: tolerance " << tolerance_mm << " mm; expected a finite value >= 0");
  const Tensor p = pred.contiguous(), t = target.contiguous();
  const int64_t* pv = p.data<int64_t>();
  const int64_t* tv = t.data<int64_t>();
  const halfgrad::Shape s = p.shape();
  const int64_t n = p.numel();
  std::vector<SurfaceScores> out;
  for (int64_t c = 1; c < num_classes; ++c) {
    // The union's bounding box: every surface voxel and every nearest one lie inside it, and a voxel
    // on its faces has its outside neighbour outside both masks, so cropping changes nothing.
    std::array<int64_t, 3> lo{s[0], s[1], s[2]}, hi{-1, -1, -1};
    bool any_p = false, any_t = false;
    for (int64_t i = 0; i < n; ++i) {
      const bool in_p = pv[i] == c, in_t = tv[i] == c;
      if (!in_p && !in_t) continue;
      any_p |= in_p;
      any_t |= in_t;
      const int64_t idx[3] = {i / (s[1] * s[2]), (i / s[2]) % s[1], i % s[2]};
      for (int a = 0; a < 3; ++a) {
        lo[a] = std::min(lo[a], idx[a]);
        hi[a] = std::max(hi[a], idx[a]);
      }
    }
    SurfaceScores r;
    if (!any_p && !any_t) {
      out.push_back(r);  // HD95 0, NSD 1
      continue;
    }
    if (any_p != any_t) {
      r.hd95_defined = false;
      r.hd95_mm = 0;
      r.surface_dice = 0;
      out.push_back(r);
      continue;
    }
    const std::array<int64_t, 3> box{hi[0] - lo[0] + 1, hi[1] - lo[1] + 1, hi[2] - lo[2] + 1};
    std::vector<uint8_t> mp(box[0] * box[1] * box[2]), mt(mp.size());
    for (int64_t z = 0; z < box[0]; ++z)
      for (int64_t y = 0; y < box[1]; ++y)
        for (int64_t x = 0; x < box[2]; ++x) {
          const int64_t i = ((z + lo[0]) * s[1] + (y + lo[1])) * s[2] + (x + lo[2]);
          const int64_t j = (z * box[1] + y) * box[2] + x;
          mp[j] = pv[i] == c;
          mt[j] = tv[i] == c;
        }
    // A voxel on the box's faces that is also on the volume's faces is a surface voxel either way.
    const std::vector<uint8_t> sp = mask_surface(mp, box), st = mask_surface(mt, box);
    const std::vector<double> to_pred = squared_distance_transform(sp, box, spacing_mm);
    const std::vector<double> to_target = squared_distance_transform(st, box, spacing_mm);
    const std::vector<double> d_pt = distances(sp, to_target), d_tp = distances(st, to_pred);
    r.hd95_mm = std::max(linear_percentile(d_pt, 95), linear_percentile(d_tp, 95));
    int64_t within = 0;
    for (double d : d_pt) within += d <= tolerance_mm;
    for (double d : d_tp) within += d <= tolerance_mm;
    r.surface_dice = static_cast<double>(within) / static_cast<double>(d_pt.size() + d_tp.size());
    out.push_back(r);
  }
  return out;
}

}  // namespace unet3d_app
