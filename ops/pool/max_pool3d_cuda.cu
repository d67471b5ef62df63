// max_pool3d_cuda.cu - 3-D max pooling on the GPU (the op and its autograd: max_pool3d.cpp).
//
// Math: y[n, c, z, y, x] = max over the kd x kh x kw window at (z*sd - pd, y*sh - ph, x*sw - pw) of
// x[n, c, ...], clipped to the input (padding is -inf); argmax = the plane index d*H*W + h*W + w of
// the first maximum in (i, j, l) window order (a NaN wins: the last
// one, as PyTorch's `val > max || isnan(val)`); dx[n, c, d, h, w] = sum of dy over the outputs whose argmax is (d, h, w) (overlapping windows,
// stride < kernel, can give several; positions no window covers get 0).
// Shapes and layouts: x, dx (N, C, D, H, W); y, dy, argmax (N, C, Do, Ho, Wo); all in x's memory
// format, argmax in y's, int32.
// Parallel mapping: forward, one thread per output (NCDHW) or per V consecutive channels of one output
// (NDHWC, V = 8 halfs or bfloat16s / 4 floats = one 16-byte load per window element when C is a multiple of V,
// else V = 1): the threads of a warp read neighbouring channels (NDHWC) or neighbouring windows
// (NCDHW). Backward is a gather, not a scatter: one thread per input element (or V channels of one)
// visits the at most ceil(kd/sd) ceil(kh/sh) ceil(kw/sw) outputs whose window holds it and sums the dy whose argmax is its
// own index, in output order. No atomics, no zero-fill of dx, deterministic, and for the U-Net's
// k = s = 2 exactly one candidate output per input.
// Indices: grid-stride loops over 32-bit element counts (the launcher checks x has < 2^31 elements)
// with multiply-shift division (DivMod32); memory offsets are 64-bit.
// Precision: FP16 and BF16 values are compared as float (exact) and the maximum stored back (exact); the
// backward sums in FP32 and rounds once, in the CPU op's order (bitwise the CPU result).
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/pool/max_pool3d_cuda.h"

#include <limits>
#include <type_traits>

