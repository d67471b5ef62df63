// augment.cpp - see augment.h. All loops walk (z, y, x) with x fastest, the storage order; arithmetic
// is in float64, each result rounded once to float32.
#include "io/augment.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace halfgrad::io {
namespace {

void check_image(const Tensor& image, const char* op) {
  HG_CHECK(image.defined() && image.dim() == 3 && image.dtype() == kFloat32,
           op << ": image is " << (image.defined() ? shape_str(image.shape()) + " " + dtype_name(image.dtype()) : "undefined")
              << "; expected a float32 (D, H, W) volume");
}

void check_sample(const Sample& s, const char* op) {
  check_image(s.image, op);
  HG_CHECK(s.label.defined() && s.label.dtype() == kInt64 && s.label.shape() == s.image.shape(),
           op << ": label is " << (s.label.defined() ? shape_str(s.label.shape()) + " " + dtype_name(s.label.dtype()) : "undefined")
              << "; expected int64 of the image's shape " << shape_str(s.image.shape()));
}

void check_extent(const Shape& size, const char* op) {
  HG_CHECK(size.size() == 3 && size[0] > 0 && size[1] > 0 && size[2] > 0,
           op << ": size " << shape_str(size) << "; expected 3 positive extents (d, h, w)");
}

void check_positive(double v, const char* op, const char* what) {
  HG_CHECK(std::isfinite(v) && v > 0, op << ": " << what << " " << v << "; expected a finite number > 0");
}

void check_probability(double p, const char* op, const char* field) {
  HG_CHECK(p >= 0.0 && p <= 1.0, op << ": AugmentOptions." << field << " " << p << "; expected a probability in [0, 1]");
}

// A range of finite bounds with lo <= hi, and lo > min (strict) or lo >= min; hi <= max.
void check_range(const Range& r, const char* op, const char* field, double min, bool strict,
                 double max = INFINITY) {
  HG_CHECK(std::isfinite(r.lo) && std::isfinite(r.hi) && r.lo <= r.hi,
           op << ": AugmentOptions." << field << " [" << r.lo << ", " << r.hi << "]; expected finite bounds, lo <= hi");
  HG_CHECK(strict ? r.lo > min : r.lo >= min, op << ": AugmentOptions." << field << " [" << r.lo << ", " << r.hi
                                                 << "]; expected lo " << (strict ? "> " : ">= ") << min);
  HG_CHECK(r.hi <= max, op << ": AugmentOptions." << field << " [" << r.lo << ", " << r.hi << "]; expected hi <= " << max);
}

// ---- drawing (augment.h lists the order) ------------------------------------------------------------

// True with probability p; draws one gen.uniform() unless p is 0.
bool draw(double p, Generator& gen) { return p > 0.0 && gen.uniform() < p; }

double uniform_in(const Range& r, Generator& gen) { return r.lo + (r.hi - r.lo) * gen.uniform(); }

// batchgenerators' draw of scale, contrast and gamma factors: half the time below 1, half above.
double two_sided(const Range& r, Generator& gen) {
  if (gen.uniform() < 0.5 && r.lo < 1.0) return uniform_in({r.lo, 1.0}, gen);
  return uniform_in({std::max(r.lo, 1.0), r.hi}, gen);
}

// ---- interpolation: the volume read as if zero-padded (map_coordinates mode 'grid-constant') --------

float read_linear(const float* v, const Shape& in, double z, double y, double x) {
  if (!(z > -1.0 && z < in[0] && y > -1.0 && y < in[1] && x > -1.0 && x < in[2])) return 0.0f;
  const double fz = std::floor(z), fy = std::floor(y), fx = std::floor(x);
  const double t[3] = {z - fz, y - fy, x - fx};
  const int64_t c0[3] = {static_cast<int64_t>(fz), static_cast<int64_t>(fy), static_cast<int64_t>(fx)};
  double acc = 0.0;
  for (int64_t dz = 0; dz < 2; ++dz) {
    const int64_t iz = c0[0] + dz;
    if (iz < 0 || iz >= in[0]) continue;
    const double wz = dz ? t[0] : 1.0 - t[0];
    for (int64_t dy = 0; dy < 2; ++dy) {
      const int64_t iy = c0[1] + dy;
      if (iy < 0 || iy >= in[1]) continue;
      const double wy = dy ? t[1] : 1.0 - t[1];
      for (int64_t dx = 0; dx < 2; ++dx) {
        const int64_t ix = c0[2] + dx;
        if (ix < 0 || ix >= in[2]) continue;
        acc += wz * wy * (dx ? t[2] : 1.0 - t[2]) * v[(iz * in[1] + iy) * in[2] + ix];
      }
    }
  }
  return static_cast<float>(acc);
}

// Nearest voxel, p rounded half up (floor(p + 0.5), as scipy's order 0); 0 = background outside.
int64_t read_nearest(const int64_t* v, const Shape& in, double z, double y, double x) {
  const double r[3] = {std::floor(z + 0.5), std::floor(y + 0.5), std::floor(x + 0.5)};
  for (int d = 0; d < 3; ++d)
    if (!(r[d] >= 0.0 && r[d] < in[d])) return 0;
  return v[(static_cast<int64_t>(r[0]) * in[1] + static_cast<int64_t>(r[1])) * in[2] + static_cast<int64_t>(r[2])];
}

// The 3x3 matrix M of rotate_coords_3d: M = Rx(a0) Ry(a1) Rz(a2), applied as c' = c M (c a row).
std::array<std::array<double, 3>, 3> rotation_matrix(const std::array<double, 3>& a) {
  using M3 = std::array<std::array<double, 3>, 3>;
  const double c0 = std::cos(a[0]), s0 = std::sin(a[0]), c1 = std::cos(a[1]), s1 = std::sin(a[1]);
  const double c2 = std::cos(a[2]), s2 = std::sin(a[2]);
  const M3 rx = {{{1, 0, 0}, {0, c0, -s0}, {0, s0, c0}}};
  const M3 ry = {{{c1, 0, s1}, {0, 1, 0}, {-s1, 0, c1}}};
  const M3 rz = {{{c2, -s2, 0}, {s2, c2, 0}, {0, 0, 1}}};
  auto mul = [](const M3& p, const M3& q) {
    M3 r{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 3; ++k) r[i][j] += p[i][k] * q[k][j];
    return r;
  };
  return mul(mul(rx, ry), rz);
}

// ---- separable Gaussian filter (scipy.ndimage.gaussian_filter, truncate 4) ---------------------------

enum class Border { Reflect, Zero };  // scipy's 'reflect' (d c b a | a b c d | d c b a) and 'constant' 0

std::vector<double> gaussian_kernel(double sigma) {
  const int64_t radius = static_cast<int64_t>(4.0 * sigma + 0.5);
  std::vector<double> w(2 * radius + 1);
  double sum = 0.0;
  for (int64_t k = -radius; k <= radius; ++k) {
    const double x = static_cast<double>(k);
    w[k + radius] = std::exp(-0.5 * x * x / (sigma * sigma));
    sum += w[k + radius];
  }
  for (double& v : w) v /= sum;
  return w;
}

// Filters `vol` (float32 (D, H, W)) in place along z, then y, then x.
void gaussian_filter(Tensor& vol, double sigma, Border border) {
  const std::vector<double> w = gaussian_kernel(sigma);
  const int64_t radius = static_cast<int64_t>(w.size() / 2);
  const Shape& s = vol.shape();
  float* data = vol.data<float>();
  std::vector<double> line, out;
  for (int axis = 0; axis < 3; ++axis) {
    const int64_t n = s[axis];
    const int64_t stride = axis == 0 ? s[1] * s[2] : axis == 1 ? s[2] : 1;
    line.resize(n);
    out.resize(n);
    const int64_t lines = vol.numel() / n;
    for (int64_t l = 0; l < lines; ++l) {
      // Line l's first voxel: the index over the other two axes, in storage order.
      const int64_t first = axis == 0 ? l : axis == 1 ? (l / s[2]) * s[1] * s[2] + l % s[2] : l * s[2];
      for (int64_t i = 0; i < n; ++i) line[i] = data[first + i * stride];
      for (int64_t i = 0; i < n; ++i) {
        double acc = 0.0;
        for (int64_t k = -radius; k <= radius; ++k) {
          int64_t j = i + k;
          if (j < 0 || j >= n) {
            if (border == Border::Zero) continue;
            j = ((j % (2 * n)) + 2 * n) % (2 * n);  // period 2n, then mirrored into [0, n)
            if (j >= n) j = 2 * n - 1 - j;
          }
          acc += w[k + radius] * line[j];
        }
        out[i] = acc;
      }
      for (int64_t i = 0; i < n; ++i) data[first + i * stride] = static_cast<float>(out[i]);
    }
  }
}

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;  // std: the population one (numpy's default)
};

