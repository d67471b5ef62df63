// elementwise_cuda.cu - the CUDA kernels of ops/elementwise (launchers declared in elementwise_cuda.h).
//
// Math: binary  y = a + b | a - b | a * b | a / b   with NumPy broadcasting (the backward of each is
//               composed in elementwise.cpp from these same launchers and ops::sum_to_shape);
//       unary   y = s*x + t | exp x | log x | x^p | p*x^(p-1)   (the last is pow's derivative);
//       broadcast_scaled  y = scale * g  broadcast to a larger shape (the reductions' backward).
// Shapes and layout: shapes are logical (N, C, D, H, W ... any rank up to kMaxDims); each buffer is
// NCDHW or NDHWC (channels-last, 5-D only) and is read in place with its own element strides
// (physical_strides), so no operand is permuted before a broadcast.
// Parallel mapping: one thread per output element in grid-stride loops, output elements visited in
// the output's physical order (writes coalesced):
//   same shape and format     flat loop over the buffers, 16-byte packs (pointwise_cuda.cuh);
//   one-element or per-channel operand  flat loop; channel c = (i / inner) % C of the big operand's
//                             physical index i (NCDHW: inner = D*H*W; NDHWC: inner = 1; scalar: C = 1);
//   general                   the output index is split into coordinates over at most kMaxDims
//                             (merged) dims, each operand's offset is the dot product with its
//                             strides (0 along broadcast dims).
// Precision: FP16 / BF16 loads are widened to FP32, the math is FP32, the result is rounded once
// (__float2half_rn / __float2bfloat16_rn). exp/log/pow are CUDA's single-precision expf/logf/powf (within 2 ulp of the
// CPU's std:: functions, far below one FP16 rounding).
#include <algorithm>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/elementwise/pointwise_cuda.cuh"

