// preprocess.cpp - see preprocess.h. All loops walk (z, y, x) with x fastest, the storage order.
#include "io/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace halfgrad::io {
namespace {

void check_volume(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.defined(), op << ": " << what << " is undefined; expected a 3-D (D, H, W) tensor");
  HG_CHECK(t.dim() == 3, op << ": " << what << " has shape " << shape_str(t.shape()) << "; expected 3-D (D, H, W)");
}

void check_sample(const Sample& s, const char* op) {
  check_volume(s.image, op, "image");
  check_volume(s.label, op, "label");
  HG_CHECK(s.image.dtype() == kFloat32 && s.label.dtype() == kInt64,
           op << ": image is " << dtype_name(s.image.dtype()) << " and label " << dtype_name(s.label.dtype())
              << "; expected float32 image and int64 label");
  HG_CHECK(s.image.shape() == s.label.shape(), op << ": image " << shape_str(s.image.shape()) << " and label "
                                                  << shape_str(s.label.shape()) << "; expected equal shapes");
}

void check_extent(const Shape& size, const char* op) {
  HG_CHECK(size.size() == 3 && size[0] > 0 && size[1] > 0 && size[2] > 0,
           op << ": size " << shape_str(size) << "; expected 3 positive extents (d, h, w)");
}

void check_factor(int64_t factor, const char* op) {
  HG_CHECK(factor >= 1, op << ": factor " << factor << "; expected an integer >= 1");
}

// Calls fn(float{}) for float32 volumes and fn(int64_t{}) for int64 ones.
template <typename Fn>
Tensor by_dtype(const Tensor& t, const char* op, Fn&& fn) {
  if (t.dtype() == kFloat32) return fn(float{});
  HG_CHECK(t.dtype() == kInt64, op << ": dtype " << dtype_name(t.dtype()) << "; expected float32 (image) or int64 (labels)");
  return fn(int64_t{});
}

int64_t ceil_div(int64_t n, int64_t f) { return (n + f - 1) / f; }

}  // namespace

Tensor zscore(const Tensor& image) {
  HG_CHECK(image.defined() && image.numel() > 0, "zscore: image is undefined or empty; expected a float32 volume");
  HG_CHECK(image.dtype() == kFloat32, "zscore: image is " << dtype_name(image.dtype()) << "; expected float32");
  const float* x = image.data<float>();
  const int64_t n = image.numel();
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  // 1e-8 as the reference: it only matters for a (near-)constant volume, which becomes 0.
  const double denom = std::sqrt(sq / static_cast<double>(n)) + 1e-8;
  Tensor out = Tensor::empty(image.shape(), kFloat32);
  float* y = out.data<float>();
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - mean) / denom);
  return out;
}

Tensor extract_region(const Tensor& vol, const std::array<int64_t, 3>& start, const Shape& size) {
  check_volume(vol, "extract_region", "volume");
  check_extent(size, "extract_region");
  return by_dtype(vol, "extract_region", [&](auto tag) {
    using T = decltype(tag);
    const Shape& in = vol.shape();
    Tensor out = Tensor::zeros(size, vol.dtype());
    const T* src = vol.data<T>();
    T* dst = out.data<T>();
    // x-range of the box that lies inside the volume; rows are copied whole.
    const int64_t x0 = std::max<int64_t>(0, -start[2]), x1 = std::min(size[2], in[2] - start[2]);
    if (x1 <= x0) return out;
    for (int64_t z = 0; z < size[0]; ++z) {
      const int64_t sz = start[0] + z;
      if (sz < 0 || sz >= in[0]) continue;
      for (int64_t y = 0; y < size[1]; ++y) {
        const int64_t sy = start[1] + y;
        if (sy < 0 || sy >= in[1]) continue;
        std::memcpy(dst + (z * size[1] + y) * size[2] + x0, src + (sz * in[1] + sy) * in[2] + start[2] + x0,
                    static_cast<size_t>(x1 - x0) * sizeof(T));
      }
    }
    return out;
  });
}

Tensor pad_or_crop(const Tensor& vol, const Shape& shape) { return extract_region(vol, {0, 0, 0}, shape); }

Sample prepare_fixed_shape(const Tensor& image, const Tensor& label, const Shape& shape) {
  check_sample(Sample{image, label}, "prepare_fixed_shape");
  return Sample{pad_or_crop(zscore(image), shape), pad_or_crop(label, shape)};
}

