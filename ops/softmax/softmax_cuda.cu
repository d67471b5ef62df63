// softmax_cuda.cu - softmax and log_softmax along one dim on CUDA (launchers in softmax_cuda.h).
//
// Math: softmax      y_c = exp(x_c - m) / s,   m = max_c x_c,  s = sum_c exp(x_c - m)
//                    dx_c = y_c * (dy_c - sum_k dy_k y_k)
//       log_softmax  y_c = x_c - (m + log s)
//                    dx_c = dy_c - exp(y_c) * sum_k dy_k
// Shapes and layout: the tensor is taken in its physical order as (outer, n, inner) with the softmax
// dim (extent n) at stride inner: NCDHW over dim 1 is (N, C, D*H*W); NDHWC over dim 1 (the U-Net's
// class dim) is (N*D*H*W, C, 1), each position's C values adjacent. The output has x's format.
// Parallel mapping:
//   inner > 1, or a short row (n <= kWarpRowMin): one thread per (outer, inner) position, three
//     sweeps over its n values (max, sum of exp, write); consecutive threads take consecutive
//     positions, so each sweep step is one coalesced load across the warp (inner > 1) or the warp
//     covers 32 adjacent rows (inner == 1);
//   inner == 1 and n > kWarpRowMin (class logits along the last dim): one warp per row, lanes striding
//     over the row, max and sum combined across the warp by shuffles.
//   Backward: the same two mappings, two sweeps (the sum, then dx).
// Precision: FP32 throughout (FP16 widened on load); one rounding of each output.
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/softmax/softmax_cuda.h"

namespace halfgrad::cuda {
namespace {

// Rows longer than this get a warp each; shorter ones a thread (a warp would idle most lanes).
constexpr int64_t kWarpRowMin = 64;
constexpr int kThreads = 256;

struct SoftmaxShape {
  int64_t outer = 1, n = 1, inner = 1;
};

SoftmaxShape softmax_shape(const Tensor& x, int64_t dim) {
  SoftmaxShape g;
  const int64_t nd = x.dim();
  if (nd == 0) return g;
  std::vector<int64_t> order(nd);
  for (int64_t i = 0; i < nd; ++i) order[i] = i;
  if (x.is_channels_last()) order = {0, 2, 3, 4, 1};
  bool after = false;
  for (int64_t d : order) {
    const int64_t e = x.shape()[d];
    if (d == dim) {
      g.n = e;
      after = true;
    } else if (after) {
      g.inner *= e;
    } else {
      g.outer *= e;
    }
  }
  return g;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

template <typename T, bool kLog>
__global__ void softmax_positions_kernel(const T* __restrict__ x, T* __restrict__ y, SoftmaxShape g) {
  const int64_t positions = g.outer * g.inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < positions; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (t / g.inner) * g.n * g.inner + t % g.inner;
    float m = to_float(x[base]);
    for (int64_t c = 1; c < g.n; ++c) m = fmaxf(m, to_float(x[base + c * g.inner]));
    float s = 0.f;
    for (int64_t c = 0; c < g.n; ++c) s += expf(to_float(x[base + c * g.inner]) - m);
    const float lse = m + logf(s), inv = 1.f / s;
    for (int64_t c = 0; c < g.n; ++c) {
      const float v = to_float(x[base + c * g.inner]);
      y[base + c * g.inner] = from_float<T>(kLog ? v - lse : expf(v - m) * inv);
    }
  }
}

template <typename T, bool kLog>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, SoftmaxShape g) {
  const int64_t row = blockIdx.x * int64_t(kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= g.outer) return;  // whole warps leave together
  const T* xr = x + row * g.n;
  T* yr = y + row * g.n;
  float m = -INFINITY;
  for (int64_t c = lane; c < g.n; c += 32) m = fmaxf(m, to_float(xr[c]));
  m = warp_max(m);
  float s = 0.f;
  for (int64_t c = lane; c < g.n; c += 32) s += expf(to_float(xr[c]) - m);
  s = warp_sum(s);
  const float lse = m + logf(s), inv = 1.f / s;
  for (int64_t c = lane; c < g.n; c += 32) {
    const float v = to_float(xr[c]);
    yr[c] = from_float<T>(kLog ? v - lse : expf(v - m) * inv);
  }
}

template <typename T, bool kLog>
__global__ void softmax_backward_positions_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                                  SoftmaxShape g) {
  const int64_t positions = g.outer * g.inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < positions; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (t / g.inner) * g.n * g.inner + t % g.inner;
    float s = 0.f;
    for (int64_t c = 0; c < g.n; ++c) {
      const int64_t i = base + c * g.inner;
      s += kLog ? to_float(dy[i]) : to_float(dy[i]) * to_float(y[i]);
    }
    for (int64_t c = 0; c < g.n; ++c) {
      const int64_t i = base + c * g.inner;
      const float yv = to_float(y[i]), gv = to_float(dy[i]);
      dx[i] = from_float<T>(kLog ? gv - expf(yv) * s : yv * (gv - s));
    }
  }
}

