// augment_cuda.cu - nnU-Net's training transforms (io/augment.h) on CUDA; launchers in augment_cuda.h.
//
// Math: the CPU's, voxel for voxel, from augment_math.h (spatial_source, read_linear, read_nearest,
// resize_source, low_res_pick / low_res_tap, gamma_map) and core/philox.h (the per-voxel numbers).
// Shapes: every volume (D, H, W) = (z, y, x), contiguous, x fastest; a batch x (B, 1, D, H, W) float32,
// y (B, D, H, W) int64.
// Parallel mapping: one thread per output voxel, grid-stride (grid_for), for every elementwise
// kernel, the spatial interpolation (8 image reads and 1 label read per voxel), each pass of the
// separable filter (one pass per axis, ping-pong buffers, 2 r + 1 reads per voxel) and the low-res
// down/up pair. Statistics (contrast, gamma): one block of kStatThreads threads per volume; thread t
// sums voxels t, t + kStatThreads, ... in order, then a fixed shared-memory tree: no atomics, the same
// bits on every run. A 48x64x48 volume is 147456 voxels: 144 per thread, a few microseconds.
// Precision: float32 storage, float64 arithmetic, one rounding per output (per pass for the filter),
// as the CPU; compiled with -fmad=false (CMakeLists.txt): each product and sum rounded as written (the
// CPU build may fuse some: float64's last place, io/augment_math.h).
// Memory-bound throughout: the whole pipeline reads and writes a patch a few times (about 10 MB for a
// batch of 8 at 48x64x48), microseconds on an H100; the launches (a few per sample) cost more.
#include <cmath>

#include "core/cuda/check.cuh"
#include "core/philox.h"
#include "io/augment_cuda.h"

namespace halfgrad::cuda {
namespace {

using io::augment_math::Extent3;

constexpr int kThreads = 256;      // elementwise kernels
constexpr int kStatThreads = 1024;  // the one block of a statistics pass

Extent3 extent_of(const Shape& s) { return Extent3{{s[0], s[1], s[2]}}; }

void check_volume(const Tensor& t, Dtype dt, const char* op, const char* what) {
  HG_CHECK(t.defined() && t.is_cuda() && t.dtype() == dt && t.dim() == 3 && t.memory_format() == MemoryFormat::Contiguous,
           op << ": " << what << " must be a contiguous " << dtype_name(dt) << " (D, H, W) CUDA tensor, got "
              << (t.defined() ? shape_str(t.shape()) + " " + dtype_name(t.dtype()) + (t.is_cuda() ? " CUDA" : " CPU")
                              : std::string("undefined")));
}

// ---- spatial ---------------------------------------------------------------------------------------

struct SpatialArgs {
  const float* img;
  const int64_t* lab;
  Extent3 in, out;
  int64_t start[3];
  io::augment_math::SpatialMap map;
  bool interpolate;              // false: voxel start + i, copied
  const float* disp[3];          // elastic displacements (patch-shaped) or null
};

__global__ void spatial_kernel(SpatialArgs a, float* __restrict__ out_img, int64_t* __restrict__ out_lab, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const int64_t x = i % a.out.d[2], y = (i / a.out.d[2]) % a.out.d[1], z = i / (a.out.d[1] * a.out.d[2]);
    if (!a.interpolate) {
      const int64_t p[3] = {z + a.start[0], y + a.start[1], x + a.start[2]};
      const bool inside = p[0] >= 0 && p[0] < a.in.d[0] && p[1] >= 0 && p[1] < a.in.d[1] && p[2] >= 0 && p[2] < a.in.d[2];
      const int64_t j = (p[0] * a.in.d[1] + p[1]) * a.in.d[2] + p[2];
      out_img[i] = inside ? a.img[j] : 0.0f;
      out_lab[i] = inside ? a.lab[j] : 0;
      continue;
    }
    const double d[3] = {a.disp[0] ? double(a.disp[0][i]) : 0.0, a.disp[1] ? double(a.disp[1][i]) : 0.0,
                         a.disp[2] ? double(a.disp[2][i]) : 0.0};
    double p[3];
    io::augment_math::spatial_source(a.map, z, y, x, d, p);
    out_img[i] = io::augment_math::read_linear(a.img, a.in, p[0], p[1], p[2]);
    out_lab[i] = io::augment_math::read_nearest(a.lab, a.in, p[0], p[1], p[2]);
  }
}

// ---- separable Gaussian filter -----------------------------------------------------------------------

__global__ void filter_pass_kernel(const float* __restrict__ in, float* __restrict__ out, Extent3 e, int axis,
                                   const double* __restrict__ w, int64_t radius, bool zero_border, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t len = e.d[axis];
  const int64_t stride = axis == 0 ? e.d[1] * e.d[2] : axis == 1 ? e.d[2] : 1;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n; v += step) {
    const int64_t coord[3] = {v / (e.d[1] * e.d[2]), (v / e.d[2]) % e.d[1], v % e.d[2]};
    const int64_t i = coord[axis];
    const int64_t first = v - i * stride;  // the line's voxel 0
    double acc = 0.0;
    for (int64_t k = -radius; k <= radius; ++k) {
      int64_t j = i + k;
      if (j < 0 || j >= len) {
        if (zero_border) continue;
        j = ((j % (2 * len)) + 2 * len) % (2 * len);  // period 2n, then mirrored into [0, n)
        if (j >= len) j = 2 * len - 1 - j;
      }
      acc += w[k + radius] * static_cast<double>(in[first + j * stride]);
    }
    out[v] = static_cast<float>(acc);
  }
}