Stats stats_of(const float* x, int64_t n) {
  Stats st{0.0, 0.0, x[0], x[0]};
  for (int64_t i = 0; i < n; ++i) {
    st.mean += x[i];
    st.min = std::min<double>(st.min, x[i]);
    st.max = std::max<double>(st.max, x[i]);
  }
  st.mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) st.std += (x[i] - st.mean) * (x[i] - st.mean);
  st.std = std::sqrt(st.std / static_cast<double>(n));
  return st;
}

// out[i] = f(x[i]) over a float32 volume.
template <typename Fn>
Tensor map_voxels(const Tensor& image, Fn&& f) {
  Tensor out = Tensor::empty(image.shape(), kFloat32);
  const float* x = image.data<float>();
  float* y = out.data<float>();
  for (int64_t i = 0, n = image.numel(); i < n; ++i) y[i] = static_cast<float>(f(static_cast<double>(x[i])));
  return out;
}

}  // namespace

AugmentOptions AugmentOptions::none() {
  AugmentOptions o;
  o.rotation_p = o.scale_p = o.elastic_p = o.noise_p = o.blur_p = o.brightness_p = o.contrast_p = 0.0;
  o.low_res_p = o.gamma_inverted_p = o.gamma_p = 0.0;
  return o;
}

void AugmentOptions::check(const char* op) const {
  check_probability(rotation_p, op, "rotation_p");
  check_probability(rotation_p_per_axis, op, "rotation_p_per_axis");
  check_probability(scale_p, op, "scale_p");
  check_probability(elastic_p, op, "elastic_p");
  check_probability(noise_p, op, "noise_p");
  check_probability(blur_p, op, "blur_p");
  check_probability(blur_p_per_channel, op, "blur_p_per_channel");
  check_probability(brightness_p, op, "brightness_p");
  check_probability(contrast_p, op, "contrast_p");
  check_probability(low_res_p, op, "low_res_p");
  check_probability(low_res_p_per_channel, op, "low_res_p_per_channel");
  check_probability(gamma_inverted_p, op, "gamma_inverted_p");
  check_probability(gamma_p, op, "gamma_p");
  check_range(rotation_angle, op, "rotation_angle", -INFINITY, false);
  check_range(scale, op, "scale", 0.0, true);
  check_range(elastic_alpha, op, "elastic_alpha", 0.0, false);
  check_range(elastic_sigma, op, "elastic_sigma", 0.0, true);
  check_range(noise_variance, op, "noise_variance", 0.0, false);
  check_range(blur_sigma, op, "blur_sigma", 0.0, true);
  check_range(brightness, op, "brightness", 0.0, true);
  check_range(contrast, op, "contrast", 0.0, true);
  check_range(low_res_zoom, op, "low_res_zoom", 0.0, true, 1.0);
  check_range(gamma, op, "gamma", 0.0, true);
}

