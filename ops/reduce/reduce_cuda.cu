// reduce_cuda.cu - the CUDA kernels of ops/reduce (launchers declared in reduce_cuda.h).
//
// Math: y[o] = scale * sum_{r} x[o, r] over the reduced dims (sum: scale 1, mean: 1 / count);
//       backward (in reduce.cpp): dx = scale * broadcast(dy), elementwise_cuda.h's broadcast_scaled.
//       argmax: y[o] = the first c maximising x[o, c, i] along one dim, NaN above every number (the
//               first NaN, as torch.argmax); no backward.
// Shapes and layout: x is any rank, NCDHW or NDHWC, read in place with its physical strides; y has
// x's logical keepdim shape, contiguous. The dims are walked in x's physical order (outermost first)
// and split into kept dims (-> output index o, O of them) and reduced dims (-> r, R of them); size-1
// dims are dropped and neighbours of one kind that step like one dim are merged, so
//   NCDHW sum over (0, 2, 3, 4)  -> kept [C], reduced [N, D*H*W]   (per-channel statistics)
//   NDHWC sum over (0, 2, 3, 4)  -> kept [C], reduced [N*D*H*W]    (the channel is innermost)
//   sum of everything            -> kept [],  reduced [numel].
// Parallel mapping, chosen by whether x's innermost (unit-stride) dim is reduced or kept:
//   reduced innermost: one warp per (output, split of R): the 32 lanes read consecutive elements,
//     then a shuffle tree sums the lanes;
//   kept innermost: one thread per (output, split of R), consecutive threads on consecutive outputs
//     (coalesced), each summing its split of R sequentially.
//   R is cut into `splits` equal chunks so that the grid fills the GPU even with a single output;
//   each (output, chunk) writes one FP32 partial, and a second kernel (one warp per output) sums the
//   partials of an output, lane by lane then by a shuffle tree, applies the scale and rounds once.
//   No atomics: every addition happens in an order fixed by the shape, so results are bit-reproducible.
// argmax: one thread per output, looping over the reduced dim.
// Precision: FP16 loads widened to FP32, FP32 accumulation (partials and final sum), one rounding to
// the output dtype.
#include <algorithm>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/reduce/reduce_cuda.h"