// ---- elementwise -------------------------------------------------------------------------------------

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, double factor, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step)
    y[i] = static_cast<float>(static_cast<double>(x[i]) * factor);
}

__global__ void uniform_noise_kernel(float* __restrict__ y, uint64_t key, uint32_t stream, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const philox::Words4 w = philox::draw(key, stream, static_cast<uint64_t>(i));
    y[i] = static_cast<float>(philox::uniform_signed(w.v[0], w.v[1]));
  }
}

__global__ void gaussian_noise_kernel(const float* __restrict__ x, float* __restrict__ y, double std, uint64_t key,
                                      int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step)
    y[i] = static_cast<float>(static_cast<double>(x[i]) + std * philox::normal(philox::draw(key, 0, static_cast<uint64_t>(i))));
}

// ---- statistics: one block, fixed order ------------------------------------------------------------

// The float64 slots of a statistics buffer.
enum Slot { kSum = 0, kMin = 1, kMax = 2, kSqDev = 3, kGammaSum = 4, kGammaSqDev = 5, kSlots = 6 };
// What a pass reduces, of v = sign * x (and g = gamma_map(v) for the gamma passes).
enum class Pass { Moments, Deviation, GammaSum, GammaDeviation };

__global__ void stats_kernel(const float* __restrict__ x, int64_t n, Pass pass, double sign, double gamma,
                             double* __restrict__ st) {
  __shared__ double s_sum[kStatThreads], s_min[kStatThreads], s_max[kStatThreads];
  const int t = threadIdx.x;
  const double nd = static_cast<double>(n);
  double sum = 0.0, mn = INFINITY, mx = -INFINITY;
  for (int64_t i = t; i < n; i += kStatThreads) {
    const double v = sign * static_cast<double>(x[i]);
    if (pass == Pass::Moments) {
      sum += v;
      mn = fmin(mn, v);
      mx = fmax(mx, v);
    } else if (pass == Pass::Deviation) {
      const double d = v - st[kSum] / nd;
      sum += d * d;
    } else {
      const double g = io::augment_math::gamma_map(v, st[kMin], st[kMax] - st[kMin], gamma);
      const double d = pass == Pass::GammaSum ? g : g - st[kGammaSum] / nd;
      sum += pass == Pass::GammaSum ? d : d * d;
    }
  }
  s_sum[t] = sum;
  s_min[t] = mn;
  s_max[t] = mx;
  __syncthreads();
  for (int half = kStatThreads / 2; half > 0; half >>= 1) {
    if (t < half) {
      s_sum[t] += s_sum[t + half];
      s_min[t] = fmin(s_min[t], s_min[t + half]);
      s_max[t] = fmax(s_max[t], s_max[t + half]);
    }
    __syncthreads();
  }
  if (t != 0) return;
  if (pass == Pass::Moments) {
    st[kSum] = s_sum[0];
    st[kMin] = s_min[0];
    st[kMax] = s_max[0];
  } else {
    st[pass == Pass::Deviation ? kSqDev : pass == Pass::GammaSum ? kGammaSum : kGammaSqDev] = s_sum[0];
  }
}