namespace halfgrad::cuda {

std::vector<int64_t> physical_strides(const Tensor& t) {
  const Shape& s = t.shape();
  const int64_t nd = static_cast<int64_t>(s.size());
  std::vector<int64_t> st(nd, 1);
  if (t.is_channels_last()) {  // (N, C, D, H, W) stored (N, D, H, W, C)
    const int64_t C = s[1], D = s[2], H = s[3], W = s[4];
    return {D * H * W * C, 1, H * W * C, W * C, C};
  }
  for (int64_t i = nd - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

std::vector<int> physical_order(int64_t ndim, MemoryFormat format) {
  if (format == MemoryFormat::ChannelsLast3d) return {0, 2, 3, 4, 1};
  std::vector<int> order(ndim);
  for (int64_t i = 0; i < ndim; ++i) order[i] = static_cast<int>(i);
  return order;
}

namespace {

// Tensors of rank <= 5 broadcast to at most 5 dims; 8 leaves room for reshaped views.
constexpr int kMaxDims = 8;

// The general loop's geometry: `nd` dims in the output's physical order (outermost first, the output
// dense in that order), and each operand's element strides along them (0 where it is broadcast).
struct StridedPlan {
  int nd = 0;
  int64_t size[kMaxDims];
  int64_t stride[2][kMaxDims];
};

// Plans y (out_shape, format) = f(operands...) for one or two operands. Size-1 dims are dropped and
// neighbouring dims merged where every operand steps through them as through one dim.
StridedPlan make_plan(const char* op, const Shape& out_shape, MemoryFormat format, const std::vector<const Tensor*>& xs) {
  const int64_t nd = static_cast<int64_t>(out_shape.size());
  std::vector<std::vector<int64_t>> logical(xs.size(), std::vector<int64_t>(nd, 0));
  for (size_t k = 0; k < xs.size(); ++k) {
    const Shape& s = xs[k]->shape();
    const std::vector<int64_t> st = physical_strides(*xs[k]);
    const int64_t lead = nd - static_cast<int64_t>(s.size());
    HG_CHECK(lead >= 0, op << ": operand " << shape_str(s) << " has more dims than the output " << shape_str(out_shape));
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      HG_CHECK(s[d] == out_shape[lead + d] || s[d] == 1,
               op << ": operand " << shape_str(s) << " does not broadcast to " << shape_str(out_shape));
      logical[k][lead + d] = s[d] == 1 ? 0 : st[d];
    }
  }
  StridedPlan p;
  for (int d : physical_order(nd, format)) {
    if (out_shape[d] == 1) continue;
    bool merge = p.nd > 0;
    for (size_t k = 0; k < xs.size() && merge; ++k)
      merge = p.stride[k][p.nd - 1] == logical[k][d] * out_shape[d];
    if (merge) {  // the previous (outer) dim and this one are one dim of size product, inner strides
      p.size[p.nd - 1] *= out_shape[d];
      for (size_t k = 0; k < xs.size(); ++k) p.stride[k][p.nd - 1] = logical[k][d];
      continue;
    }
    HG_CHECK(p.nd < kMaxDims, op << ": output " << shape_str(out_shape) << " has more than " << kMaxDims
                                 << " dims after merging; the CUDA broadcast supports " << kMaxDims);
    p.size[p.nd] = out_shape[d];
    for (size_t k = 0; k < xs.size(); ++k) p.stride[k][p.nd] = logical[k][d];
    ++p.nd;
  }
  return p;
}

// Offset of output element i (in the plan's dense order) in operand k.
__device__ __forceinline__ int64_t plan_offset(const StridedPlan& p, int k, int64_t i) {
  int64_t off = 0;
  for (int d = p.nd - 1; d >= 0; --d) {
    const int64_t c = i % p.size[d];
    i /= p.size[d];
    off += c * p.stride[k][d];
  }
  return off;
}

struct BinaryFn {
  BinaryOp kind;
  __device__ float operator()(float u, float v) const {
    switch (kind) {
      case BinaryOp::Add: return u + v;
      case BinaryOp::Sub: return u - v;
      case BinaryOp::Mul: return u * v;
      case BinaryOp::Div: return u / v;
    }
    return 0.f;
  }
};

struct UnaryDeviceFn {
  UnaryOp kind;
  float scale, shift, exponent;
  __device__ float operator()(float v) const {
    switch (kind) {
      case UnaryOp::Affine: return scale * v + shift;
      case UnaryOp::Exp: return expf(v);
      case UnaryOp::Log: return logf(v);
      case UnaryOp::Pow: return powf(v, exponent);
      case UnaryOp::PowGrad: return exponent * powf(v, exponent - 1.f);
    }
    return 0.f;
  }
};

// y[i] = f(a[i], small[(i / inner) % C]) (or f(small[..], big[i]) when small_first); big, y: n elements.
template <typename T>
__global__ void channel_broadcast_kernel(const T* __restrict__ big, const T* __restrict__ small, T* __restrict__ y,
                                         int64_t n, int64_t inner, int64_t C, bool small_first, BinaryFn f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = to_float(big[i]), v = to_float(small[(i / inner) % C]);
    y[i] = from_float<T>(small_first ? f(v, u) : f(u, v));
  }
}

template <typename T>
__global__ void strided_binary_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n,
                                      StridedPlan p, BinaryFn f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(f(to_float(a[plan_offset(p, 0, i)]), to_float(b[plan_offset(p, 1, i)])));
}

template <typename Tin, typename Tout>
__global__ void strided_scale_kernel(const Tin* __restrict__ g, Tout* __restrict__ y, int64_t n, StridedPlan p,
                                     float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<Tout>(scale * to_float(g[plan_offset(p, 0, i)]));
}


void check_cuda_float(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.defined() && t.is_cuda(), op << ": " << what << " must be a CUDA tensor");
  HG_CHECK(t.dtype() == kFloat32 || is_reduced_float(t.dtype()),
           op << ": " << what << " " << shape_str(t.shape()) << " is " << dtype_name(t.dtype())
              << "; the CUDA kernels take float32, float16 or bfloat16");
}

// True when `small` is (.., C, 1, 1, 1) right-aligned against the 5-D `out`: one value per channel.
bool is_per_channel(const Shape& small, const Shape& out) {
  if (out.size() != 5 || small.size() > 5 || small.size() < 4 || shape_numel(small) != out[1]) return false;
  const int64_t lead = 5 - static_cast<int64_t>(small.size());
  for (int64_t d = 0; d < static_cast<int64_t>(small.size()); ++d)
    if (lead + d != 1 && small[d] != 1) return false;
  return small[1 - lead] == out[1];
}

MemoryFormat output_format(const Tensor& a, const Tensor& b, const Shape& so) {
  if (so.size() != 5) return MemoryFormat::Contiguous;
  if (a.shape() == so) return a.memory_format();
  if (b.shape() == so) return b.memory_format();
  if (a.dim() == 5) return a.memory_format();
  if (b.dim() == 5) return b.memory_format();
  return MemoryFormat::Contiguous;
}

}  // namespace