namespace halfgrad::cuda {
namespace {

constexpr int kMaxDims = 8;
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
// Work per split: at least 8 elements per lane (reduced-innermost) or 32 per thread (kept-innermost),
// so that the partials stay a small fraction of the traffic.
constexpr int64_t kMinRowChunk = 256;
constexpr int64_t kMinColChunk = 32;

struct ReducePlan {
  int nk = 0, nr = 0;
  int64_t k_size[kMaxDims], k_stride[kMaxDims], k_out[kMaxDims];  // kept dims: extent, x stride, y stride
  int64_t r_size[kMaxDims], r_stride[kMaxDims];                   // reduced dims: extent, x stride
  int64_t O = 1, R = 1;
};

__device__ __forceinline__ int64_t kept_offset(const ReducePlan& p, int64_t o, const int64_t* stride) {
  int64_t off = 0;
  for (int d = p.nk - 1; d >= 0; --d) {
    off += (o % p.k_size[d]) * stride[d];
    o /= p.k_size[d];
  }
  return off;
}

__device__ __forceinline__ int64_t reduced_offset(const ReducePlan& p, int64_t r) {
  if (p.nr == 1) return r * p.r_stride[0];
  int64_t off = 0;
  for (int d = p.nr - 1; d >= 0; --d) {
    off += (r % p.r_size[d]) * p.r_stride[d];
    r /= p.r_size[d];
  }
  return off;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Reduced dims innermost: warp w handles output o = w / splits, chunk s = w % splits of R.
template <typename T>
__global__ void reduce_rows_kernel(const T* __restrict__ x, float* __restrict__ partial, ReducePlan p, int64_t splits,
                                   int64_t chunk) {
  const int64_t w = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= p.O * splits) return;  // whole warps leave together
  const int64_t o = w / splits, s = w % splits;
  const T* base = x + kept_offset(p, o, p.k_stride);
  const int64_t r1 = min(p.R, (s + 1) * chunk);
  float acc = 0.f;
  for (int64_t r = s * chunk + lane; r < r1; r += 32) acc += to_float(base[reduced_offset(p, r)]);
  acc = warp_sum(acc);
  if (lane == 0) partial[s * p.O + o] = acc;
}

// Kept dims innermost: thread (o, s) with o = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y.
template <typename T>
__global__ void reduce_cols_kernel(const T* __restrict__ x, float* __restrict__ partial, ReducePlan p, int64_t chunk) {
  const int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, s = blockIdx.y;
  if (o >= p.O) return;
  const T* base = x + kept_offset(p, o, p.k_stride);
  const int64_t r1 = min(p.R, (s + 1) * chunk);
  float acc = 0.f;
  for (int64_t r = s * chunk; r < r1; ++r) acc += to_float(base[reduced_offset(p, r)]);
  partial[s * p.O + o] = acc;
}

// One warp per output: y[o] = scale * sum_s partial[s][o].
template <typename Tout>
__global__ void reduce_finish_kernel(const float* __restrict__ partial, Tout* __restrict__ y, ReducePlan p,
                                     int64_t splits, float scale) {
  const int64_t o = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (o >= p.O) return;
  float acc = 0.f;
  for (int64_t s = lane; s < splits; s += 32) acc += partial[s * p.O + o];
  acc = warp_sum(acc);
  if (lane == 0) y[kept_offset(p, o, p.k_out)] = from_float<Tout>(scale * acc);
}

struct ArgmaxPlan {
  int nd = 0;
  int64_t size[kMaxDims], stride[kMaxDims];  // the other dims, logical order (output contiguous in it)
  int64_t n = 1, step = 1;                   // extent and x stride of the reduced dim
};

template <typename T>
__global__ void argmax_kernel(const T* __restrict__ x, int64_t* __restrict__ y, int64_t outputs, ArgmaxPlan p) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < outputs; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t off = 0, rem = o;
    for (int d = p.nd - 1; d >= 0; --d) {
      off += (rem % p.size[d]) * p.stride[d];
      rem /= p.size[d];
    }
    const T* base = x + off;
    int64_t best = 0;
    float best_v = to_float(base[0]);
    for (int64_t c = 1; c < p.n; ++c) {
      const float v = to_float(base[c * p.step]);
      // strict: the first maximum wins; a NaN beats any number and the first NaN stays (torch.argmax)
      if (v > best_v || (v != v && best_v == best_v)) {
        best = c;
        best_v = v;
      }
    }
    y[o] = best;
  }
}


// Appends extent/strides to a dim list, merging with the previous entry when they step as one dim.
void push_dim(int& n, int64_t* size, int64_t* stride, int64_t* out, int64_t e, int64_t st, int64_t ost, const char* op) {
  if (n > 0 && stride[n - 1] == st * e && (out == nullptr || out[n - 1] == ost * e)) {
    size[n - 1] *= e;
    stride[n - 1] = st;
    if (out) out[n - 1] = ost;
    return;
  }
  HG_CHECK(n < kMaxDims, op << ": more than " << kMaxDims << " dims");
  size[n] = e;
  stride[n] = st;
  if (out) out[n] = ost;
  ++n;
}

}  // namespace