Sample spatial_transform(const Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                         const SpatialParams& params) {
  const char* op = "spatial_transform";
  check_sample(volume, op);
  check_extent(size, op);
  check_positive(params.scale, op, "scale");
  for (double a : params.angles) HG_CHECK(std::isfinite(a), op << ": angle " << a << "; expected a finite number (radians)");
  const bool elastic = params.displacement[0].defined() || params.displacement[1].defined() || params.displacement[2].defined();
  const float* disp[3] = {nullptr, nullptr, nullptr};
  for (int a = 0; a < 3 && elastic; ++a) {
    const Tensor& d = params.displacement[a];
    HG_CHECK(d.defined() && d.dtype() == kFloat32 && d.shape() == size,
             op << ": displacement " << a << " is "
                << (d.defined() ? shape_str(d.shape()) + " " + dtype_name(d.dtype()) : std::string("undefined"))
                << "; expected all three float32 of the patch's shape " << shape_str(size));
    disp[a] = d.data<float>();
  }
  const auto m = rotation_matrix(params.angles);
  const Shape& in = volume.image.shape();
  double centre[3], half[3];  // the patch's centre in the volume, and in the patch
  for (int d = 0; d < 3; ++d) {
    half[d] = (static_cast<double>(size[d]) - 1.0) / 2.0;
    centre[d] = static_cast<double>(start[d]) + half[d];
  }
  Sample out{Tensor::empty(size, kFloat32), Tensor::empty(size, kInt64)};
  const float* img = volume.image.data<float>();
  const int64_t* lab = volume.label.data<int64_t>();
  float* out_img = out.image.data<float>();
  int64_t* out_lab = out.label.data<int64_t>();
  int64_t i = 0;
  for (int64_t z = 0; z < size[0]; ++z)
    for (int64_t y = 0; y < size[1]; ++y)
      for (int64_t x = 0; x < size[2]; ++x, ++i) {
        double c[3] = {z - half[0], y - half[1], x - half[2]};
        if (elastic)
          for (int d = 0; d < 3; ++d) c[d] += disp[d][i];
        double p[3];
        for (int n = 0; n < 3; ++n) p[n] = (c[0] * m[0][n] + c[1] * m[1][n] + c[2] * m[2][n]) * params.scale + centre[n];
        out_img[i] = read_linear(img, in, p[0], p[1], p[2]);
        out_lab[i] = read_nearest(lab, in, p[0], p[1], p[2]);
      }
  return out;
}