Tensor binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, const Shape& so) {
  check_cuda_float(op, "first operand", a);
  check_cuda_float(op, "second operand", b);
  HG_CHECK(a.dtype() == b.dtype(), op << ": operands " << dtype_name(a.dtype()) << " " << shape_str(a.shape()) << " and "
                                      << dtype_name(b.dtype()) << " " << shape_str(b.shape())
                                      << " must share a dtype (cast first)");
  const MemoryFormat fmt = output_format(a, b, so);
  Tensor y = Tensor::empty(so, a.dtype(), Device::CUDA, fmt);
  const int64_t n = y.numel();
  if (n == 0) return y;
  const BinaryFn f{kind};
  dispatch_float(op, "elementwise kernels", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (a.shape() == so && b.shape() == so) {
      // Same shape: b in a's format (a copy only when they differ), then one flat loop.
      const Tensor bb = b.format_copy(a.memory_format());
      pointwise::launch_binary(op, dev<T>(a), dev<T>(bb), dev<T>(y), n, f);
      return;
    }
    const bool b_small = b.numel() == 1 || is_per_channel(b.shape(), so);
    const bool a_small = !b_small && (a.numel() == 1 || is_per_channel(a.shape(), so));
    const Tensor& big = b_small ? a : b;
    const Tensor& small = b_small ? b : a;
    if ((a_small || b_small) && big.shape() == so) {
      int64_t inner = 1, C = 1;
      if (small.numel() > 1) {  // per channel; the output has big's format
        C = so[1];
        inner = big.is_channels_last() ? 1 : so[2] * so[3] * so[4];
      }
      channel_broadcast_kernel<T><<<grid_for(n), 256, 0, stream()>>>(dev<T>(big), dev<T>(small), dev<T>(y), n, inner, C,
                                                                      a_small, f);
      HG_CUDA_LAUNCH_CHECK(op);
      return;
    }
    const StridedPlan p = make_plan(op, so, fmt, {&a, &b});
    strided_binary_kernel<T><<<grid_for(n), 256, 0, stream()>>>(dev<T>(a), dev<T>(b), dev<T>(y), n, p, f);
    HG_CUDA_LAUNCH_CHECK(op);
  });
  return y;
}

Tensor unary(const char* op, const Tensor& x, Dtype out, const UnaryFn& fn) {
  check_cuda_float(op, "input", x);
  HG_CHECK(out == kFloat32 || is_reduced_float(out),
           op << ": CUDA output dtype must be float32, float16 or bfloat16, got " << dtype_name(out));
  Tensor y = Tensor::empty(x.shape(), out, Device::CUDA, x.memory_format());
  const UnaryDeviceFn f{fn.kind, static_cast<float>(fn.scale), static_cast<float>(fn.shift),
                        static_cast<float>(fn.exponent)};
  dispatch_float(op, "elementwise kernels", x.dtype(), [&](auto in_tag) {
    dispatch_float(op, "elementwise kernels", out, [&](auto out_tag) {
      using Tin = decltype(in_tag);
      using Tout = decltype(out_tag);
      pointwise::launch_unary(op, dev<Tin>(x), dev<Tout>(y), x.numel(), f);
    });
  });
  return y;
}

Tensor broadcast_scaled(const char* op, const Tensor& g, const Shape& shape, MemoryFormat format, double scale, Dtype out) {
  check_cuda_float(op, "gradient", g);
  HG_CHECK(format == MemoryFormat::Contiguous || shape.size() == 5,
           op << ": channels-last output needs a 5-D shape, got " << shape_str(shape));
  Tensor y = Tensor::empty(shape, out, Device::CUDA, format);
  const int64_t n = y.numel();
  if (n == 0) return y;
  const StridedPlan p = make_plan(op, shape, format, {&g});
  dispatch_float(op, "elementwise kernels", g.dtype(), [&](auto in_tag) {
    dispatch_float(op, "elementwise kernels", out, [&](auto out_tag) {
      using Tin = decltype(in_tag);
      using Tout = decltype(out_tag);
      strided_scale_kernel<Tin, Tout><<<grid_for(n), 256, 0, stream()>>>(dev<Tin>(g), dev<Tout>(y), n, p,
                                                                         static_cast<float>(scale));
      HG_CUDA_LAUNCH_CHECK(op);
    });
  });
  return y;
}

}  // namespace halfgrad::cuda
