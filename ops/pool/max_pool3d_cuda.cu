// max_pool3d_cuda.cu - 3-D max pooling on the GPU (the op and its autograd: max_pool3d.cpp).
//
// Math: y[n, c, z, y, x] = max over the k^3 window at (z*s, y*s, x*s) of x[n, c, ...]; argmax = the
// plane index d*H*W + h*W + w of the first maximum in (i, j, l) window order (a NaN wins: the last
// one, as PyTorch's `val > max || isnan(val)`); dx[n, c, d, h, w] = sum of dy over the outputs whose argmax is (d, h, w) (overlapping windows,
// stride < kernel, can give several; positions no window covers get 0).
// Shapes and layouts: x, dx (N, C, D, H, W); y, dy, argmax (N, C, Do, Ho, Wo); all in x's memory
// format, argmax in y's, int32.
// Parallel mapping: forward, one thread per output (NCDHW) or per V consecutive channels of one output
// (NDHWC, V = 8 halfs / 4 floats = one 16-byte load per window element when C is a multiple of V,
// else V = 1): the threads of a warp read neighbouring channels (NDHWC) or neighbouring windows
// (NCDHW). Backward is a gather, not a scatter: one thread per input element (or V channels of one)
// visits the at most ceil(k/s)^3 outputs whose window holds it and sums the dy whose argmax is its
// own index, in output order. No atomics, no zero-fill of dx, deterministic, and for the U-Net's
// k = s = 2 exactly one candidate output per input.
// Indices: grid-stride loops over 32-bit element counts (the launcher checks x has < 2^31 elements)
// with multiply-shift division (DivMod32); memory offsets are 64-bit.
// Precision: FP16 values are compared as float (exact) and the maximum stored back (exact); the
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
  int k, s;
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