Tensor elastic_displacement(const Tensor& noise, double alpha, double sigma) {
  check_image(noise, "elastic_displacement");
  check_positive(sigma, "elastic_displacement", "sigma");
  HG_CHECK(std::isfinite(alpha), "elastic_displacement: alpha " << alpha << "; expected a finite number");
  Tensor out = noise.clone();
  gaussian_filter(out, sigma, Border::Zero);
  float* d = out.data<float>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) d[i] = static_cast<float>(d[i] * alpha);
  return out;
}

Tensor gaussian_noise(const Tensor& image, double std, Generator& gen) {
  check_image(image, "gaussian_noise");
  HG_CHECK(std::isfinite(std) && std >= 0, "gaussian_noise: std " << std << "; expected a finite number >= 0");
  return map_voxels(image, [&](double v) { return v + std * gen.normal(); });
}

Tensor gaussian_blur(const Tensor& image, double sigma) {
  check_image(image, "gaussian_blur");
  check_positive(sigma, "gaussian_blur", "sigma");
  Tensor out = image.clone();
  gaussian_filter(out, sigma, Border::Reflect);
  return out;
}

Tensor multiply_brightness(const Tensor& image, double factor) {
  check_image(image, "multiply_brightness");
  HG_CHECK(std::isfinite(factor), "multiply_brightness: factor " << factor << "; expected a finite number");
  return map_voxels(image, [&](double v) { return v * factor; });
}

