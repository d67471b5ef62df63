// layer_norm_cuda.cu - layer_norm on the GPU (launchers in layer_norm_cuda.h; the op and autograd in
// layer_norm.cpp).
//
// Math, per row r of x viewed as (R, K):
//   forward   K0 = x_r0 (a shift against cancellation, 0 when non-finite: norm_reduce.cuh),
//             s1 = sum (x - K0), s2 = sum (x - K0)^2, mean = K0 + s1/K, var = s2/K - (s1/K)^2 clamped at 0
//             keeping NaN, invstd = 1/sqrt(var + eps), y = (x - mean) invstd w_k + b_k
//   backward  a = sum w_k dy_k, b = sum w_k dy_k (x_k - mean);
//             dx = invstd (w_k dy_k - a/K - xhat_k invstd b/K),  xhat = (x - mean) invstd
//             dweight_k = sum_r dy xhat, dbias_k = sum_r dy
// Shapes and layout: x, dy, y, dx (R, K) contiguous, float or half; weight, bias float32 [K]; saved
// (2, R) float32 = (mean, invstd).
// Parallel mapping: forward and dx: one block of 256 threads per row, each thread striding over k
// (coalesced), FP32 partial sums per thread combined in FP64 (block_sum2), then a second sweep that
// writes. dweight / dbias: a (ceil(K/256), ceil(R/kRowsPerChunk)) grid, thread k of a chunk sums its
// column over kRowsPerChunk rows in FP64 into part[chunk][k]; one more kernel sums the chunks of
// each column in chunk order. Every order is fixed: results do not depend on timing.
// Bytes: forward 2 reads + 1 write of x; backward 2 reads of (x, dy) + 1 write for dx, and 1 more read
// of (x, dy) for dweight / dbias. Precision: FP16 loaded as half, math in FP32, rounded once.
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/norm/layer_norm_cuda.h"
#include "ops/norm/norm_reduce.cuh"

namespace halfgrad::cuda {
namespace {

using norm_reduce::block_sum2;
using norm_reduce::kThreads;
using norm_reduce::norm_shift;

// Rows per dweight / dbias chunk: each thread then sums 128 FP32 products into its FP64 accumulator,
// and a (1024 x 4096) activation gives 32 chunks x 16 column blocks.
constexpr int64_t kRowsPerChunk = 128;

// x, y (R, K); saved (2, R).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_forward_kernel(const T* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                              int64_t R, int64_t K, double eps, T* __restrict__ y, float* __restrict__ saved) {
  __shared__ float s_mean, s_invstd;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * K;
  const float shift = norm_shift(to_float(xr[0]));
  float s1 = 0.f, s2 = 0.f;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    const float d = to_float(xr[k]) - shift;
    s1 += d;
    s2 = fmaf(d, d, s2);
  }
  double a = s1, q = s2;
  block_sum2(a, q);
  if (threadIdx.x == 0) {
    const double m1 = a / K;
    double var = q / K - m1 * m1;
    if (var < 0.0) var = 0.0;  // rounding; written so that a NaN stays NaN
    const double invstd = 1.0 / sqrt(var + eps);
    s_mean = static_cast<float>(shift + m1);
    s_invstd = static_cast<float>(invstd);
    saved[r] = s_mean;
    saved[R + r] = s_invstd;
  }
  __syncthreads();
  const float mean = s_mean, invstd = s_invstd;
  T* yr = y + r * K;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    const float wk = w ? w[k] : 1.f, bk = b ? b[k] : 0.f;
    yr[k] = from_float<T>((to_float(xr[k]) - mean) * invstd * wk + bk);
  }
}

// dx (R, K) from x, dy, saved.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_dx_kernel(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ w,
                         const float* __restrict__ saved, int64_t R, int64_t K, T* __restrict__ dx) {
  __shared__ float s_a, s_b;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * K;
  const T* gr = dy + r * K;
  const float mean = saved[r], invstd = saved[R + r];
  float sa = 0.f, sb = 0.f;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    const float g = to_float(gr[k]) * (w ? w[k] : 1.f);
    sa += g;
    sb = fmaf(g, to_float(xr[k]) - mean, sb);
  }
  double a = sa, q = sb;
  block_sum2(a, q);
  if (threadIdx.x == 0) {
    s_a = static_cast<float>(a / K);                  // mean(dxhat)
    s_b = static_cast<float>(q / K * invstd);         // mean(dxhat xhat)
  }
  __syncthreads();
  const float ma = s_a, mb = s_b;
  T* dr = dx + r * K;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    const float g = to_float(gr[k]) * (w ? w[k] : 1.f);
    const float xhat = (to_float(xr[k]) - mean) * invstd;
    dr[k] = from_float<T>(invstd * (g - ma - xhat * mb));
  }
}

// part (2, chunks, K) FP64: column sums of dy xhat and dy over one chunk of rows.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_param_partials_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                     const float* __restrict__ saved, int64_t R, int64_t K,
                                     double* __restrict__ part) {
  const int64_t k = blockIdx.x * int64_t(kThreads) + threadIdx.x, chunk = blockIdx.y;
  if (k >= K) return;
  const int64_t r0 = chunk * kRowsPerChunk, r1 = r0 + kRowsPerChunk < R ? r0 + kRowsPerChunk : R;
  double sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = to_float(dy[r * K + k]);
    sw += g * ((to_float(x[r * K + k]) - saved[r]) * saved[R + r]);
    sb += g;
  }
  const int64_t chunks = gridDim.y;
  part[chunk * K + k] = sw;
  part[(chunks + chunk) * K + k] = sb;
}