// kK, kS > 0 fix kernel and stride at compile time (the U-Net's 2, 2); 0 reads them from g.
// x, y, argmax in one layout: NCDHW (V = 1, q = plane n*C + c) or NDHWC (q = n, V channels).
template <typename T, int V, int kK, int kS, bool kChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax, PoolGeo g,
                        uint32_t units) {
  const int k = kK > 0 ? kK : g.k, s = kS > 0 ? kS : g.s;
  const int H = g.H, W = g.W;
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < units; o += gridDim.x * blockDim.x) {
    const OutPos p = out_pos(g, o, kChannelsLast);
    // x offset of plane index si: NCDHW q*in_vol + si; NDHWC (q*in_vol + si)*C + cv*V.
    const T* xq = kChannelsLast ? x + int64_t(p.q) * g.in_vol() * g.C + int64_t(p.cv) * V : x + int64_t(p.q) * g.in_vol();
    const int64_t step = kChannelsLast ? g.C : 1;
    const int s0 = (int(p.z) * s * H + int(p.y) * s) * W + int(p.x) * s;
    // Starting from -inf visits the window like the CPU op, which starts from its first element:
    // that element wins either way unless a later one is larger or a later one is a NaN.
    float best[V];
    int best_i[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      best[v] = -INFINITY;
      best_i[v] = s0;
    }
    for (int i = 0; i < k; ++i)  // with kK > 0, k is a constant and the window loops unroll
      for (int j = 0; j < k; ++j)
        for (int l = 0; l < k; ++l) {
          const int si = s0 + (i * H + j) * W + l;
          const Vec<T, V> xv = *reinterpret_cast<const Vec<T, V>*>(xq + si * step);
#pragma unroll
          for (int v = 0; v < V; ++v) take(to_float(xv.v[v]), si, best[v], best_i[v]);
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
// the outputs (z, y, x) with z*s <= d < z*s + k (and likewise in h, w) whose argmax is this position.
template <typename T, int V, int kK, int kS, bool kChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool_backward_kernel(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx, PoolGeo g,
                         uint32_t units) {
  const int k = kK > 0 ? kK : g.k, s = kS > 0 ? kS : g.s;
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
    // Outputs whose window covers d: ceil((d - k + 1) / s) <= z <= d / s, within [0, Do).
    const int z0 = d >= k ? (d - k) / s + 1 : 0, z1 = min(d / s, g.Do - 1);
    const int y0 = h >= k ? (h - k) / s + 1 : 0, y1 = min(h / s, g.Ho - 1);
    const int x0 = w >= k ? (w - k) / s + 1 : 0, x1 = min(w / s, g.Wo - 1);
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

PoolGeo make_geo(const Shape& xs, int64_t kernel, int64_t stride, int V) {
  PoolGeo g{};
  g.C = xs[1];
  g.D = static_cast<int>(xs[2]);
  g.H = static_cast<int>(xs[3]);
  g.W = static_cast<int>(xs[4]);
  g.k = static_cast<int>(kernel);
  g.s = static_cast<int>(stride);
  g.Do = static_cast<int>((xs[2] - kernel) / stride + 1);
  g.Ho = static_cast<int>((xs[3] - kernel) / stride + 1);
  g.Wo = static_cast<int>((xs[4] - kernel) / stride + 1);
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

// Calls f(T{}, V, channels_last, k2s2) with compile-time constants for x's dtype and layout.
template <typename F>
void dispatch(Dtype dt, MemoryFormat format, int64_t C, bool k2s2, F&& f) {
  using std::integral_constant;
  auto by_k = [&](auto tag, auto vtag, auto cltag) {
    if (k2s2) f(tag, vtag, cltag, integral_constant<int, 2>{});
    else f(tag, vtag, cltag, integral_constant<int, 0>{});
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

void check_sizes(const Shape& xs, int64_t kernel, int64_t stride) {
  HG_CHECK(xs.size() == 5 && kernel >= 1 && stride >= 1 && kernel <= xs[2] && kernel <= xs[3] && kernel <= xs[4],
           "max_pool3d: bad geometry: input " << shape_str(xs) << ", kernel " << kernel << ", stride " << stride);
  HG_CHECK(shape_numel(xs) < (int64_t{1} << 31),
           "max_pool3d: the CUDA kernels index with 32 bits; input " << shape_str(xs) << " has " << shape_numel(xs)
                                                                     << " elements (>= 2^31): split the batch");
}

}  // namespace

MaxPoolCudaForward max_pool3d_forward(const Tensor& x, int64_t kernel, int64_t stride) {
  HG_CHECK(x.is_cuda() && (x.dtype() == kFloat32 || is_reduced_float(x.dtype())),
           "max_pool3d: CUDA input must be float32, float16 or bfloat16 on cuda, got " << dtype_name(x.dtype()) << " "
                                                                             << shape_str(x.shape()));
  const Shape& xs = x.shape();
  check_sizes(xs, kernel, stride);
  MaxPoolCudaForward r;
  const Shape ys = {xs[0], xs[1], (xs[2] - kernel) / stride + 1, (xs[3] - kernel) / stride + 1,
                    (xs[4] - kernel) / stride + 1};
  r.y = Tensor::empty(ys, x.dtype(), Device::CUDA, x.memory_format());
  const size_t nbytes = static_cast<size_t>(r.y.numel()) * sizeof(int32_t);
  r.argmax = std::shared_ptr<int32_t>(static_cast<int32_t*>(allocate(nbytes, "max_pool3d")),
                                      [nbytes](int32_t* p) { release(p, nbytes); });
  if (r.y.numel() == 0) return r;
  dispatch(x.dtype(), x.memory_format(), xs[1], kernel == 2 && stride == 2, [&](auto tag, auto vtag, auto cltag, auto ktag) {
    using T = decltype(tag);
    constexpr int V = decltype(vtag)::value, K = decltype(ktag)::value;
    constexpr bool CL = decltype(cltag)::value;
    const PoolGeo g = make_geo(xs, kernel, stride, V);
    const int64_t units = r.y.numel() / V;
    pool_forward_kernel<T, V, K, K, CL><<<grid_for(units, kThreads), kThreads, 0, stream()>>>(
        dptr<T>(x), dptr<T>(r.y), r.argmax.get(), g, static_cast<uint32_t>(units));
    HG_CUDA_LAUNCH_CHECK("max_pool3d");
  });
  return r;
}

Tensor max_pool3d_backward(const Tensor& dy_in, const int32_t* argmax, const Shape& x_shape, Dtype dtype,
                           MemoryFormat format, int64_t kernel, int64_t stride) {
  check_sizes(x_shape, kernel, stride);
  HG_CHECK(dy_in.defined() && dy_in.dim() == 5 && dy_in.shape()[0] == x_shape[0] && dy_in.shape()[1] == x_shape[1],
           "max_pool3d: backward got a gradient of shape "
               << (dy_in.defined() ? shape_str(dy_in.shape()) : "(undefined)") << " for input " << shape_str(x_shape));
  Tensor dy = dy_in.copy_to(Device::CUDA);
  if (dy.dtype() != dtype) dy = dy.cast_copy(dtype);
  dy = dy.format_copy(format);
  Tensor dx = Tensor::empty(x_shape, dtype, Device::CUDA, format);
  if (dx.numel() == 0) return dx;
  dispatch(dtype, format, x_shape[1], kernel == 2 && stride == 2, [&](auto tag, auto vtag, auto cltag, auto ktag) {
    using T = decltype(tag);
    constexpr int V = decltype(vtag)::value, K = decltype(ktag)::value;
    constexpr bool CL = decltype(cltag)::value;
    const PoolGeo g = make_geo(x_shape, kernel, stride, V);
    HG_CHECK(dy.shape()[2] == g.Do && dy.shape()[3] == g.Ho && dy.shape()[4] == g.Wo,
             "max_pool3d: backward got a gradient of shape " << shape_str(dy.shape()) << " for input "
                                                             << shape_str(x_shape));
    const int64_t units = dx.numel() / V;
    pool_backward_kernel<T, V, K, K, CL><<<grid_for(units, kThreads), kThreads, 0, stream()>>>(
        dptr<T>(dy), argmax, dptr<T>(dx), g, static_cast<uint32_t>(units));
    HG_CUDA_LAUNCH_CHECK("max_pool3d");
  });
  return dx;
}

}  // namespace halfgrad::cuda
