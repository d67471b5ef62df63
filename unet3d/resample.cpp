// resample.cpp - see resample.h.
#include "unet3d/resample.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "autograd/node.h"
#include "core/error.h"
#include "ops/pool/upsample.h"

namespace unet3d_app {

using namespace halfgrad;

namespace {

// The shortest text that reads back to exactly `v` (std::to_chars' round trip).
std::string exact(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// numpy.percentile(values, q) with its default linear interpolation between order statistics.
double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double median(const std::vector<double>& values) { return percentile(values, 50.0); }

}  // namespace

SpacingChoice SpacingChoice::parse(const std::string& text, const std::string& where) {
  SpacingChoice c;
  if (text == "native") { c.mode = Mode::Native; return c; }
  if (text == "median") { c.mode = Mode::Median; return c; }
  c.mode = Mode::Fixed;
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (size_t d = 0; d < 3; ++d) {
    const auto r = std::from_chars(p, end, c.mm[d]);
    const bool sep_ok = d < 2 ? (r.ptr != end && *r.ptr == ',') : r.ptr == end;
    HG_CHECK(r.ec == std::errc() && sep_ok,
             where << ": '" << text.substr(0, 64) << "'; expected native, median or three spacings Z,Y,X in mm "
                   << "(e.g. 3,0.8,0.8)");
    p = r.ptr + (d < 2 ? 1 : 0);
  }
  check_spacing(c.mm, where + ": '" + text + "'");
  return c;
}

SpacingChoice SpacingChoice::fixed(const Spacing& mm) {
  check_spacing(mm, "SpacingChoice::fixed");
  return {Mode::Fixed, mm};
}

std::string SpacingChoice::str() const {
  if (mode == Mode::Native) return "native";
  if (mode == Mode::Median) return "median";
  return exact(mm[0]) + "," + exact(mm[1]) + "," + exact(mm[2]);
}

std::string spacing_str(const Spacing& s) {
  // Six significant digits: a float32 pixdim of 0.001 is 0.0010000000474974513 exactly.
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.6gx%.6gx%.6g mm", s[0], s[1], s[2]);
  return buf;
}

void check_spacing(const Spacing& s, const std::string& where) {
  for (size_t d = 0; d < 3; ++d)
    HG_CHECK(std::isfinite(s[d]) && s[d] >= SpacingChoice::kMinMm && s[d] <= SpacingChoice::kMaxMm,
             where << ": spacing " << s[0] << "x" << s[1] << "x" << s[2] << " mm (z, y, x); expected every value in ["
                   << SpacingChoice::kMinMm << ", " << SpacingChoice::kMaxMm << "] mm");
}

Extent resampled_shape(const Extent& shape, const Spacing& spacing, const Spacing& target, const std::string& where) {
  check_spacing(spacing, where + " (its voxel size)");
  check_spacing(target, where + " (the target)");
  HG_CHECK(shape[0] >= 1 && shape[1] >= 1 && shape[2] >= 1,
           where << ": shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << "; expected extents >= 1");
  Extent out{};
  double voxels = 1;
  for (size_t d = 0; d < 3; ++d) {
    // np.round rounds half to even, as nearbyint in the default rounding mode.
    const double e = std::max(1.0, std::nearbyint(static_cast<double>(shape[d]) * spacing[d] / target[d]));
    voxels *= e;
    out[d] = e < 9.0e15 ? static_cast<int64_t>(e) : 0;
  }
  HG_CHECK(voxels <= static_cast<double>(kMaxResampledVoxels),
           where << ": " << shape[0] << "x" << shape[1] << "x" << shape[2] << " voxels of " << spacing_str(spacing)
                 << " resampled to " << spacing_str(target) << " would be " << voxels
                 << " voxels; expected at most 2^30 (choose a coarser spacing)");
  return out;
}

Spacing target_spacing(const std::vector<Spacing>& spacings, const std::vector<Extent>& shapes, const std::string& where) {
  HG_CHECK(!spacings.empty() && spacings.size() == shapes.size(),
           where << ": target_spacing of " << spacings.size() << " spacing(s) and " << shapes.size()
                 << " shape(s); expected one of each per training case, at least one");
  std::array<std::vector<double>, 3> sp, sz;
  for (size_t i = 0; i < spacings.size(); ++i) {
    check_spacing(spacings[i], where);
    for (size_t d = 0; d < 3; ++d) {
      sp[d].push_back(spacings[i][d]);
      sz[d].push_back(static_cast<double>(shapes[i][d]));
    }
  }
  Spacing target{};
  std::array<double, 3> size{};
  for (size_t d = 0; d < 3; ++d) {
    target[d] = median(sp[d]);
    size[d] = median(sz[d]);
  }
  // nnU-Net v2's anisotropy rule (anisotropy_threshold 3): the first coarsest axis, as np.argmax.
  const size_t worst = static_cast<size_t>(std::max_element(target.begin(), target.end()) - target.begin());
  double other_spacing = 0, other_size = INFINITY;
  for (size_t d = 0; d < 3; ++d)
    if (d != worst) {
      other_spacing = std::max(other_spacing, target[d]);
      other_size = std::min(other_size, size[d]);
    }
  if (target[worst] > 3.0 * other_spacing && size[worst] * 3.0 < other_size) {
    double t = percentile(sp[worst], 10.0);
    if (t < other_spacing) t = std::max(other_spacing, t) + 1e-5;
    target[worst] = t;
  }
  return target;
}

Tensor resample_image(const Tensor& image, const Extent& shape) {
  HG_CHECK(image.defined() && (image.dim() == 3 || image.dim() == 4) && image.dtype() == kFloat32,
           "resample_image: image " << (image.defined() ? shape_str(image.shape()) + " " + dtype_name(image.dtype())
                                                        : std::string("undefined"))
                                    << "; expected float32 (D, H, W) or (C, D, H, W)");
  HG_CHECK(shape[0] >= 1 && shape[1] >= 1 && shape[2] >= 1,
           "resample_image: output " << shape[0] << "x" << shape[1] << "x" << shape[2] << "; expected extents >= 1");
  const Shape& in = image.shape();
  const int64_t c = image.dim() == 4 ? in[0] : 1;
  const size_t o = image.dim() == 4 ? 1 : 0;
  if (in[o] == shape[0] && in[o + 1] == shape[1] && in[o + 2] == shape[2]) return image;
  NoGradGuard no_grad;
  const Tensor x = image.contiguous().view_as_shape({1, c, in[o], in[o + 1], in[o + 2]});
  const Tensor y = ops::upsample_trilinear3d(x, ExpandingArray<3>(shape), false);
  return image.dim() == 4 ? y.view_as_shape({c, shape[0], shape[1], shape[2]})
                          : y.view_as_shape({shape[0], shape[1], shape[2]});
}

Tensor resample_label(const Tensor& label, int64_t num_classes, const Extent& shape) {
  HG_CHECK(label.defined() && label.dim() == 3 && label.dtype() == kInt64 && !label.is_cuda(),
           "resample_label: label " << (label.defined() ? shape_str(label.shape()) + " " + dtype_name(label.dtype())
                                                        : std::string("undefined"))
                                    << "; expected an int64 (D, H, W) label map on the CPU");
  HG_CHECK(num_classes >= 1, "resample_label: num_classes " << num_classes << "; expected >= 1");
  const Shape& in = label.shape();
  const int64_t n_in = label.numel();
  const Tensor lc = label.contiguous();
  const int64_t* l = lc.data<int64_t>();
  for (int64_t i = 0; i < n_in; ++i)
    HG_CHECK(l[i] >= 0 && l[i] < num_classes, "resample_label: label " << l[i] << " at flat index " << i
                                                                        << "; expected a class in [0, " << num_classes << ")");
  if (in[0] == shape[0] && in[1] == shape[1] && in[2] == shape[2]) return label;
  // One class at a time (the memory of two volumes, not num_classes): its indicator resampled, and
  // the running argmax, ties to the lower class (strictly greater replaces).
  const int64_t n_out = shape[0] * shape[1] * shape[2];
  Tensor out = Tensor::zeros({shape[0], shape[1], shape[2]}, kInt64);
  std::vector<float> best(static_cast<size_t>(n_out), -1.0f);
  int64_t* o = out.data<int64_t>();
  Tensor indicator = Tensor::empty(in, kFloat32);
  float* ind = indicator.data<float>();
  for (int64_t c = 0; c < num_classes; ++c) {
    for (int64_t i = 0; i < n_in; ++i) ind[i] = l[i] == c ? 1.0f : 0.0f;
    const Tensor w = resample_image(indicator, shape);
    const float* pw = w.data<float>();
    for (int64_t i = 0; i < n_out; ++i)
      if (pw[i] > best[i]) {
        best[i] = pw[i];
        o[i] = c;
      }
  }
  return out;
}

}  // namespace unet3d_app