Tensor sum_dims(const char* op, const Tensor& x, const std::vector<bool>& mask, double scale, Dtype out) {
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  HG_CHECK(mask.size() == x.shape().size(), op << ": " << mask.size() << " mask entries for shape " << shape_str(x.shape()));
  HG_CHECK(out == kFloat32 || is_reduced_float(out),
           op << ": CUDA output dtype must be float32, float16 or bfloat16, got " << dtype_name(out));
  const Shape& s = x.shape();
  const int64_t nd = static_cast<int64_t>(s.size());
  Shape ks = s;
  for (int64_t d = 0; d < nd; ++d)
    if (mask[d]) ks[d] = 1;
  Tensor y = Tensor::empty(ks, out, Device::CUDA);
  if (y.numel() == 0) return y;
  if (x.numel() == 0) {  // an empty sum is 0
    y.zero_();
    return y;
  }
  const std::vector<int64_t> in_st = physical_strides(x);
  std::vector<int64_t> out_st(nd, 1);
  for (int64_t d = nd - 2; d >= 0; --d) out_st[d] = out_st[d + 1] * ks[d + 1];
  ReducePlan p;
  bool innermost_reduced = false;
  for (int d : physical_order(nd, x.memory_format())) {
    if (s[d] == 1) continue;
    innermost_reduced = mask[d];  // ends as the kind of the innermost non-trivial dim
    if (mask[d]) push_dim(p.nr, p.r_size, p.r_stride, nullptr, s[d], in_st[d], 0, op);
    else push_dim(p.nk, p.k_size, p.k_stride, p.k_out, s[d], in_st[d], out_st[d], op);
  }
  for (int i = 0; i < p.nk; ++i) p.O *= p.k_size[i];
  for (int i = 0; i < p.nr; ++i) p.R *= p.r_size[i];

  const int64_t sms = std::max(1, sm_count());
  int64_t splits, chunk;
  if (innermost_reduced) {
    const int64_t target_warps = sms * 64;  // 2048 resident threads per SM
    splits = std::clamp<int64_t>((target_warps + p.O - 1) / p.O, 1, (p.R + kMinRowChunk - 1) / kMinRowChunk);
  } else {
    const int64_t target_threads = sms * 2048;
    splits = std::clamp<int64_t>((target_threads + p.O - 1) / p.O, 1,
                                 std::min<int64_t>(65535, (p.R + kMinColChunk - 1) / kMinColChunk));
  }
  chunk = (p.R + splits - 1) / splits;
  splits = (p.R + chunk - 1) / chunk;
  Tensor partial = Tensor::empty({splits * p.O}, kFloat32, Device::CUDA);
  float* pp = partial.data<float>();
  dispatch_float(op, "reductions", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (innermost_reduced) {
      const int64_t warps = p.O * splits;
      const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
      HG_CHECK(blocks < (int64_t{1} << 31), op << ": input " << shape_str(s) << " too large for one launch");
      reduce_rows_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(dev<T>(x), pp, p, splits, chunk);
    } else {
      // Few outputs (per-channel statistics of NDHWC: O = C) get blocks of just enough whole warps.
      const int64_t threads = std::min<int64_t>(kThreads, (p.O + 31) / 32 * 32);
      const int64_t blocks = (p.O + threads - 1) / threads;
      HG_CHECK(blocks < (int64_t{1} << 31), op << ": input " << shape_str(s) << " too large for one launch");
      const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
      reduce_cols_kernel<T><<<grid, static_cast<unsigned>(threads), 0, stream()>>>(dev<T>(x), pp, p, chunk);
    }
    HG_CUDA_LAUNCH_CHECK(op);
  });
  dispatch_float(op, "reductions", out, [&](auto tag) {
    using Tout = decltype(tag);
    const int64_t blocks = (p.O + kWarpsPerBlock - 1) / kWarpsPerBlock;
    reduce_finish_kernel<Tout><<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(
        pp, dev<Tout>(y), p, splits, static_cast<float>(scale));
    HG_CUDA_LAUNCH_CHECK(op);
  });
  return y;
}

Tensor argmax(const Tensor& x, int64_t dim) {
  HG_CHECK(x.defined() && x.is_cuda(), "argmax: input must be a CUDA tensor");
  const Shape& s = x.shape();
  const int64_t nd = static_cast<int64_t>(s.size());
  HG_CHECK(dim >= 0 && dim < nd, "argmax: dim " << dim << " out of range for shape " << shape_str(s));
  HG_CHECK(nd <= kMaxDims, "argmax: shape " << shape_str(s) << " has more than " << kMaxDims << " dims");
  HG_CHECK(s[dim] > 0, "argmax: dim " << dim << " of shape " << shape_str(s) << " is empty");
  const std::vector<int64_t> st = physical_strides(x);
  ArgmaxPlan p;
  Shape out_shape;
  for (int64_t d = 0; d < nd; ++d) {
    if (d == dim) continue;
    out_shape.push_back(s[d]);
    p.size[p.nd] = s[d];
    p.stride[p.nd] = st[d];
    ++p.nd;
  }
  p.n = s[dim];
  p.step = st[dim];
  Tensor y = Tensor::empty(out_shape, kInt64, Device::CUDA);
  const int64_t outputs = y.numel();
  if (outputs == 0) return y;
  dispatch_float("argmax", "reductions", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<grid_for(outputs), 256, 0, stream()>>>(dev<T>(x), y.data<int64_t>(), outputs, p);
    HG_CUDA_LAUNCH_CHECK("argmax");
  });
  return y;
}

}  // namespace halfgrad::cuda
