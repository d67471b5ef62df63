// sliding_window.cpp - see sliding_window.h.
#include "examples/05_unet3d/sliding_window.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace unet3d_app {

using namespace halfgrad;

Tensor gaussian_importance_map(const std::array<int64_t, 3>& window, double sigma_scale) {
  HG_CHECK(sigma_scale > 0 && std::isfinite(sigma_scale),
           "gaussian_importance_map: sigma_scale " << sigma_scale << "; expected a finite number > 0");
  std::array<std::vector<double>, 3> axis;  // the 1-D factors exp(-(p - c)^2 / (2 sigma^2))
  for (size_t a = 0; a < 3; ++a) {
    HG_CHECK(window[a] >= 1, "gaussian_importance_map: window extent " << window[a] << "; expected >= 1");
    const double sigma = static_cast<double>(window[a]) * sigma_scale;
    const int64_t c = window[a] / 2;
    for (int64_t p = 0; p < window[a]; ++p) {
      const double d = static_cast<double>(p - c);
      axis[a].push_back(std::exp(-0.5 * d * d / (sigma * sigma)));
    }
  }
  Tensor map = Tensor::empty({window[0], window[1], window[2]}, kFloat32);
  float* m = map.data<float>();
  float smallest_nonzero = 1.0f;  // the centre's value: every factor is 1 there
  for (int64_t z = 0; z < window[0]; ++z)
    for (int64_t y = 0; y < window[1]; ++y)
      for (int64_t x = 0; x < window[2]; ++x) {
        const float v = static_cast<float>(axis[0][z] * axis[1][y] * axis[2][x]);
        m[(z * window[1] + y) * window[2] + x] = v;
        if (v > 0) smallest_nonzero = std::min(smallest_nonzero, v);
      }
  for (int64_t i = 0; i < map.numel(); ++i)
    if (m[i] == 0.0f) m[i] = smallest_nonzero;  // nnU-Net: no voxel may get weight 0 (float underflow)
  return map;
}

std::vector<int64_t> tile_starts(int64_t size, int64_t window, double overlap) {
  HG_CHECK(window >= 1 && window <= size, "tile_starts: window " << window << " for an axis of " << size
                                                                 << " voxels; expected 1 <= window <= size");
  HG_CHECK(overlap >= 0 && overlap < 1, "tile_starts: overlap " << overlap << "; expected a fraction in [0, 1)");
  const double target_step = static_cast<double>(window) * (1.0 - overlap);
  const int64_t n = static_cast<int64_t>(std::ceil(static_cast<double>(size - window) / target_step)) + 1;
  const double actual_step = n > 1 ? static_cast<double>(size - window) / static_cast<double>(n - 1) : 0.0;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < n; ++i)  // nearbyint rounds half to even in the default mode, as np.round
    starts.push_back(static_cast<int64_t>(std::nearbyint(actual_step * static_cast<double>(i))));
  return starts;
}

TilePlan plan_tiles(const Shape& shape, const SlidingWindowOptions& o) {
  HG_CHECK(shape.size() == 3, "sliding window: volume shape " << shape_str(shape) << "; expected (D, H, W)");
  HG_CHECK(o.divisor >= 1, "sliding window: size divisor " << o.divisor << "; expected >= 1");
  HG_CHECK(o.overlap >= 0 && o.overlap < 1, "sliding window: overlap " << o.overlap << "; expected a fraction in [0, 1)");
  TilePlan p;
  for (size_t a = 0; a < 3; ++a) {
    HG_CHECK(shape[a] >= 1 && o.window[a] >= 1, "sliding window: volume " << shape_str(shape) << ", window ("
                                                                           << o.window[0] << ", " << o.window[1] << ", "
                                                                           << o.window[2] << "); expected positive extents");
    p.padded[a] = (shape[a] + o.divisor - 1) / o.divisor * o.divisor;
    // The window, a multiple of the divisor too (rounded down, at least one divisor), clipped.
    const int64_t w = std::max(o.divisor, o.window[a] / o.divisor * o.divisor);
    p.window[a] = std::min(w, p.padded[a]);
    p.starts[a] = tile_starts(p.padded[a], p.window[a], o.overlap);
  }
  return p;
}