template <typename T, bool kLog>
__global__ void softmax_backward_rows_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                             SoftmaxShape g) {
  const int64_t row = blockIdx.x * int64_t(kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= g.outer) return;
  const int64_t off = row * g.n;
  float s = 0.f;
  for (int64_t c = lane; c < g.n; c += 32) s += kLog ? to_float(dy[off + c]) : to_float(dy[off + c]) * to_float(y[off + c]);
  s = warp_sum(s);
  for (int64_t c = lane; c < g.n; c += 32) {
    const float yv = to_float(y[off + c]), gv = to_float(dy[off + c]);
    dx[off + c] = from_float<T>(kLog ? gv - expf(yv) * s : yv * (gv - s));
  }
}

template <typename F>
void dispatch(const char* op, Dtype d, bool log, F&& f) {
  dispatch_float(op, "softmax and log_softmax", d, [&](auto tag) {
    if (log) f(tag, std::true_type{});
    else f(tag, std::false_type{});
  });
}

bool use_rows(const SoftmaxShape& g) { return g.inner == 1 && g.n > kWarpRowMin; }

unsigned row_blocks(const char* op, const SoftmaxShape& g) {
  const int64_t blocks = (g.outer + kThreads / 32 - 1) / (kThreads / 32);
  HG_CHECK(blocks < (int64_t{1} << 31), op << ": " << g.outer << " rows are too many for one launch");
  return static_cast<unsigned>(blocks);
}

}  // namespace

Tensor softmax_forward(const char* op, const Tensor& x, int64_t dim, bool log) {
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  const SoftmaxShape g = softmax_shape(x, dim);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  if (x.numel() == 0) return y;
  dispatch(op, x.dtype(), log, [&](auto tag, auto log_tag) {
    using T = decltype(tag);
    constexpr bool kLog = decltype(log_tag)::value;
    if (use_rows(g)) softmax_rows_kernel<T, kLog><<<row_blocks(op, g), kThreads, 0, stream()>>>(dev<T>(x), dev<T>(y), g);
    else softmax_positions_kernel<T, kLog><<<grid_for(g.outer * g.inner), kThreads, 0, stream()>>>(dev<T>(x), dev<T>(y), g);
    HG_CUDA_LAUNCH_CHECK(op);
  });
  return y;
}

Tensor softmax_backward(const char* op, const Tensor& y, const Tensor& gy, int64_t dim, bool log) {
  HG_CHECK(y.is_cuda() && gy.defined() && gy.is_cuda(), op << ": backward needs CUDA tensors");
  HG_CHECK(gy.shape() == y.shape(), op << ": gradient " << shape_str(gy.shape()) << " for an output of shape "
                                       << shape_str(y.shape()));
  const Tensor dy = (gy.dtype() == y.dtype() ? gy : gy.cast_copy(y.dtype())).format_copy(y.memory_format());
  const SoftmaxShape g = softmax_shape(y, dim);
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), Device::CUDA, y.memory_format());
  if (y.numel() == 0) return dx;
  dispatch(op, y.dtype(), log, [&](auto tag, auto log_tag) {
    using T = decltype(tag);
    constexpr bool kLog = decltype(log_tag)::value;
    if (use_rows(g)) {
      softmax_backward_rows_kernel<T, kLog><<<row_blocks(op, g), kThreads, 0, stream()>>>(dev<T>(y), dev<T>(dy), dev<T>(dx), g);
    } else {
      softmax_backward_positions_kernel<T, kLog>
          <<<grid_for(g.outer * g.inner), kThreads, 0, stream()>>>(dev<T>(y), dev<T>(dy), dev<T>(dx), g);
    }
    HG_CUDA_LAUNCH_CHECK(op);
  });
  return dx;
}

}  // namespace halfgrad::cuda