__global__ void layer_norm_param_sum_kernel(const double* __restrict__ part, int64_t chunks, int64_t K,
                                            float* __restrict__ dw, float* __restrict__ db) {
  const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (k >= K) return;
  double sw = 0, sb = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    sw += part[c * K + k];
    sb += part[(chunks + c) * K + k];
  }
  if (dw) dw[k] = static_cast<float>(sw);
  if (db) db[k] = static_cast<float>(sb);
}

void check_rows(const Tensor& x, int64_t K) {
  HG_CHECK(x.defined() && x.is_cuda() && !x.is_channels_last(), "layer_norm: CUDA input must be a contiguous CUDA tensor");
  HG_CHECK(K >= 1 && x.numel() % K == 0, "layer_norm: input " << shape_str(x.shape()) << " is not rows of " << K);
}
void check_vec(const char* what, const Tensor& t, int64_t K) {
  if (!t.defined()) return;
  HG_CHECK(t.is_cuda() && t.dtype() == kFloat32 && t.numel() == K,
           "layer_norm: CUDA " << what << " must be float32 with " << K << " elements, got " << dtype_name(t.dtype())
                               << " " << shape_str(t.shape()));
}
const float* fptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

LayerNormCudaForward layer_norm_forward(const Tensor& x, int64_t K, const Tensor& weight, const Tensor& bias,
                                        double eps) {
  check_rows(x, K);
  check_vec("weight", weight, K);
  check_vec("bias", bias, K);
  const int64_t R = x.numel() / K;
  LayerNormCudaForward f;
  f.y = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
  f.saved = Tensor::empty({2, R}, kFloat32, Device::CUDA);
  if (R == 0) return f;
  dispatch_float("layer_norm", "inputs", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    layer_norm_forward_kernel<T><<<static_cast<unsigned>(R), kThreads, 0, stream()>>>(
        dev<T>(x), fptr(weight), fptr(bias), R, K, eps, dev<T>(f.y), f.saved.data<float>());
    HG_CUDA_LAUNCH_CHECK("layer_norm");
  });
  return f;
}

LayerNormCudaGrads layer_norm_backward(const Tensor& x, int64_t K, const Tensor& weight, const Tensor& saved,
                                       const Tensor& dy_in, bool need_x, bool need_w, bool need_b) {
  check_rows(x, K);
  check_vec("weight", weight, K);
  const int64_t R = x.numel() / K;
  HG_CHECK(dy_in.defined() && dy_in.shape() == x.shape(), "layer_norm: backward got a gradient of shape "
                                                              << (dy_in.defined() ? shape_str(dy_in.shape()) : "(undefined)")
                                                              << " for input " << shape_str(x.shape()));
  HG_CHECK(saved.defined() && saved.is_cuda() && saved.numel() == 2 * R,
           "layer_norm: backward needs the forward's saved statistics (2, " << R << ")");
  Tensor dy = dy_in.copy_to(Device::CUDA);
  if (dy.dtype() != x.dtype()) dy = dy.cast_copy(x.dtype());
  dy = dy.format_copy(MemoryFormat::Contiguous);
  LayerNormCudaGrads g;
  if (need_x) g.dx = Tensor::empty(x.shape(), x.dtype(), Device::CUDA);
  if (need_w) g.dweight = Tensor::zeros({K}, kFloat32, Device::CUDA);
  if (need_b) g.dbias = Tensor::zeros({K}, kFloat32, Device::CUDA);
  if (R == 0) return g;
  dispatch_float("layer_norm", "inputs", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (need_x) {
      layer_norm_dx_kernel<T><<<static_cast<unsigned>(R), kThreads, 0, stream()>>>(
          dev<T>(x), dev<T>(dy), fptr(weight), saved.data<float>(), R, K, dev<T>(g.dx));
      HG_CUDA_LAUNCH_CHECK("layer_norm backward");
    }
    if (need_w || need_b) {
      const int64_t chunks = (R + kRowsPerChunk - 1) / kRowsPerChunk;
      HG_CHECK(chunks <= 65535, "layer_norm: " << R << " rows exceed the dweight grid (65535 chunks of "
                                               << kRowsPerChunk << " rows)");
      Tensor part = Tensor::empty({2 * chunks * K}, kFloat64, Device::CUDA);
      const dim3 grid(static_cast<unsigned>((K + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
      layer_norm_param_partials_kernel<T><<<grid, kThreads, 0, stream()>>>(dev<T>(x), dev<T>(dy), saved.data<float>(),
                                                                           R, K, part.data<double>());
      HG_CUDA_LAUNCH_CHECK("layer_norm backward");
      layer_norm_param_sum_kernel<<<static_cast<unsigned>((K + kThreads - 1) / kThreads), kThreads, 0, stream()>>>(
          part.data<double>(), chunks, K, need_w ? g.dweight.data<float>() : nullptr,
          need_b ? g.dbias.data<float>() : nullptr);
      HG_CUDA_LAUNCH_CHECK("layer_norm backward");
    }
  });
  return g;
}

}  // namespace halfgrad::cuda