namespace halfgrad::cuda {
namespace {

constexpr int kThreads = 256;

// n / d and n % d for 0 <= n < 2^31 and 1 <= d < 2^31 by a multiply-high and a shift (the divisor's
// magic number as in Granlund & Montgomery, and PyTorch's IntDivider): m = 2^32 (2^s - d) / d + 1,
// s = ceil(log2 d), n / d = (umulhi(n, m) + n) >> s. The sum stays below 2^32 because n < 2^31.
struct DivMod32 {
  uint32_t d = 1, m = 1, s = 0;
  DivMod32() = default;
  explicit DivMod32(int64_t div) : d(static_cast<uint32_t>(div)) {
    while ((uint64_t{1} << s) < d) ++s;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

struct PoolGeo {
  int D, H, W, Do, Ho, Wo;
  int kd, kh, kw, sd, sh, sw, pd, ph, pw;     // per axis kernel, stride, padding
  int CV;                                       // channel vectors (C / V), NDHWC; 1 for NCDHW
  int64_t C;                                    // channels (NDHWC offsets)
  DivMod32 by_cv, by_wo, by_ho, by_do;          // forward: output index -> (.., z, y, x, cv)
  DivMod32 by_w, by_h, by_d;                    // backward: input index -> (.., d, h, w, cv)
  __device__ int in_vol() const { return D * H * W; }
  __device__ int out_vol() const { return Do * Ho * Wo; }
};

// The window's running maximum: v replaces it if larger, or if v is a NaN (so the last NaN wins).
__device__ __forceinline__ void take(float v, int i, float& best, int& best_i) {
  if (v > best || v != v) {
    best = v;
    best_i = i;
  }
}

// Output `o` (its index in y's layout) -> (q = n or n*C + c, z, y, x), peeling cv first for NDHWC.
struct OutPos {
  uint32_t q, z, y, x, cv;
};
__device__ __forceinline__ OutPos out_pos(const PoolGeo& g, uint32_t o, bool channels_last) {
  OutPos p;
  uint32_t t = o, u;
  p.cv = 0;
  if (channels_last) {
    u = g.by_cv.div(t);
    p.cv = t - u * g.CV;
    t = u;
  }
  u = g.by_wo.div(t);
  p.x = t - u * g.Wo;
  t = u;
  u = g.by_ho.div(t);
  p.y = t - u * g.Ho;
  t = u;
  u = g.by_do.div(t);
  p.z = t - u * g.Do;
  p.q = u;
  return p;
}

// kK2 = true fixes the U-Net's unpadded 2x2x2 stride-2 window at compile time (the window loops
// unroll); false reads kernel, stride and padding from g and clips each window to the input.
// x, y, argmax in one layout: NCDHW (V = 1, q = plane n*C + c) or NDHWC (q = n, V channels).
template <typename T, int V, bool kK2, bool kChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax, PoolGeo g,
                        uint32_t units) {
  const int H = g.H, W = g.W;
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < units; o += gridDim.x * blockDim.x) {
    const OutPos p = out_pos(g, o, kChannelsLast);
    // x offset of plane index si: NCDHW q*in_vol + si; NDHWC (q*in_vol + si)*C + cv*V.
    const T* xq = kChannelsLast ? x + int64_t(p.q) * g.in_vol() * g.C + int64_t(p.cv) * V : x + int64_t(p.q) * g.in_vol();
    const int64_t step = kChannelsLast ? g.C : 1;
    float best[V];
    int best_i[V];
    auto visit = [&](int si) {
      const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xq + si * step);
#pragma unroll
      for (int v = 0; v < V; ++v) take(to_float(xv.v[v]), si, best[v], best_i[v]);
    };
    // Starting from -inf visits the window like the CPU op, which starts from its first element
    // (inside the input): that element wins either way unless a later one is larger or a NaN.
    auto start = [&](int s0) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        best[v] = -INFINITY;
        best_i[v] = s0;
      }
    };
    if constexpr (kK2) {  // constant trip counts: the 8 loads unroll
      const int s0 = (int(p.z) * 2 * H + int(p.y) * 2) * W + int(p.x) * 2;
      start(s0);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int l = 0; l < 2; ++l) visit(s0 + (i * H + j) * W + l);
    } else {  // the window clipped to the input: [z0, z1) x [y0, y1) x [x0, x1)
      int z0 = int(p.z) * g.sd - g.pd, y0 = int(p.y) * g.sh - g.ph, x0 = int(p.x) * g.sw - g.pw;
      const int z1 = min(z0 + g.kd, g.D), y1 = min(y0 + g.kh, H), x1 = min(x0 + g.kw, W);
      z0 = max(z0, 0), y0 = max(y0, 0), x0 = max(x0, 0);
      start((z0 * H + y0) * W + x0);
      for (int i = z0; i < z1; ++i)
        for (int j = y0; j < y1; ++j)
          for (int l = x0; l < x1; ++l) visit((i * H + j) * W + l);
    }
    Vec<T, V> yv;
    Vec<int32_t, V> iv;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      yv.v[v] = from_float<T>(best[v]);
      iv.v[v] = best_i[v];
    }
    // y and argmax are laid out as (q, z, y, x, cv): output unit o starts at element o*V.
    *reinterpret_cast<Vec<T, V>*>(y + int64_t(o) * V) = yv;
    *reinterpret_cast<Vec<int32_t, V>*>(argmax + int64_t(o) * V) = iv;
  }
}

// One thread per input unit (an element, or V channels of one position in NDHWC): the sum of dy over
// the outputs (z, y, x) with z*sd - pd <= d < z*sd - pd + kd (likewise in h, w) whose argmax is this
// position. kK2 as in the forward (k = s = 2, no padding, as compile-time constants).
template <typename T, int V, bool kK2, bool kChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool_backward_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx, PoolGeo g,
                         uint32_t units) {
  const int kd = kK2 ? 2 : g.kd, kh = kK2 ? 2 : g.kh, kw = kK2 ? 2 : g.kw;
  const int sd = kK2 ? 2 : g.sd, sh = kK2 ? 2 : g.sh, sw = kK2 ? 2 : g.sw;
  const int pd = kK2 ? 0 : g.pd, ph = kK2 ? 0 : g.ph, pw = kK2 ? 0 : g.pw;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < units; i += gridDim.x * blockDim.x) {
    uint32_t t = i, u, cv = 0;
    if (kChannelsLast) {
      u = g.by_cv.div(t);
      cv = t - u * g.CV;
      t = u;
    }
    u = g.by_w.div(t);
    const int w = int(t - u * g.W);
    t = u;
    u = g.by_h.div(t);
    const int h = int(t - u * g.H);
    t = u;
    u = g.by_d.div(t);
    const int d = int(t - u * g.D);
    const uint32_t q = u;
    const int me = (d * g.H + h) * g.W + w;
    // Outputs whose window covers d (padded coordinate dp = d + pd): ceil((dp - kd + 1) / sd) <= z <=
    // dp / sd, within [0, Do).
    const int dp = d + pd, hp = h + ph, wp = w + pw;
    const int z0 = dp >= kd ? (dp - kd) / sd + 1 : 0, z1 = min(dp / sd, g.Do - 1);
    const int y0 = hp >= kh ? (hp - kh) / sh + 1 : 0, y1 = min(hp / sh, g.Ho - 1);
    const int x0 = wp >= kw ? (wp - kw) / sw + 1 : 0, x1 = min(wp / sw, g.Wo - 1);
    const int64_t base = kChannelsLast ? int64_t(q) * g.out_vol() * g.C + int64_t(cv) * V : int64_t(q) * g.out_vol();
    const int64_t step = kChannelsLast ? g.C : 1;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.f;
    for (int z = z0; z <= z1; ++z)
      for (int yy = y0; yy <= y1; ++yy)
        for (int xx = x0; xx <= x1; ++xx) {
          const int64_t off = base + ((z * g.Ho + yy) * g.Wo + xx) * step;
          const Vec<int32_t, V> iv = *reinterpret_cast<const Vec<int32_t, V>*>(argmax + off);
          const Vec<T, V> gv = *reinterpret_cast<const Vec<T, V>*>(dy + off);
#pragma unroll
          for (int v = 0; v < V; ++v)
            if (iv.v[v] == me) acc[v] += to_float(gv.v[v]);
        }
    Vec<T, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = from_float<T>(acc[v]);
    *reinterpret_cast<Vec<T, V>*>(dx + int64_t(i) * V) = out;
  }
}