std::array<int64_t, 3> random_patch_start(const Sample& sample, const PatchOptions& options, Generator& gen) {
  check_sample(sample, "random_patch");
  check_extent(options.size, "random_patch");
  HG_CHECK(options.foreground_prob >= 0.0 && options.foreground_prob <= 1.0,
           "random_patch: foreground_prob " << options.foreground_prob << "; expected a probability in [0, 1]");
  const Shape& in = sample.image.shape();
  const Shape& size = options.size;
  std::array<int64_t, 3> start{0, 0, 0};

  const int64_t* lab = sample.label.data<int64_t>();
  const int64_t n = sample.label.numel();
  int64_t num_foreground = 0;
  if (options.foreground_prob > 0.0 && gen.uniform() < options.foreground_prob)
    num_foreground = std::count_if(lab, lab + n, [](int64_t v) { return v > 0; });
  if (num_foreground > 0) {
    // The k-th foreground voxel in storage order becomes the centre.
    int64_t k = gen.randint(num_foreground), i = 0;
    for (;; ++i)
      if (lab[i] > 0 && k-- == 0) break;
    const int64_t centre[3] = {i / (in[1] * in[2]), (i / in[2]) % in[1], i % in[2]};
    for (int d = 0; d < 3; ++d)
      start[d] = std::clamp(centre[d] - size[d] / 2, int64_t{0}, std::max<int64_t>(0, in[d] - size[d]));
  } else {
    for (int d = 0; d < 3; ++d) start[d] = in[d] > size[d] ? gen.randint(in[d] - size[d] + 1) : 0;
  }
  return start;
}

Sample random_patch(const Sample& sample, const PatchOptions& options, Generator& gen) {
  const std::array<int64_t, 3> start = random_patch_start(sample, options, gen);
  return Sample{extract_region(sample.image, start, options.size), extract_region(sample.label, start, options.size)};
}

Tensor flip(const Tensor& vol, int64_t axis) {
  check_volume(vol, "flip", "volume");
  HG_CHECK(axis >= 0 && axis <= 2, "flip: axis " << axis << "; expected 0 (z), 1 (y) or 2 (x)");
  return by_dtype(vol, "flip", [&](auto tag) {
    using T = decltype(tag);
    const int64_t D = vol.size(0), H = vol.size(1), W = vol.size(2);
    Tensor out = Tensor::empty(vol.shape(), vol.dtype());
    const T* src = vol.data<T>();
    T* dst = out.data<T>();
    for (int64_t z = 0; z < D; ++z)
      for (int64_t y = 0; y < H; ++y) {
        const int64_t sz = axis == 0 ? D - 1 - z : z, sy = axis == 1 ? H - 1 - y : y;
        const T* row = src + (sz * H + sy) * W;
        T* out_row = dst + (z * H + y) * W;
        if (axis == 2)
          std::reverse_copy(row, row + W, out_row);
        else
          std::copy(row, row + W, out_row);
      }
    return out;
  });
}

Sample random_flip(const Sample& sample, Generator& gen, double prob) {
  check_sample(sample, "random_flip");
  HG_CHECK(prob >= 0.0 && prob <= 1.0, "random_flip: prob " << prob << "; expected a probability in [0, 1]");
  Sample out = sample;
  for (int64_t axis = 0; axis < 3; ++axis) {
    if (gen.uniform() < prob) out = Sample{flip(out.image, axis), flip(out.label, axis)};
  }
  return out;
}

Tensor downsample_stride(const Tensor& vol, int64_t factor) {
  check_volume(vol, "downsample_stride", "volume");
  check_factor(factor, "downsample_stride");
  return by_dtype(vol, "downsample_stride", [&](auto tag) {
    using T = decltype(tag);
    const int64_t H = vol.size(1), W = vol.size(2);
    const Shape out_shape{ceil_div(vol.size(0), factor), ceil_div(H, factor), ceil_div(W, factor)};
    Tensor out = Tensor::empty(out_shape, vol.dtype());
    const T* src = vol.data<T>();
    T* dst = out.data<T>();
    for (int64_t z = 0; z < out_shape[0]; ++z)
      for (int64_t y = 0; y < out_shape[1]; ++y)
        for (int64_t x = 0; x < out_shape[2]; ++x)
          *dst++ = src[((z * factor) * H + y * factor) * W + x * factor];
    return out;
  });
}

