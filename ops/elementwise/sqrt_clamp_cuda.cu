// sqrt_clamp_cuda.cu - sqrt and clamp on CUDA (launchers in sqrt_clamp_cuda.h).
//
// Math: sqrt_clamp_math.h's forward / backward (the formulas of sqrt_clamp.h, PyTorch's), the same
// code the CPU runs. Shapes and layout: format-agnostic flat loops over the physical buffer, so NCDHW
// and NDHWC are served alike and the output keeps the input's format. Parallel mapping:
// pointwise_cuda.cuh (grid-stride, 16-byte packs); memory-bound, 8 bytes per float32 element forward
// and 12 backward, half that for float16. Precision: FP32 arithmetic on widened FP16, rounded once
// (the clamp bounds are rounded to float, then compared with the widened value).
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/elementwise/pointwise_cuda.cuh"
#include "ops/elementwise/sqrt_clamp_cuda.h"

namespace halfgrad::cuda {
namespace {

struct SqrtFn {
  __device__ float operator()(float v) const { return sqrt_clamp::sqrt_forward<float>(v); }
};
struct SqrtGradFn {
  __device__ float operator()(float g, float y) const { return sqrt_clamp::sqrt_backward<float>(g, y); }
};
struct ClampFn {
  sqrt_clamp::ClampBounds b;
  __device__ float operator()(float v) const { return sqrt_clamp::clamp_forward<float>(v, b); }
};
struct ClampGradFn {
  sqrt_clamp::ClampBounds b;
  __device__ float operator()(float g, float x) const { return sqrt_clamp::clamp_backward<float>(g, x, b); }
};

template <typename F>
Tensor forward(const char* op, const Tensor& x, F f) {
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  dispatch_float(op, "tensors", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pointwise::launch_unary(op, dev<T>(x), dev<T>(y), x.numel(), f);
  });
  return y;
}

template <typename F>
Tensor backward(const char* op, const Tensor& gy, const Tensor& saved, F f) {
  HG_CHECK(gy.defined() && gy.is_cuda() && saved.is_cuda(), op << ": backward needs CUDA tensors");
  HG_CHECK(gy.shape() == saved.shape(), op << ": gradient " << shape_str(gy.shape()) << " for an output of shape "
                                           << shape_str(saved.shape()));
  const Tensor g = (gy.dtype() == saved.dtype() ? gy : gy.cast_copy(saved.dtype())).format_copy(saved.memory_format());
  Tensor dx = Tensor::empty(saved.shape(), saved.dtype(), Device::CUDA, saved.memory_format());
  dispatch_float(op, "tensors", saved.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pointwise::launch_binary(op, dev<T>(g), dev<T>(saved), dev<T>(dx), saved.numel(), f);
  });
  return dx;
}

}  // namespace

Tensor sqrt_forward(const Tensor& x) { return forward("sqrt", x, SqrtFn{}); }
Tensor clamp_forward(const Tensor& x, sqrt_clamp::ClampBounds b) { return forward("clamp", x, ClampFn{b}); }
Tensor sqrt_backward(const Tensor& gy, const Tensor& y) { return backward("sqrt", gy, y, SqrtGradFn{}); }
Tensor clamp_backward(const Tensor& gy, const Tensor& x, sqrt_clamp::ClampBounds b) {
  return backward("clamp", gy, x, ClampGradFn{b});
}

}  // namespace halfgrad::cuda