Tensor adjust_contrast(const Tensor& image, double factor, bool preserve_range) {
  check_image(image, "adjust_contrast");
  HG_CHECK(std::isfinite(factor), "adjust_contrast: factor " << factor << "; expected a finite number");
  const Stats st = stats_of(image.data<float>(), image.numel());
  return map_voxels(image, [&](double v) {
    const double r = (v - st.mean) * factor + st.mean;
    return preserve_range ? std::clamp(r, st.min, st.max) : r;
  });
}

Tensor simulate_low_resolution(const Tensor& image, double zoom) {
  check_image(image, "simulate_low_resolution");
  check_positive(zoom, "simulate_low_resolution", "zoom");
  const Shape& in = image.shape();
  Shape low(3);
  for (int d = 0; d < 3; ++d) low[d] = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(in[d] * zoom)));
  // skimage.transform.resize's map from output voxel o (of `to` voxels) to input (of `from`).
  auto source = [](int64_t o, int64_t from, int64_t to) {
    return (static_cast<double>(o) + 0.5) * (static_cast<double>(from) / static_cast<double>(to)) - 0.5;
  };
  // Down by nearest neighbour: the index each low voxel copies, per axis.
  std::array<std::vector<int64_t>, 3> pick;
  for (int d = 0; d < 3; ++d)
    for (int64_t o = 0; o < low[d]; ++o)
      pick[d].push_back(std::clamp(static_cast<int64_t>(std::floor(source(o, in[d], low[d]) + 0.5)), int64_t{0}, in[d] - 1));
  std::vector<float> small(static_cast<size_t>(shape_numel(low)));
  const float* x = image.data<float>();
  for (int64_t z = 0, i = 0; z < low[0]; ++z)
    for (int64_t y = 0; y < low[1]; ++y)
      for (int64_t w = 0; w < low[2]; ++w, ++i) small[i] = x[(pick[0][z] * in[1] + pick[1][y]) * in[2] + pick[2][w]];
  // Up by linear interpolation, coordinates clamped to the edge (mode 'nearest').
  struct Tap {
    int64_t i0, i1;
    double t;
  };
  std::array<std::vector<Tap>, 3> taps;
  for (int d = 0; d < 3; ++d)
    for (int64_t o = 0; o < in[d]; ++o) {
      const double c = std::clamp(source(o, low[d], in[d]), 0.0, static_cast<double>(low[d] - 1));
      const int64_t i0 = static_cast<int64_t>(std::floor(c));
      taps[d].push_back({i0, std::min(i0 + 1, low[d] - 1), c - static_cast<double>(i0)});
    }
  Tensor out = Tensor::empty(in, kFloat32);
  float* y_out = out.data<float>();
  auto at = [&](int64_t z, int64_t y, int64_t w) { return static_cast<double>(small[(z * low[1] + y) * low[2] + w]); };
  for (int64_t z = 0, i = 0; z < in[0]; ++z)
    for (int64_t y = 0; y < in[1]; ++y)
      for (int64_t w = 0; w < in[2]; ++w, ++i) {
        const Tap &a = taps[0][z], &b = taps[1][y], &c = taps[2][w];
        double acc = 0.0;
        for (int dz = 0; dz < 2; ++dz)
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx)
              acc += (dz ? a.t : 1 - a.t) * (dy ? b.t : 1 - b.t) * (dx ? c.t : 1 - c.t) *
                     at(dz ? a.i1 : a.i0, dy ? b.i1 : b.i0, dx ? c.i1 : c.i0);
        y_out[i] = static_cast<float>(acc);
      }
  return out;
}

