// smooth_cuda.cu - sigmoid, tanh, silu and gelu on CUDA (launchers in smooth_cuda.h).
//
// Math: smooth_math.h's forward / backward (the formulas of smooth.h, PyTorch's), the same code the
// CPU runs. Shapes and layout: format-agnostic flat loops over the physical buffer, so NCDHW and
// NDHWC are served alike and the output keeps the input's format. Parallel mapping:
// pointwise_cuda.cuh (grid-stride, 16-byte packs); memory-bound, 8 bytes per float32 element forward
// and 12 backward, half that for float16. Precision: FP32 arithmetic on widened FP16, rounded once.
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/activation/smooth_cuda.h"
#include "ops/elementwise/pointwise_cuda.cuh"

namespace halfgrad::cuda {
namespace {

const char* kind_name(smooth::Kind k) {
  switch (k) {
    case smooth::Kind::Sigmoid: return "sigmoid";
    case smooth::Kind::Tanh: return "tanh";
    case smooth::Kind::Silu: return "silu";
    case smooth::Kind::Gelu: case smooth::Kind::GeluTanh: return "gelu";
  }
  return "smooth activation";
}

struct ForwardFn {
  smooth::Kind kind;
  __device__ float operator()(float v) const { return smooth::forward<float>(kind, v); }
};
struct BackwardFn {
  smooth::Kind kind;
  __device__ float operator()(float g, float s) const { return smooth::backward<float>(kind, g, s); }
};

}  // namespace

Tensor smooth_forward(smooth::Kind kind, const Tensor& x) {
  const char* op = kind_name(kind);
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  dispatch_float(op, "activations", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pointwise::launch_unary(op, dev<T>(x), dev<T>(y), x.numel(), ForwardFn{kind});
  });
  return y;
}

Tensor smooth_backward(smooth::Kind kind, const Tensor& gy, const Tensor& saved) {
  const char* op = kind_name(kind);
  HG_CHECK(gy.defined() && gy.is_cuda() && saved.is_cuda(), op << ": backward needs CUDA tensors");
  HG_CHECK(gy.shape() == saved.shape(), op << ": gradient " << shape_str(gy.shape()) << " for an output of shape "
                                           << shape_str(saved.shape()));
  const Tensor g = (gy.dtype() == saved.dtype() ? gy : gy.cast_copy(saved.dtype())).format_copy(saved.memory_format());
  Tensor dx = Tensor::empty(saved.shape(), saved.dtype(), Device::CUDA, saved.memory_format());
  dispatch_float(op, "activations", saved.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pointwise::launch_binary(op, dev<T>(g), dev<T>(saved), dev<T>(dx), saved.numel(), BackwardFn{kind});
  });
  return dx;
}

}  // namespace halfgrad::cuda
