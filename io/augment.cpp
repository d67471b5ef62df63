// augment.cpp - see augment.h. All loops walk (z, y, x) with x fastest, the storage order; arithmetic
// is in float64, each result rounded once to float32.
#include "io/augment.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "io/augment_math.h"
#ifdef HALFGRAD_CUDA
#include "io/augment_cuda.h"
#endif

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

// ---- interpolation: augment_math.h's read_linear and read_nearest (shared with the CUDA kernels) ------

using augment_math::Extent3;
Extent3 extent_of(const Shape& s) { return Extent3{{s[0], s[1], s[2]}}; }

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

namespace {

// The SpatialMap of `params` for a patch of extent `size` at `start` (augment.h: spatial_transform).
augment_math::SpatialMap spatial_map(const std::array<int64_t, 3>& start, const Shape& size, const SpatialParams& params) {
  augment_math::SpatialMap map{};
  const auto m = rotation_matrix(params.angles);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) map.m[i][j] = m[i][j];
  map.scale = params.scale;
  for (int d = 0; d < 3; ++d) {  // the patch's centre in the patch, and in the volume
    map.half[d] = (static_cast<double>(size[d]) - 1.0) / 2.0;
    map.centre[d] = static_cast<double>(start[d]) + map.half[d];
  }
  return map;
}

// The volume's device, the same for image and label.
Device device_of(const Sample& s, const char* op) {
  HG_CHECK(s.image.device() == s.label.device(), op << ": image and label are on different devices; expected one");
  return s.image.device();
}

#ifdef HALFGRAD_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

// CUDA volumes go to the kernels (augment_cuda.h); in a build without CUDA none can exist.
bool on_cuda(const Tensor& t) { return kCudaBuild && t.is_cuda(); }

}  // namespace

Sample spatial_transform(const Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                         const SpatialParams& params) {
  const char* op = "spatial_transform";
  check_sample(volume, op);
  check_extent(size, op);
  check_positive(params.scale, op, "scale");
  for (double a : params.angles) HG_CHECK(std::isfinite(a), op << ": angle " << a << "; expected a finite number (radians)");
  const Device device = device_of(volume, op);
  const bool elastic = params.displacement[0].defined() || params.displacement[1].defined() || params.displacement[2].defined();
  const float* disp[3] = {nullptr, nullptr, nullptr};
  for (int a = 0; a < 3 && elastic; ++a) {
    const Tensor& d = params.displacement[a];
    HG_CHECK(d.defined() && d.dtype() == kFloat32 && d.shape() == size && d.device() == device,
             op << ": displacement " << a << " is "
                << (d.defined() ? shape_str(d.shape()) + " " + dtype_name(d.dtype()) : std::string("undefined"))
                << "; expected all three float32 of the patch's shape " << shape_str(size) << " on the volume's device");
    disp[a] = d.data<float>();
  }
  const augment_math::SpatialMap map = spatial_map(start, size, params);
#ifdef HALFGRAD_CUDA
  if (on_cuda(volume.image)) return cuda::augment_spatial(volume, start, size, &map, elastic ? &params.displacement : nullptr);
#endif
  const Extent3 in = extent_of(volume.image.shape());
  Sample out{Tensor::empty(size, kFloat32), Tensor::empty(size, kInt64)};
  const float* img = volume.image.data<float>();
  const int64_t* lab = volume.label.data<int64_t>();
  float* out_img = out.image.data<float>();
  int64_t* out_lab = out.label.data<int64_t>();
  int64_t i = 0;
  for (int64_t z = 0; z < size[0]; ++z)
    for (int64_t y = 0; y < size[1]; ++y)
      for (int64_t x = 0; x < size[2]; ++x, ++i) {
        const double d[3] = {elastic ? static_cast<double>(disp[0][i]) : 0.0, elastic ? static_cast<double>(disp[1][i]) : 0.0,
                             elastic ? static_cast<double>(disp[2][i]) : 0.0};
        double p[3];
        augment_math::spatial_source(map, z, y, x, d, p);
        out_img[i] = augment_math::read_linear(img, in, p[0], p[1], p[2]);
        out_lab[i] = augment_math::read_nearest(lab, in, p[0], p[1], p[2]);
      }
  return out;
}