__global__ void contrast_kernel(const float* __restrict__ x, float* __restrict__ y, const double* __restrict__ st,
                                double factor, bool preserve_range, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const double mean = st[kSum] / static_cast<double>(n), lo = st[kMin], hi = st[kMax];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    double r = (static_cast<double>(x[i]) - mean) * factor + mean;
    if (preserve_range) r = r < lo ? lo : hi < r ? hi : r;  // std::clamp(r, lo, hi)
    y[i] = static_cast<float>(r);
  }
}

__global__ void gamma_kernel(const float* __restrict__ x, float* __restrict__ y, const double* __restrict__ st,
                             double sign, double gamma, bool retain_stats, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const double nd = static_cast<double>(n);
  const double mean = st[kSum] / nd, sd = sqrt(st[kSqDev] / nd);
  const double g_mean = st[kGammaSum] / nd, g_sd = sqrt(st[kGammaSqDev] / nd);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    double e = io::augment_math::gamma_map(sign * static_cast<double>(x[i]), st[kMin], st[kMax] - st[kMin], gamma);
    if (retain_stats) e = (e - g_mean) / (g_sd + 1e-8) * sd + mean;
    y[i] = static_cast<float>(sign * e);
  }
}

// ---- low resolution --------------------------------------------------------------------------------

__global__ void downsample_kernel(const float* __restrict__ x, float* __restrict__ small, Extent3 in, Extent3 low,
                                  int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const int64_t w = i % low.d[2], y = (i / low.d[2]) % low.d[1], z = i / (low.d[1] * low.d[2]);
    using io::augment_math::low_res_pick;
    small[i] = x[(low_res_pick(z, in.d[0], low.d[0]) * in.d[1] + low_res_pick(y, in.d[1], low.d[1])) * in.d[2] +
                 low_res_pick(w, in.d[2], low.d[2])];
  }
}

__global__ void upsample_kernel(const float* __restrict__ small, float* __restrict__ y_out, Extent3 in, Extent3 low,
                                int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const int64_t w = i % in.d[2], y = (i / in.d[2]) % in.d[1], z = i / (in.d[1] * in.d[2]);
    using io::augment_math::low_res_tap;
    const io::augment_math::Tap a = low_res_tap(z, low.d[0], in.d[0]), b = low_res_tap(y, low.d[1], in.d[1]),
                                c = low_res_tap(w, low.d[2], in.d[2]);
    double acc = 0.0;
    for (int dz = 0; dz < 2; ++dz)
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx)
          acc += (dz ? a.t : 1 - a.t) * (dy ? b.t : 1 - b.t) * (dx ? c.t : 1 - c.t) *
                 static_cast<double>(small[((dz ? a.i1 : a.i0) * low.d[1] + (dy ? b.i1 : b.i0)) * low.d[2] + (dx ? c.i1 : c.i0)]);
    y_out[i] = static_cast<float>(acc);
  }
}

// ---- into the batch ----------------------------------------------------------------------------------

