// elementwise_loss_cuda.cu - mse_loss, l1_loss and binary_cross_entropy_with_logits per element on
// CUDA (launchers in elementwise_loss_cuda.h; reductions and autograd in elementwise_loss.cpp).
//
// Math: elementwise_loss_math.h's forward, grad_input and grad_target, the code the CPU runs.
// Shapes and layout: x, t, pw, gy, l, dx, dt share one shape and memory format, so the loops run over
// the physical buffers (valid for NCDHW and NDHWC alike). One thread per element, grid-stride.
// Memory-bound: forward reads 2-3 and writes 1 value per element, backward reads 3-4 and writes 1-2.
// Precision: FP16 widened to FP32, math in FP32, each output rounded once.
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/loss/elementwise_loss_cuda.h"

namespace halfgrad::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float pw_at(const T* pw, int64_t i) { return pw ? to_float(pw[i]) : 1.f; }

template <typename T>
__global__ void loss_forward_kernel(elementwise_loss::Kind k, const T* __restrict__ x, const T* __restrict__ t,
                                    const T* __restrict__ pw, T* __restrict__ l, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step)
    l[i] = from_float<T>(elementwise_loss::forward<float>(k, to_float(x[i]), to_float(t[i]), pw_at(pw, i)));
}

template <typename T>
__global__ void loss_backward_kernel(elementwise_loss::Kind k, const T* __restrict__ gy, const T* __restrict__ x,
                                     const T* __restrict__ t, const T* __restrict__ pw, T* __restrict__ dx,
                                     T* __restrict__ dt, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const float g = to_float(gy[i]), xv = to_float(x[i]), tv = to_float(t[i]), p = pw_at(pw, i);
    if (dx) dx[i] = from_float<T>(g * elementwise_loss::grad_input<float>(k, xv, tv, p));
    if (dt) dt[i] = from_float<T>(g * elementwise_loss::grad_target<float>(k, xv, tv, p));
  }
}

const char* kind_name(elementwise_loss::Kind k) {
  switch (k) {
    case elementwise_loss::Kind::Mse: return "mse_loss";
    case elementwise_loss::Kind::L1: return "l1_loss";
    case elementwise_loss::Kind::BceWithLogits: return "binary_cross_entropy_with_logits";
  }
  return "elementwise loss";
}

// Every operand must match x exactly: the kernels index all of them with one physical offset.
void check_like(const char* op, const char* what, const Tensor& a, const Tensor& x) {
  if (!a.defined()) return;
  HG_CHECK(a.is_cuda() && a.dtype() == x.dtype() && a.shape() == x.shape() && a.memory_format() == x.memory_format(),
           op << ": CUDA " << what << " must match the input's shape, dtype and memory format (" << shape_str(x.shape())
              << " " << dtype_name(x.dtype()) << "), got " << shape_str(a.shape()) << " " << dtype_name(a.dtype()));
}

template <typename T>
const T* dev_or_null(const Tensor& t) { return t.defined() ? dev<T>(t) : nullptr; }

}  // namespace

Tensor elementwise_loss_forward(elementwise_loss::Kind kind, const Tensor& x, const Tensor& t, const Tensor& pw) {
  const char* op = kind_name(kind);
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  check_like(op, "target", t, x);
  check_like(op, "pos_weight", pw, x);
  Tensor l = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  const int64_t n = x.numel();
  if (n == 0) return l;
  dispatch_float(op, "losses", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    loss_forward_kernel<T><<<grid_for(n), 256, 0, stream()>>>(kind, dev<T>(x), dev<T>(t), dev_or_null<T>(pw),
                                                              dev<T>(l), n);
    HG_CUDA_LAUNCH_CHECK(op);
  });
  return l;
}

ElementwiseLossGrads elementwise_loss_backward(elementwise_loss::Kind kind, const Tensor& gy, const Tensor& x,
                                               const Tensor& t, const Tensor& pw, bool need_x, bool need_t) {
  const char* op = kind_name(kind);
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  check_like(op, "gradient", gy, x);
  check_like(op, "target", t, x);
  check_like(op, "pos_weight", pw, x);
  ElementwiseLossGrads r;
  if (need_x) r.dx = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  if (need_t) r.dt = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  const int64_t n = x.numel();
  if (n == 0 || (!need_x && !need_t)) return r;
  dispatch_float(op, "losses", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    loss_backward_kernel<T><<<grid_for(n), 256, 0, stream()>>>(
        kind, dev<T>(gy), dev<T>(x), dev<T>(t), dev_or_null<T>(pw), need_x ? dev<T>(r.dx) : nullptr,
        need_t ? dev<T>(r.dt) : nullptr, n);
    HG_CUDA_LAUNCH_CHECK(op);
  });
  return r;
}

}  // namespace halfgrad::cuda