Tensor elastic_displacement(const Tensor& noise, double alpha, double sigma) {
  check_image(noise, "elastic_displacement");
  check_positive(sigma, "elastic_displacement", "sigma");
  HG_CHECK(std::isfinite(alpha), "elastic_displacement: alpha " << alpha << "; expected a finite number");
#ifdef HALFGRAD_CUDA
  if (on_cuda(noise)) return cuda::augment_scale(cuda::augment_gaussian_filter(noise, gaussian_kernel(sigma), true), alpha);
#endif
  Tensor out = noise.clone();
  gaussian_filter(out, sigma, Border::Zero);
  float* d = out.data<float>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) d[i] = static_cast<float>(d[i] * alpha);
  return out;
}

Tensor gaussian_noise(const Tensor& image, double std, Generator& gen) {
  check_image(image, "gaussian_noise");
  HG_CHECK(!image.is_cuda(), "gaussian_noise: image is a CUDA tensor; expected a CPU one (gaussian_noise_philox runs on either)");
  HG_CHECK(std::isfinite(std) && std >= 0, "gaussian_noise: std " << std << "; expected a finite number >= 0");
  return map_voxels(image, [&](double v) { return v + std * gen.normal(); });
}

Tensor gaussian_blur(const Tensor& image, double sigma) {
  check_image(image, "gaussian_blur");
  check_positive(sigma, "gaussian_blur", "sigma");
#ifdef HALFGRAD_CUDA
  if (on_cuda(image)) return cuda::augment_gaussian_filter(image, gaussian_kernel(sigma), false);
#endif
  Tensor out = image.clone();
  gaussian_filter(out, sigma, Border::Reflect);
  return out;
}

Tensor multiply_brightness(const Tensor& image, double factor) {
  check_image(image, "multiply_brightness");
  HG_CHECK(std::isfinite(factor), "multiply_brightness: factor " << factor << "; expected a finite number");
#ifdef HALFGRAD_CUDA
  if (on_cuda(image)) return cuda::augment_scale(image, factor);
#endif
  return map_voxels(image, [&](double v) { return v * factor; });
}

