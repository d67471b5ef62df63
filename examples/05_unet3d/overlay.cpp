// overlay.cpp - see overlay.h.
#include "examples/05_unet3d/overlay.h"

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace unet3d_app {

using namespace halfgrad;

namespace {

// Class colours (RGB): red, green, blue, yellow, magenta, cyan.
constexpr uint8_t kPalette[6][3] = {{255, 0, 0}, {0, 200, 0}, {40, 90, 255}, {255, 220, 0}, {255, 0, 255}, {0, 220, 220}};
constexpr double kAlpha = 0.5;

void check_map(const Tensor& t, const Shape& s, const char* what) {
  HG_CHECK(t.defined() && t.dtype() == kInt64 && t.shape() == s && t.device() == Device::CPU,
           "overlay: " << what << " must be a CPU int64 tensor of the image's shape " << shape_str(s) << ", got "
                       << (t.defined() ? shape_str(t.shape()) + " " + dtype_name(t.dtype()) : std::string("undefined")));
}

}  // namespace

int64_t overlay_slice(const Tensor& label, const Tensor& pred) {
  const Tensor& m = label.defined() ? label : pred;
  HG_CHECK(m.defined() && m.dim() == 3 && m.dtype() == kInt64, "overlay_slice: expected a (D, H, W) int64 map");
  const Tensor d = m.contiguous();
  const int64_t D = d.size(0), n = d.size(1) * d.size(2);
  int64_t best = -1, best_count = 0;
  for (int64_t z = 0; z < D; ++z) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += d.data<int64_t>()[z * n + i] > 0;
    if (count > best_count) { best = z; best_count = count; }
  }
  return best >= 0 ? best : D / 2;
}

RgbImage compose_overlay(const Tensor& image, const Tensor& label, const Tensor& pred) {
  HG_CHECK(image.defined() && image.dim() == 3 && image.dtype() == kFloat32 && image.device() == Device::CPU,
           "overlay: the image must be a CPU float32 (D, H, W) tensor");
  const Shape& s = image.shape();
  check_map(pred, s, "the prediction");
  if (label.defined()) check_map(label, s, "the label");
  const Tensor img = image.contiguous();
  const int64_t H = s[1], W = s[2], n = H * W;
  const int64_t z = overlay_slice(label, pred);

  // The grey window: nearest-rank 1st and 99th percentiles over the whole volume.
  std::vector<float> sorted(img.data<float>(), img.data<float>() + img.numel());
  auto rank = [&](double q) {
    const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size()))) - (q > 0 ? 1 : 0);
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end());
    return sorted[k];
  };
  const float lo = rank(0.01), hi = rank(0.99);
  const float span = hi > lo ? hi - lo : 1.0f;

  std::vector<const int64_t*> maps = {nullptr};  // panel 0: the image alone
  const Tensor lab = label.defined() ? label.contiguous() : Tensor(), prd = pred.contiguous();
  if (label.defined()) maps.push_back(lab.data<int64_t>() + z * n);
  maps.push_back(prd.data<int64_t>() + z * n);
  const int64_t scale = std::max<int64_t>(1, (kMinPanelHeight + H - 1) / H);
  RgbImage out;
  out.width = static_cast<int64_t>(maps.size()) * W * scale;
  out.height = H * scale;
  out.rgb.assign(static_cast<size_t>(3 * out.width * out.height), 0);
  const float* slice = img.data<float>() + z * n;
  for (size_t p = 0; p < maps.size(); ++p)
    for (int64_t y = 0; y < out.height; ++y)
      for (int64_t x = 0; x < W * scale; ++x) {
        const int64_t v = (y / scale) * W + x / scale;
        const double g = 255.0 * std::clamp((slice[v] - lo) / span, 0.0f, 1.0f);
        double rgb[3] = {g, g, g};
        if (maps[p] != nullptr && maps[p][v] > 0) {
          const uint8_t* c = kPalette[(maps[p][v] - 1) % 6];
          for (int k = 0; k < 3; ++k) rgb[k] = (1 - kAlpha) * rgb[k] + kAlpha * c[k];
        }
        uint8_t* px = &out.rgb[static_cast<size_t>(3 * (y * out.width + static_cast<int64_t>(p) * W * scale + x))];
        for (int k = 0; k < 3; ++k) px[k] = static_cast<uint8_t>(std::lround(rgb[k]));
      }
  return out;
}

void write_png(const std::string& path, const RgbImage& img) {
  HG_CHECK(img.width > 0 && img.height > 0 && img.rgb.size() == static_cast<size_t>(3 * img.width * img.height),
           "write_png: " << path << ": image " << img.width << " x " << img.height << " with " << img.rgb.size()
                         << " bytes; expected 3 bytes per pixel");
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  png_image pi;
  std::memset(&pi, 0, sizeof pi);
  pi.version = PNG_IMAGE_VERSION;
  pi.width = static_cast<png_uint_32>(img.width);
  pi.height = static_cast<png_uint_32>(img.height);
  pi.format = PNG_FORMAT_RGB;
  const bool ok = png_image_write_to_file(&pi, tmp.c_str(), 0, img.rgb.data(), 0, nullptr) != 0;
  const std::string why = ok ? "" : pi.message;
  png_image_free(&pi);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = ok ? std::strerror(errno) : why;
    std::remove(tmp.c_str());
    HG_FAIL("write_png: " << path << ": could not write the PNG (" << reason << "); expected a writable folder");
  }
}

}  // namespace unet3d_app