Tensor adjust_gamma(const Tensor& image, double gamma, bool invert, bool retain_stats) {
  check_image(image, "adjust_gamma");
  check_positive(gamma, "adjust_gamma", "gamma");
  const int64_t n = image.numel();
  const double sign = invert ? -1.0 : 1.0;
  std::vector<double> v(static_cast<size_t>(n));
  const float* x = image.data<float>();
  for (int64_t i = 0; i < n; ++i) v[i] = sign * x[i];
  auto mean_std = [&](const std::vector<double>& a) {
    double mean = 0.0, sq = 0.0;
    for (double e : a) mean += e;
    mean /= static_cast<double>(n);
    for (double e : a) sq += (e - mean) * (e - mean);
    return std::array<double, 2>{mean, std::sqrt(sq / static_cast<double>(n))};
  };
  const std::array<double, 2> before = mean_std(v);
  const double lo = *std::min_element(v.begin(), v.end()), range = *std::max_element(v.begin(), v.end()) - lo;
  for (double& e : v) e = std::pow((e - lo) / (range + 1e-7), gamma) * range + lo;
  if (retain_stats) {
    const std::array<double, 2> after = mean_std(v);
    for (double& e : v) e = (e - after[0]) / (after[1] + 1e-8) * before[1] + before[0];
  }
  Tensor out = Tensor::empty(image.shape(), kFloat32);
  float* y = out.data<float>();
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(sign * v[i]);
  return out;
}

Sample augment_patch(const Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                     const AugmentOptions& options, Generator& gen) {
  const char* op = "augment_patch";
  check_sample(volume, op);
  check_extent(size, op);
  options.check(op);
  // The spatial transform's draws (augment.h, 1-3).
  SpatialParams sp;
  bool spatial = false;
  if (draw(options.elastic_p, gen)) {
    const double alpha = uniform_in(options.elastic_alpha, gen), sigma = uniform_in(options.elastic_sigma, gen);
    for (Tensor& d : sp.displacement) {
      Tensor noise = Tensor::empty(size, kFloat32);
      float* u = noise.data<float>();
      for (int64_t i = 0, n = noise.numel(); i < n; ++i) u[i] = static_cast<float>(gen.uniform() * 2.0 - 1.0);
      d = elastic_displacement(noise, alpha, sigma);
    }
    spatial = true;
  }
  if (draw(options.rotation_p, gen)) {
    for (double& a : sp.angles)
      if (draw(options.rotation_p_per_axis, gen)) a = uniform_in(options.rotation_angle, gen);
    spatial = true;
  }
  if (draw(options.scale_p, gen)) {
    sp.scale = two_sided(options.scale, gen);
    spatial = true;
  }
  Sample out = spatial ? spatial_transform(volume, start, size, sp)
                       : Sample{extract_region(volume.image, start, size), extract_region(volume.label, start, size)};
  // The intensity transforms on the patch's image (4-10), in nnU-Net's order.
  Tensor& x = out.image;
  if (draw(options.noise_p, gen)) x = gaussian_noise(x, uniform_in(options.noise_variance, gen), gen);
  if (draw(options.blur_p, gen) && draw(options.blur_p_per_channel, gen)) x = gaussian_blur(x, uniform_in(options.blur_sigma, gen));
  if (draw(options.brightness_p, gen)) x = multiply_brightness(x, uniform_in(options.brightness, gen));
  if (draw(options.contrast_p, gen)) x = adjust_contrast(x, two_sided(options.contrast, gen), options.contrast_preserve_range);
  if (draw(options.low_res_p, gen) && draw(options.low_res_p_per_channel, gen))
    x = simulate_low_resolution(x, uniform_in(options.low_res_zoom, gen));
  if (draw(options.gamma_inverted_p, gen)) x = adjust_gamma(x, two_sided(options.gamma, gen), true, options.gamma_retain_stats);
  if (draw(options.gamma_p, gen)) x = adjust_gamma(x, two_sided(options.gamma, gen), false, options.gamma_retain_stats);
  return out;
}

}  // namespace halfgrad::io
