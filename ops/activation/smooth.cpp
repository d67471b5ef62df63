// smooth.cpp - sigmoid, tanh, silu and gelu on the CPU and their dispatch to CUDA (math, sources and
// errors in smooth.h; the scalar formulas in smooth_math.h, shared with smooth_cuda.cu).
// One parallel vectorisable loop in float (Float32; Float16 through an FP32 copy, rounded once) or
// double (Float64). sigmoid and tanh save their output, silu and gelu their input, as PyTorch does.
#include "ops/activation/smooth.h"

#include "autocast/autocast.h"
#include "core/nvtx.h"
#include "ops/activation/pointwise_cpu.h"
#include "ops/activation/smooth_math.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/activation/smooth_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

Tensor backward_of(smooth::Kind kind, const Tensor& gy, const Tensor& saved) {
#ifdef HALFGRAD_CUDA
  if (saved.is_cuda()) return cuda::smooth_backward(kind, gy, saved);
#endif
  return dispatch_compute(saved.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return detail::masked_grad<T>(gy, saved, [kind](T g, T s) { return smooth::backward<T>(kind, g, s); });
  });
}

Tensor smooth_op(const char* name, amp::OpKind op_kind, smooth::Kind kind, const Tensor& x_in) {
  NvtxRange nvtx_range(name);
  check_floating_tensor(name, "input", x_in);
  // On no autocast list (the input's dtype), unless --fp32-op / amp::set_op_fp32 moved the op to FP32.
  const Tensor x = x_in.to(amp::autocast_dtype(op_kind, {x_in.dtype()}));
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::smooth_forward(kind, x);
#endif
  if (!y.defined())
    y = dispatch_compute(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return detail::map_in_dtype<T>(x, [kind](T v) { return smooth::forward<T>(kind, v); });
    });
  if (smooth::saves_output(kind))
    return autograd::record(name, y, {x}, {autograd::Save::output()}, [kind, y = y.detach()](const Tensor& gy) {
      return std::vector<Tensor>{backward_of(kind, gy, y)};
    });
  return autograd::record(name, y, {x}, {autograd::Save::input(0, "input")}, [kind, x = x.detach()](const Tensor& gy) {
    return std::vector<Tensor>{backward_of(kind, gy, x)};
  });
}

}  // namespace

Tensor sigmoid(const Tensor& x) { return smooth_op("sigmoid", amp::OpKind::Sigmoid, smooth::Kind::Sigmoid, x); }
Tensor tanh(const Tensor& x) { return smooth_op("tanh", amp::OpKind::Tanh, smooth::Kind::Tanh, x); }
Tensor silu(const Tensor& x) { return smooth_op("silu", amp::OpKind::Silu, smooth::Kind::Silu, x); }
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  return smooth_op("gelu", amp::OpKind::Gelu,
                   approximate == GeluApproximate::Tanh ? smooth::Kind::GeluTanh : smooth::Kind::Gelu, x);
}

}  // namespace halfgrad::ops