namespace {

// dst = src (n volumes of d x h x w, dense) flipped along z (bit 0 of mask), y (bit 1), x (bit 2).
void flip_volumes(const float* src, float* dst, int64_t n, int64_t d, int64_t h, int64_t w, int mask) {
  for (int64_t c = 0; c < n; ++c)
    for (int64_t z = 0; z < d; ++z)
      for (int64_t y = 0; y < h; ++y) {
        const int64_t sz = mask & 1 ? d - 1 - z : z, sy = mask & 2 ? h - 1 - y : y;
        const float* s = src + ((c * d + sz) * h + sy) * w;
        float* t = dst + ((c * d + z) * h + y) * w;
        if (mask & 4)
          for (int64_t x = 0; x < w; ++x) t[x] = s[w - 1 - x];
        else
          std::memcpy(t, s, static_cast<size_t>(w) * sizeof(float));
      }
}

// flip_volumes's bits (1 z, 2 y, 4 x) of the mirror axes; throws for an axis outside 0..2.
int mirror_mask(const SlidingWindowOptions& o) {
  int m = 0;
  for (int64_t a : o.mirror_axes) {
    HG_CHECK(a >= 0 && a <= 2, "sliding window: mirror axis " << a << " is not one of 0 (z), 1 (y), 2 (x)");
    m |= 1 << a;
  }
  return m;
}

// The network's logits for x (1, C, d, h, w) on the host, as dense float32 (K, d, h, w) on the host.
Tensor host_logits(const Network& net, const Tensor& x) {
  const Shape& s = x.shape();
  Tensor y = net(x);
  HG_CHECK(y.defined() && y.dim() == 5 && y.size(0) == 1 && y.size(2) == s[2] && y.size(3) == s[3] && y.size(4) == s[4],
           "sliding window: the network returned " << (y.defined() ? shape_str(y.shape()) : std::string("nothing"))
                                                   << " for a tile of " << shape_str(s) << "; expected (1, K, "
                                                   << s[2] << ", " << s[3] << ", " << s[4] << ")");
  Tensor host = y.contiguous().to(kFloat32).copy_to(Device::CPU).contiguous();
  return host.view_as_shape({y.size(1), s[2], s[3], s[4]});
}

}  // namespace

int64_t mirror_passes(const SlidingWindowOptions& o) {
  const int m = mirror_mask(o);
  return int64_t{1} << (((m >> 0) & 1) + ((m >> 1) & 1) + ((m >> 2) & 1));
}