__global__ void batch_row_kernel(const float* __restrict__ img, const int64_t* __restrict__ lab, float* __restrict__ x,
                                 int64_t* __restrict__ y, Extent3 e, bool f0, bool f1, bool f2, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    int64_t w = i % e.d[2], v = (i / e.d[2]) % e.d[1], z = i / (e.d[1] * e.d[2]);
    if (f0) z = e.d[0] - 1 - z;
    if (f1) v = e.d[1] - 1 - v;
    if (f2) w = e.d[2] - 1 - w;
    const int64_t j = (z * e.d[1] + v) * e.d[2] + w;  // output voxel i reads the flipped voxel j
    x[i] = img[j];
    y[i] = lab[j];
  }
}

}  // namespace

io::Sample augment_spatial(const io::Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                           const io::augment_math::SpatialMap* map, const std::array<Tensor, 3>* disp) {
  const char* op = "augment_spatial (CUDA)";
  check_volume(volume.image, kFloat32, op, "image");
  check_volume(volume.label, kInt64, op, "label");
  HG_CHECK(size.size() == 3, op << ": size " << shape_str(size) << "; expected 3 extents");
  SpatialArgs a{};
  a.img = volume.image.data<float>();
  a.lab = volume.label.data<int64_t>();
  a.in = extent_of(volume.image.shape());
  a.out = extent_of(size);
  for (int d = 0; d < 3; ++d) {
    a.start[d] = start[d];
    a.disp[d] = nullptr;
  }
  a.interpolate = map != nullptr;
  if (map) a.map = *map;
  if (disp)
    for (int d = 0; d < 3; ++d) {
      check_volume((*disp)[d], kFloat32, op, "displacement");
      HG_CHECK((*disp)[d].shape() == size, op << ": displacement " << shape_str((*disp)[d].shape()) << "; expected the patch's "
                                              << shape_str(size));
      a.disp[d] = (*disp)[d].data<float>();
    }
  io::Sample out{Tensor::empty(size, kFloat32, Device::CUDA), Tensor::empty(size, kInt64, Device::CUDA)};
  const int64_t n = shape_numel(size);
  spatial_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(a, out.image.data<float>(), out.label.data<int64_t>(), n);
  HG_CUDA_LAUNCH_CHECK(op);
  return out;
}

Tensor augment_gaussian_filter(const Tensor& vol, const std::vector<double>& weights, bool zero_border) {
  const char* op = "gaussian_filter (CUDA)";
  check_volume(vol, kFloat32, op, "volume");
  HG_CHECK(weights.size() % 2 == 1, op << ": " << weights.size() << " weights; expected an odd count");
  const Tensor w = Tensor::from_vector(weights, {static_cast<int64_t>(weights.size())}, kFloat64).copy_to(Device::CUDA);
  const int64_t n = vol.numel(), radius = static_cast<int64_t>(weights.size() / 2);
  Tensor cur = vol;
  for (int axis = 0; axis < 3; ++axis) {
    Tensor next = Tensor::empty(vol.shape(), kFloat32, Device::CUDA);
    filter_pass_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
        cur.data<float>(), next.data<float>(), extent_of(vol.shape()), axis, w.data<double>(), radius, zero_border, n);
    HG_CUDA_LAUNCH_CHECK(op);
    cur = next;
  }
  return cur;
}

Tensor augment_scale(const Tensor& image, double factor) {
  check_volume(image, kFloat32, "augment_scale (CUDA)", "image");
  Tensor out = Tensor::empty(image.shape(), kFloat32, Device::CUDA);
  const int64_t n = image.numel();
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(image.data<float>(), out.data<float>(), factor, n);
  HG_CUDA_LAUNCH_CHECK("augment_scale (CUDA)");
  return out;
}

Tensor augment_uniform_noise(const Shape& size, uint64_t key, uint32_t stream_id) {
  Tensor out = Tensor::empty(size, kFloat32, Device::CUDA);
  const int64_t n = out.numel();
  uniform_noise_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(out.data<float>(), key, stream_id, n);
  HG_CUDA_LAUNCH_CHECK("philox_uniform_noise (CUDA)");
  return out;
}