Tensor adjust_contrast(const Tensor& image, double factor, bool preserve_range) {
  check_image(image, "adjust_contrast");
  HG_CHECK(std::isfinite(factor), "adjust_contrast: factor " << factor << "; expected a finite number");
#ifdef HALFGRAD_CUDA
  if (on_cuda(image)) return cuda::augment_contrast(image, factor, preserve_range);
#endif
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
#ifdef HALFGRAD_CUDA
  if (on_cuda(image)) return cuda::augment_low_resolution(image, low);
#endif
  // Down by nearest neighbour, up by linear interpolation (augment_math.h: low_res_pick, low_res_tap).
  std::array<std::vector<int64_t>, 3> pick;
  std::array<std::vector<augment_math::Tap>, 3> taps;
  for (int d = 0; d < 3; ++d) {
    for (int64_t o = 0; o < low[d]; ++o) pick[d].push_back(augment_math::low_res_pick(o, in[d], low[d]));
    for (int64_t o = 0; o < in[d]; ++o) taps[d].push_back(augment_math::low_res_tap(o, low[d], in[d]));
  }
  std::vector<float> small(static_cast<size_t>(shape_numel(low)));
  const float* x = image.data<float>();
  for (int64_t z = 0, i = 0; z < low[0]; ++z)
    for (int64_t y = 0; y < low[1]; ++y)
      for (int64_t w = 0; w < low[2]; ++w, ++i) small[i] = x[(pick[0][z] * in[1] + pick[1][y]) * in[2] + pick[2][w]];
  Tensor out = Tensor::empty(in, kFloat32);
  float* y_out = out.data<float>();
  auto at = [&](int64_t z, int64_t y, int64_t w) { return static_cast<double>(small[(z * low[1] + y) * low[2] + w]); };
  for (int64_t z = 0, i = 0; z < in[0]; ++z)
    for (int64_t y = 0; y < in[1]; ++y)
      for (int64_t w = 0; w < in[2]; ++w, ++i) {
        const augment_math::Tap &a = taps[0][z], &b = taps[1][y], &c = taps[2][w];
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
#ifdef HALFGRAD_CUDA
  if (on_cuda(image)) return cuda::augment_gamma(image, gamma, invert, retain_stats);
#endif
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
  for (double& e : v) e = augment_math::gamma_map(e, lo, range, gamma);
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


// ---- the plan (augment.h: draw_augment_plan, apply_augment_plan) -------------------------------------

AugmentPlan draw_augment_plan(const AugmentOptions& options, Generator& gen) {
  options.check("draw_augment_plan");
  AugmentPlan plan;
  plan.key = gen.engine()();
  plan.contrast_preserve_range = options.contrast_preserve_range;
  plan.gamma_retain_stats = options.gamma_retain_stats;
  if (draw(options.elastic_p, gen)) {
    const double alpha = uniform_in(options.elastic_alpha, gen);
    plan.elastic = AugmentPlan::Elastic{alpha, uniform_in(options.elastic_sigma, gen)};
    plan.spatial = true;
  }
  if (draw(options.rotation_p, gen)) {
    for (double& a : plan.angles)
      if (draw(options.rotation_p_per_axis, gen)) a = uniform_in(options.rotation_angle, gen);
    plan.spatial = true;
  }
  if (draw(options.scale_p, gen)) {
    plan.scale = two_sided(options.scale, gen);
    plan.spatial = true;
  }
  if (draw(options.noise_p, gen)) plan.noise_std = uniform_in(options.noise_variance, gen);
  if (draw(options.blur_p, gen) && draw(options.blur_p_per_channel, gen)) plan.blur_sigma = uniform_in(options.blur_sigma, gen);
  if (draw(options.brightness_p, gen)) plan.brightness = uniform_in(options.brightness, gen);
  if (draw(options.contrast_p, gen)) plan.contrast = two_sided(options.contrast, gen);
  if (draw(options.low_res_p, gen) && draw(options.low_res_p_per_channel, gen))
    plan.low_res_zoom = uniform_in(options.low_res_zoom, gen);
  if (draw(options.gamma_inverted_p, gen)) plan.gamma_inverted = two_sided(options.gamma, gen);
  if (draw(options.gamma_p, gen)) plan.gamma = two_sided(options.gamma, gen);
  return plan;
}

Tensor philox_uniform_noise(const Shape& size, uint64_t key, uint32_t stream, Device device) {
  check_extent(size, "philox_uniform_noise");
#ifdef HALFGRAD_CUDA
  if (device == Device::CUDA) return cuda::augment_uniform_noise(size, key, stream);
#endif
  HG_CHECK(device == Device::CPU, "philox_uniform_noise: CUDA needs a build with HALFGRAD_CUDA");
  Tensor out = Tensor::empty(size, kFloat32);
  float* u = out.data<float>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    const philox::Words4 w = philox::draw(key, stream, static_cast<uint64_t>(i));
    u[i] = static_cast<float>(philox::uniform_signed(w.v[0], w.v[1]));
  }
  return out;
}

Tensor gaussian_noise_philox(const Tensor& image, double std, uint64_t key) {
  check_image(image, "gaussian_noise_philox");
  HG_CHECK(std::isfinite(std) && std >= 0, "gaussian_noise_philox: std " << std << "; expected a finite number >= 0");
#ifdef HALFGRAD_CUDA
  if (on_cuda(image)) return cuda::augment_gaussian_noise(image, std, key);
#endif
  Tensor out = Tensor::empty(image.shape(), kFloat32);
  const float* x = image.data<float>();
  float* y = out.data<float>();
  for (int64_t i = 0, n = image.numel(); i < n; ++i)
    y[i] = static_cast<float>(static_cast<double>(x[i]) + std * philox::normal(philox::draw(key, 0, static_cast<uint64_t>(i))));
  return out;
}

Sample apply_augment_plan(const Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                          const AugmentPlan& plan) {
  const char* op = "apply_augment_plan";
  check_sample(volume, op);
  check_extent(size, op);
  const Device device = device_of(volume, op);
  Sample out;
  if (plan.spatial) {
    SpatialParams sp;
    sp.angles = plan.angles;
    sp.scale = plan.scale;
    if (plan.elastic)
      for (int a = 0; a < 3; ++a)
        sp.displacement[a] = elastic_displacement(philox_uniform_noise(size, plan.key, static_cast<uint32_t>(1 + a), device),
                                                  plan.elastic->alpha, plan.elastic->sigma);
    out = spatial_transform(volume, start, size, sp);
  } else if (on_cuda(volume.image)) {
#ifdef HALFGRAD_CUDA
    out = cuda::augment_spatial(volume, start, size, nullptr, nullptr);  // extract_region's bits
#endif
  } else {
    out = Sample{extract_region(volume.image, start, size), extract_region(volume.label, start, size)};
  }
  // The intensity transforms, in augment_patch's order.
  Tensor& x = out.image;
  if (plan.noise_std) x = gaussian_noise_philox(x, *plan.noise_std, plan.key);
  if (plan.blur_sigma) x = gaussian_blur(x, *plan.blur_sigma);
  if (plan.brightness) x = multiply_brightness(x, *plan.brightness);
  if (plan.contrast) x = adjust_contrast(x, *plan.contrast, plan.contrast_preserve_range);
  if (plan.low_res_zoom) x = simulate_low_resolution(x, *plan.low_res_zoom);
  if (plan.gamma_inverted) x = adjust_gamma(x, *plan.gamma_inverted, true, plan.gamma_retain_stats);
  if (plan.gamma) x = adjust_gamma(x, *plan.gamma, false, plan.gamma_retain_stats);
  return out;
}

void copy_into_batch(const Sample& s, const std::array<bool, 3>& flip, Tensor& x, Tensor& y, int64_t row) {
  const char* op = "copy_into_batch";
  check_sample(s, op);
  const Shape& v = s.image.shape();
  const Device device = device_of(s, op);
  HG_CHECK(x.defined() && y.defined() && x.dim() == 5 && y.dim() == 4 && x.dtype() == kFloat32 && y.dtype() == kInt64 &&
               x.size(1) == 1 && x.size(0) == y.size(0) && Shape(x.shape().begin() + 2, x.shape().end()) == v &&
               Shape(y.shape().begin() + 1, y.shape().end()) == v && x.device() == device && y.device() == device &&
               x.memory_format() == MemoryFormat::Contiguous,
           op << ": batch x " << (x.defined() ? shape_str(x.shape()) : "undefined") << ", y "
              << (y.defined() ? shape_str(y.shape()) : "undefined") << "; expected contiguous float32 (B, 1) + "
              << shape_str(v) << " and int64 (B) + " << shape_str(v) << " on the sample's device");
  HG_CHECK(row >= 0 && row < x.size(0), op << ": row " << row << " of a batch of " << x.size(0));
#ifdef HALFGRAD_CUDA
  if (on_cuda(s.image)) return cuda::augment_copy_into_batch(s, flip, x, y, row);
#endif
  const int64_t n = s.image.numel();
  const float* img = s.image.data<float>();
  const int64_t* lab = s.label.data<int64_t>();
  float* xo = x.data<float>() + row * n;
  int64_t* yo = y.data<int64_t>() + row * n;
  for (int64_t z = 0, i = 0; z < v[0]; ++z)
    for (int64_t h = 0; h < v[1]; ++h)
      for (int64_t w = 0; w < v[2]; ++w, ++i) {
        const int64_t j = ((flip[0] ? v[0] - 1 - z : z) * v[1] + (flip[1] ? v[1] - 1 - h : h)) * v[2] + (flip[2] ? v[2] - 1 - w : w);
        xo[i] = img[j];
        yo[i] = lab[j];
      }
}

}  // namespace halfgrad::io