int64_t pooled_extent(int64_t in, int64_t k, int64_t st, int64_t p) { return (in + 2 * p - k) / st + 1; }

PoolGeo make_geo(const Shape& xs, const Axes3& k, const Axes3& st, const Axes3& p, int V) {
  PoolGeo g{};
  g.C = xs[1];
  g.D = static_cast<int>(xs[2]);
  g.H = static_cast<int>(xs[3]);
  g.W = static_cast<int>(xs[4]);
  g.kd = static_cast<int>(k[0]), g.kh = static_cast<int>(k[1]), g.kw = static_cast<int>(k[2]);
  g.sd = static_cast<int>(st[0]), g.sh = static_cast<int>(st[1]), g.sw = static_cast<int>(st[2]);
  g.pd = static_cast<int>(p[0]), g.ph = static_cast<int>(p[1]), g.pw = static_cast<int>(p[2]);
  g.Do = static_cast<int>(pooled_extent(xs[2], k[0], st[0], p[0]));
  g.Ho = static_cast<int>(pooled_extent(xs[3], k[1], st[1], p[1]));
  g.Wo = static_cast<int>(pooled_extent(xs[4], k[2], st[2], p[2]));
  g.CV = static_cast<int>(xs[1] / V);
  g.by_cv = DivMod32(g.CV);
  g.by_wo = DivMod32(g.Wo);
  g.by_ho = DivMod32(g.Ho);
  g.by_do = DivMod32(g.Do);
  g.by_w = DivMod32(g.W);
  g.by_h = DivMod32(g.H);
  g.by_d = DivMod32(g.D);
  return g;
}

bool is_k2s2(const Axes3& k, const Axes3& st, const Axes3& p) {
  for (int a = 0; a < 3; ++a)
    if (k[a] != 2 || st[a] != 2 || p[a] != 0) return false;
  return true;
}

// Calls f(T{}, V, channels_last, k2s2) with compile-time constants for x's dtype and layout.
template <typename F>
void dispatch(Dtype dt, MemoryFormat format, int64_t C, bool k2s2, F&& f) {
  using std::integral_constant;
  auto by_k = [&](auto tag, auto vtag, auto cltag) {
    if (k2s2) f(tag, vtag, cltag, std::true_type{});
    else f(tag, vtag, cltag, std::false_type{});
  };
  const bool cl = format == MemoryFormat::ChannelsLast3d;
  auto by_16bit = [&](auto tag) {
    if (!cl) by_k(tag, integral_constant<int, 1>{}, std::false_type{});
    else if (C % 8 == 0) by_k(tag, integral_constant<int, 8>{}, std::true_type{});
    else by_k(tag, integral_constant<int, 1>{}, std::true_type{});
  };
  if (dt == kFloat16) {
    by_16bit(__half{});
  } else if (dt == kBFloat16) {
    by_16bit(__nv_bfloat16{});
  } else {
    if (!cl) by_k(float{}, integral_constant<int, 1>{}, std::false_type{});
    else if (C % 4 == 0) by_k(float{}, integral_constant<int, 4>{}, std::true_type{});
    else by_k(float{}, integral_constant<int, 1>{}, std::true_type{});
  }
}

template <typename T>
T* dptr(const Tensor& t) { return dev<T>(t); }