Tensor augment_gaussian_noise(const Tensor& image, double std, uint64_t key) {
  check_volume(image, kFloat32, "gaussian_noise_philox (CUDA)", "image");
  Tensor out = Tensor::empty(image.shape(), kFloat32, Device::CUDA);
  const int64_t n = image.numel();
  gaussian_noise_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(image.data<float>(), out.data<float>(), std, key, n);
  HG_CUDA_LAUNCH_CHECK("gaussian_noise_philox (CUDA)");
  return out;
}

Tensor augment_contrast(const Tensor& image, double factor, bool preserve_range) {
  const char* op = "adjust_contrast (CUDA)";
  check_volume(image, kFloat32, op, "image");
  Tensor st = Tensor::empty({kSlots}, kFloat64, Device::CUDA);
  Tensor out = Tensor::empty(image.shape(), kFloat32, Device::CUDA);
  const int64_t n = image.numel();
  stats_kernel<<<1, kStatThreads, 0, stream()>>>(image.data<float>(), n, Pass::Moments, 1.0, 0.0, st.data<double>());
  HG_CUDA_LAUNCH_CHECK(op);
  contrast_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(image.data<float>(), out.data<float>(),
                                                                     st.data<double>(), factor, preserve_range, n);
  HG_CUDA_LAUNCH_CHECK(op);
  return out;
}

Tensor augment_gamma(const Tensor& image, double gamma, bool invert, bool retain_stats) {
  const char* op = "adjust_gamma (CUDA)";
  check_volume(image, kFloat32, op, "image");
  Tensor st = Tensor::zeros({kSlots}, kFloat64, Device::CUDA);
  Tensor out = Tensor::empty(image.shape(), kFloat32, Device::CUDA);
  const int64_t n = image.numel();
  const double sign = invert ? -1.0 : 1.0;
  const float* x = image.data<float>();
  // Mean, min, max; then the squared deviations; with retain_stats the same two of the mapped values.
  const Pass passes[4] = {Pass::Moments, Pass::Deviation, Pass::GammaSum, Pass::GammaDeviation};
  for (int p = 0; p < (retain_stats ? 4 : 1); ++p) {
    stats_kernel<<<1, kStatThreads, 0, stream()>>>(x, n, passes[p], sign, gamma, st.data<double>());
    HG_CUDA_LAUNCH_CHECK(op);
  }
  gamma_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, out.data<float>(), st.data<double>(), sign, gamma,
                                                                  retain_stats, n);
  HG_CUDA_LAUNCH_CHECK(op);
  return out;
}

Tensor augment_low_resolution(const Tensor& image, const Shape& low) {
  const char* op = "simulate_low_resolution (CUDA)";
  check_volume(image, kFloat32, op, "image");
  Tensor small = Tensor::empty(low, kFloat32, Device::CUDA);
  Tensor out = Tensor::empty(image.shape(), kFloat32, Device::CUDA);
  const Extent3 in = extent_of(image.shape()), lo = extent_of(low);
  downsample_kernel<<<grid_for(small.numel(), kThreads), kThreads, 0, stream()>>>(image.data<float>(), small.data<float>(),
                                                                                  in, lo, small.numel());
  HG_CUDA_LAUNCH_CHECK(op);
  upsample_kernel<<<grid_for(out.numel(), kThreads), kThreads, 0, stream()>>>(small.data<float>(), out.data<float>(), in,
                                                                              lo, out.numel());
  HG_CUDA_LAUNCH_CHECK(op);
  return out;
}

void augment_copy_into_batch(const io::Sample& s, const std::array<bool, 3>& flip, Tensor& x, Tensor& y, int64_t row) {
  const char* op = "copy_into_batch (CUDA)";
  check_volume(s.image, kFloat32, op, "image");
  check_volume(s.label, kInt64, op, "label");
  const int64_t n = s.image.numel();
  batch_row_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(
      s.image.data<float>(), s.label.data<int64_t>(), x.data<float>() + row * n, y.data<int64_t>() + row * n,
      extent_of(s.image.shape()), flip[0], flip[1], flip[2], n);
  HG_CUDA_LAUNCH_CHECK(op);
}

}  // namespace halfgrad::cuda
