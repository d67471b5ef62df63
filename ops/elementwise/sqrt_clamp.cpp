// sqrt_clamp.cpp - sqrt and clamp on the CPU and their dispatch to CUDA (math, sources and errors in
// sqrt_clamp.h; the scalar formulas in sqrt_clamp_math.h, shared with sqrt_clamp_cuda.cu). One
// parallel vectorisable loop in float (Float32; Float16 through an FP32 copy, rounded once) or double
// (Float64), the loops of ops/activation/pointwise_cpu.h. sqrt saves its output, clamp its input, as
// PyTorch does.
#include "ops/elementwise/sqrt_clamp.h"

#include "autocast/autocast.h"
#include "core/nvtx.h"
#include "ops/activation/pointwise_cpu.h"
#include "ops/common.h"
#include "ops/elementwise/sqrt_clamp_math.h"
#ifdef HALFGRAD_CUDA
#include "ops/elementwise/sqrt_clamp_cuda.h"
#endif

namespace halfgrad::ops {

Tensor sqrt(const Tensor& x_in) {
  NvtxRange nvtx_range("sqrt");
  check_floating_tensor("sqrt", "input", x_in);
  // On no autocast list (the input's dtype), unless --fp32-op / amp::set_op_fp32 moved it to FP32.
  const Tensor x = x_in.to(amp::autocast_dtype(amp::OpKind::Sqrt, {x_in.dtype()}));
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::sqrt_forward(x);
#endif
  if (!y.defined())
    y = dispatch_compute(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return detail::map_in_dtype<T>(x, [](T v) { return sqrt_clamp::sqrt_forward<T>(v); });
    });
  return autograd::record("sqrt", y, {x}, {autograd::Save::output()}, [y = y.detach()](const Tensor& gy) {
#ifdef HALFGRAD_CUDA
    if (y.is_cuda()) return std::vector<Tensor>{cuda::sqrt_backward(gy, y)};
#endif
    return std::vector<Tensor>{dispatch_compute(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return detail::masked_grad<T>(gy, y, [](T g, T s) { return sqrt_clamp::sqrt_backward<T>(g, s); });
    })};
  });
}

Tensor clamp(const Tensor& x_in, std::optional<double> min, std::optional<double> max) {
  NvtxRange nvtx_range("clamp");
  check_floating_tensor("clamp", "input", x_in);
  HG_CHECK(min || max, "clamp: at least one of min or max must be given (as torch.clamp)");
  sqrt_clamp::ClampBounds b;
  b.has_lo = min.has_value();
  b.has_hi = max.has_value();
  b.lo = min.value_or(0.0);
  b.hi = max.value_or(0.0);
  const Tensor x = x_in.to(amp::autocast_dtype(amp::OpKind::Clamp, {x_in.dtype()}));
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::clamp_forward(x, b);
#endif
  if (!y.defined())
    y = dispatch_compute(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return detail::map_in_dtype<T>(x, [b](T v) { return sqrt_clamp::clamp_forward<T>(v, b); });
    });
  return autograd::record("clamp", y, {x}, {autograd::Save::input(0, "input")}, [b, x = x.detach()](const Tensor& gy) {
#ifdef HALFGRAD_CUDA
    if (x.is_cuda()) return std::vector<Tensor>{cuda::clamp_backward(gy, x, b)};
#endif
    return std::vector<Tensor>{dispatch_compute(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return detail::masked_grad<T>(gy, x, [b](T g, T s) { return sqrt_clamp::clamp_backward<T>(g, s, b); });
    })};
  });
}

}  // namespace halfgrad::ops