Tensor sliding_window_logits(const Network& net, const Tensor& image, const SlidingWindowOptions& o,
                             const std::function<void(int64_t, int64_t)>& on_tile) {
  HG_CHECK(image.defined() && image.dim() == 4 && image.dtype() == kFloat32 && image.device() == Device::CPU,
           "sliding window: image " << (image.defined() ? shape_str(image.shape()) + " " + dtype_name(image.dtype())
                                                        : std::string("undefined"))
                                    << "; expected a (C, D, H, W) float32 CPU tensor");
  const Tensor src = image.contiguous();
  const int64_t C = src.size(0), D = src.size(1), H = src.size(2), W = src.size(3);
  const TilePlan plan = plan_tiles({D, H, W}, o);
  const int64_t PD = plan.padded[0], PH = plan.padded[1], PW = plan.padded[2];
  const int64_t wd = plan.window[0], wh = plan.window[1], ww = plan.window[2];
  // One tile: weight 1, so that whole-volume inference returns the network's logits bit for bit.
  const Tensor gauss = plan.num_tiles() == 1 ? Tensor::ones({wd, wh, ww}, kFloat32)
                                             : gaussian_importance_map(plan.window, o.sigma_scale);
  const float* g = gauss.data<float>();

  // The zero-padded image (C, PD, PH, PW): training pads its z-scored volumes with zeros at the end.
  Tensor padded = Tensor::zeros({C, PD, PH, PW}, kFloat32);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t z = 0; z < D; ++z)
      for (int64_t y = 0; y < H; ++y)
        std::memcpy(padded.data<float>() + ((c * PD + z) * PH + y) * PW, src.data<float>() + ((c * D + z) * H + y) * W,
                    static_cast<size_t>(W) * sizeof(float));

  Tensor sum;                                        // (K, PD, PH, PW): sum of logits x Gaussian
  std::vector<float> weight(static_cast<size_t>(PD * PH * PW), 0.0f);  // sum of the Gaussian
  const int mirror_allowed = mirror_mask(o);
  int64_t K = 0, done = 0;
  const int64_t tile_voxels = wd * wh * ww;
  Tensor tile = Tensor::empty({1, C, wd, wh, ww}, kFloat32), flipped = Tensor::empty({1, C, wd, wh, ww}, kFloat32);
  for (int64_t z0 : plan.starts[0])
    for (int64_t y0 : plan.starts[1])
      for (int64_t x0 : plan.starts[2]) {
        for (int64_t c = 0; c < C; ++c)
          for (int64_t z = 0; z < wd; ++z)
            for (int64_t y = 0; y < wh; ++y)
              std::memcpy(tile.data<float>() + ((c * wd + z) * wh + y) * ww,
                          padded.data<float>() + ((c * PD + z0 + z) * PH + y0 + y) * PW + x0,
                          static_cast<size_t>(ww) * sizeof(float));
        Tensor logits = host_logits(net, tile);  // (K, wd, wh, ww)
        if (mirror_allowed != 0) {
          logits = logits.clone();
          float* acc = logits.data<float>();
          for (int mask = 1; mask < 8; ++mask) {
            if ((mask & ~mirror_allowed) != 0) continue;  // flips along an axis the model was not trained on
            flip_volumes(tile.data<float>(), flipped.data<float>(), C, wd, wh, ww, mask);
            const Tensor out = host_logits(net, flipped);
            Tensor back = Tensor::empty(out.shape(), kFloat32);
            flip_volumes(out.data<float>(), back.data<float>(), out.size(0), wd, wh, ww, mask);
            HG_CHECK(out.size(0) == logits.size(0), "sliding window: the network's class count changed between calls");
            for (int64_t i = 0; i < back.numel(); ++i) acc[i] += back.data<float>()[i];
          }
          for (int64_t i = 0; i < logits.numel(); ++i) acc[i] /= static_cast<float>(mirror_passes(o));
        }
        if (!sum.defined()) {
          K = logits.size(0);
          sum = Tensor::zeros({K, PD, PH, PW}, kFloat32);
        }
        HG_CHECK(logits.size(0) == K, "sliding window: the network returned " << logits.size(0) << " classes for one tile and "
                                                                              << K << " for another");
        const float* l = logits.data<float>();
        float* s = sum.data<float>();
        for (int64_t z = 0; z < wd; ++z)
          for (int64_t y = 0; y < wh; ++y) {
            const int64_t row = ((z0 + z) * PH + y0 + y) * PW + x0, trow = (z * wh + y) * ww;
            for (int64_t x = 0; x < ww; ++x) weight[static_cast<size_t>(row + x)] += g[trow + x];
            for (int64_t k = 0; k < K; ++k)
              for (int64_t x = 0; x < ww; ++x)
                s[k * PD * PH * PW + row + x] += l[k * tile_voxels + trow + x] * g[trow + x];
          }
        if (on_tile) on_tile(++done, plan.num_tiles());
      }

  // Divide by the summed weights and cut the padding off: (K, D, H, W).
  Tensor out = Tensor::empty({K, D, H, W}, kFloat32);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t z = 0; z < D; ++z)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const int64_t v = (z * PH + y) * PW + x;
          out.data<float>()[((k * D + z) * H + y) * W + x] = sum.data<float>()[k * PD * PH * PW + v] / weight[static_cast<size_t>(v)];
        }
  return out;
}

}  // namespace unet3d_app