// Visits the f x f x f block of output voxel (z, y, x), cut short at the volume's far edges.
template <typename T, typename Fn>
void for_each_in_block(const T* src, const Shape& in, int64_t f, int64_t z, int64_t y, int64_t x, Fn&& fn) {
  for (int64_t bz = z * f; bz < std::min(in[0], (z + 1) * f); ++bz)
    for (int64_t by = y * f; by < std::min(in[1], (y + 1) * f); ++by)
      for (int64_t bx = x * f; bx < std::min(in[2], (x + 1) * f); ++bx) fn(src[(bz * in[1] + by) * in[2] + bx]);
}

Tensor downsample_mean(const Tensor& image, int64_t factor) {
  check_volume(image, "downsample_mean", "image");
  check_factor(factor, "downsample_mean");
  HG_CHECK(image.dtype() == kFloat32, "downsample_mean: image is " << dtype_name(image.dtype()) << "; expected float32");
  const Shape& in = image.shape();
  const Shape out_shape{ceil_div(in[0], factor), ceil_div(in[1], factor), ceil_div(in[2], factor)};
  Tensor out = Tensor::empty(out_shape, kFloat32);
  const float* src = image.data<float>();
  float* dst = out.data<float>();
  for (int64_t z = 0; z < out_shape[0]; ++z)
    for (int64_t y = 0; y < out_shape[1]; ++y)
      for (int64_t x = 0; x < out_shape[2]; ++x) {
        double sum = 0.0;
        int64_t count = 0;
        for_each_in_block(src, in, factor, z, y, x, [&](float v) { sum += v; ++count; });
        *dst++ = static_cast<float>(sum / static_cast<double>(count));
      }
  return out;
}

Tensor downsample_majority(const Tensor& labels, int64_t factor) {
  check_volume(labels, "downsample_majority", "labels");
  check_factor(factor, "downsample_majority");
  HG_CHECK(labels.dtype() == kInt64, "downsample_majority: labels are " << dtype_name(labels.dtype()) << "; expected int64");
  const Shape& in = labels.shape();
  const Shape out_shape{ceil_div(in[0], factor), ceil_div(in[1], factor), ceil_div(in[2], factor)};
  Tensor out = Tensor::empty(out_shape, kInt64);
  const int64_t* src = labels.data<int64_t>();
  int64_t* dst = out.data<int64_t>();
  std::vector<int64_t> block;
  for (int64_t z = 0; z < out_shape[0]; ++z)
    for (int64_t y = 0; y < out_shape[1]; ++y)
      for (int64_t x = 0; x < out_shape[2]; ++x) {
        block.clear();
        for_each_in_block(src, in, factor, z, y, x, [&](int64_t v) { block.push_back(v); });
        std::sort(block.begin(), block.end());
        // Longest run in sorted order; the first (smallest) label wins a tie.
        int64_t best = block[0], best_run = 0;
        for (size_t i = 0; i < block.size();) {
          size_t j = i;
          while (j < block.size() && block[j] == block[i]) ++j;
          if (static_cast<int64_t>(j - i) > best_run) best = block[i], best_run = static_cast<int64_t>(j - i);
          i = j;
        }
        *dst++ = best;
      }
  return out;
}

Batch make_batch(const std::vector<Sample>& samples) {
  HG_CHECK(!samples.empty(), "make_batch: no samples; expected at least one");
  for (size_t b = 0; b < samples.size(); ++b) {
    const std::string op = "make_batch: sample " + std::to_string(b);
    check_sample(samples[b], op.c_str());
    HG_CHECK(samples[b].image.shape() == samples[0].image.shape(),
             op << " has shape " << shape_str(samples[b].image.shape()) << " but sample 0 has "
                << shape_str(samples[0].image.shape()) << "; expected equal shapes");
  }
  const Shape& s = samples[0].image.shape();
  const int64_t B = static_cast<int64_t>(samples.size()), n = shape_numel(s);
  Batch batch{Tensor::empty({B, 1, s[0], s[1], s[2]}, kFloat32), Tensor::empty({B, s[0], s[1], s[2]}, kInt64)};
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(batch.image.data<float>() + b * n, samples[b].image.data<float>(), n * sizeof(float));
    std::memcpy(batch.label.data<int64_t>() + b * n, samples[b].label.data<int64_t>(), n * sizeof(int64_t));
  }
  return batch;
}

}  // namespace halfgrad::io