void check_sizes(const Shape& xs, const Axes3& k, const Axes3& st, const Axes3& p) {
  bool ok = xs.size() == 5;
  for (int a = 0; ok && a < 3; ++a)
    ok = k[a] >= 1 && st[a] >= 1 && p[a] >= 0 && p[a] <= k[a] / 2 && k[a] <= xs[2 + a] + 2 * p[a];
  HG_CHECK(ok, "max_pool3d: bad geometry: input " << shape_str(xs) << ", kernel (" << k[0] << ", " << k[1] << ", "
                                                   << k[2] << "), stride (" << st[0] << ", " << st[1] << ", " << st[2]
                                                   << "), padding (" << p[0] << ", " << p[1] << ", " << p[2] << ")");
  HG_CHECK(shape_numel(xs) < (int64_t{1} << 31),
           "max_pool3d: the CUDA kernels index with 32 bits; input " << shape_str(xs) << " has " << shape_numel(xs)
                                                                     << " elements (>= 2^31): split the batch");
}

}  // namespace

MaxPoolCudaForward max_pool3d_forward(const Tensor& x, const Axes3& kernel, const Axes3& stride, const Axes3& padding) {
  HG_CHECK(x.is_cuda() && (x.dtype() == kFloat32 || is_reduced_float(x.dtype())),
           "max_pool3d: CUDA input must be float32, float16 or bfloat16 on cuda, got " << dtype_name(x.dtype()) << " "
                                                                             << shape_str(x.shape()));
  const Shape& xs = x.shape();
  check_sizes(xs, kernel, stride, padding);
  MaxPoolCudaForward r;
  const Shape ys = {xs[0], xs[1], pooled_extent(xs[2], kernel[0], stride[0], padding[0]),
                    pooled_extent(xs[3], kernel[1], stride[1], padding[1]),
                    pooled_extent(xs[4], kernel[2], stride[2], padding[2])};
  r.y = Tensor::empty(ys, x.dtype(), Device::CUDA, x.memory_format());
  const size_t nbytes = static_cast<size_t>(r.y.numel()) * sizeof(int32_t);
  r.argmax = std::shared_ptr<int32_t>(static_cast<int32_t*>(allocate(nbytes, "max_pool3d")),
                                      [nbytes](int32_t* p) { release(p, nbytes); });
  if (r.y.numel() == 0) return r;
  dispatch(x.dtype(), x.memory_format(), xs[1], is_k2s2(kernel, stride, padding), [&](auto tag, auto vtag, auto cltag, auto ktag) {
    using T = decltype(tag);
    constexpr int V = decltype(vtag)::value;
    constexpr bool CL = decltype(cltag)::value, K2 = decltype(ktag)::value;
    const PoolGeo g = make_geo(xs, kernel, stride, padding, V);
    const int64_t units = r.y.numel() / V;
    pool_forward_kernel<T, V, K2, CL><<<grid_for(units, kThreads), kThreads, 0, stream()>>>(
        dptr<T>(x), dptr<T>(r.y), r.argmax.get(), g, static_cast<uint32_t>(units));
    HG_CUDA_LAUNCH_CHECK("max_pool3d");
  });
  return r;
}

Tensor max_pool3d_backward(const Tensor& dy_in, const int32_t* argmax, const Shape& x_shape, Dtype dtype,
                           MemoryFormat format, const Axes3& kernel, const Axes3& stride, const Axes3& padding) {
  check_sizes(x_shape, kernel, stride, padding);
  HG_CHECK(dy_in.defined() && dy_in.dim() == 5 && dy_in.shape()[0] == x_shape[0] && dy_in.shape()[1] == x_shape[1],
           "max_pool3d: backward got a gradient of shape "
               << (dy_in.defined() ? shape_str(dy_in.shape()) : "(undefined)") << " for input " << shape_str(x_shape));
  Tensor dy = dy_in.copy_to(Device::CUDA);
  if (dy.dtype() != dtype) dy = dy.cast_copy(dtype);
  dy = dy.format_copy(format);
  Tensor dx = Tensor::empty(x_shape, dtype, Device::CUDA, format);
  if (dx.numel() == 0) return dx;
  dispatch(dtype, format, x_shape[1], is_k2s2(kernel, stride, padding), [&](auto tag, auto vtag, auto cltag, auto ktag) {
    using T = decltype(tag);
    constexpr int V = decltype(vtag)::value;
    constexpr bool CL = decltype(cltag)::value, K2 = decltype(ktag)::value;
    const PoolGeo g = make_geo(x_shape, kernel, stride, padding, V);
    HG_CHECK(dy.shape()[2] == g.Do && dy.shape()[3] == g.Ho && dy.shape()[4] == g.Wo,
             "max_pool3d: backward got a gradient of shape " << shape_str(dy.shape()) << " for input "
                                                             << shape_str(x_shape));
    const int64_t units = dx.numel() / V;
    pool_backward_kernel<T, V, K2, CL><<<grid_for(units, kThreads), kThreads, 0, stream()>>>(
        dptr<T>(dy), argmax, dptr<T>(dx), g, static_cast<uint32_t>(units));
    HG_CUDA_LAUNCH_CHECK("max_pool3d");
  });
  return dx;
}

}  // namespace halfgrad::cuda
