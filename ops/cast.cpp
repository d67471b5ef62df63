// cast.cpp - the differentiable conversions: Tensor::to(dtype), to(Device), to(MemoryFormat).
//   to(Device):        y = x on the other device;      dx = dy moved back.
//   to(MemoryFormat):  y = x with the other layout;    dx = dy converted back to x's layout.
//   forward:  y = round_to(dtype, x)      (half / bfloat16: round to nearest even; half: >= 65520 -> inf)
//   backward: dx = convert(dy, x.dtype)   (the cast's Jacobian is the identity)
// Under autocast the FP16 (or BF16) copies of FP32 weights are made by this op, so the weights' gradients come
// back through it in FP32 (the master copy's dtype).
//
// ops::autocast_cast is the same cast with the weight-cast cache in front (autocast/autocast.h says why the
// cache keeps only tensors and this op makes them): within one enabled autocast region an FP32 leaf
// weight is converted to the region's lower dtype (FP16 or BF16) once, and every op that reads it gets
// that one tensor.
#include "autocast/cast_stats.h"
#include "ops/common.h"

namespace halfgrad {

namespace ops {

Tensor autocast_cast(const Tensor& x, Dtype dt) {
  HG_CHECK(x.defined(), "autocast_cast: input is an undefined tensor");
  if (x.dtype() == dt) return x;
  // PyTorch's rule (cached_cast): only FP32 leaves that require grad - the model's weights - cast to
  // the lower-precision dtype. Under NoGradGuard the cast has no tape node, so caching it would give
  // a later forward with grad a weight copy that is cut off from the weight: not cached.
  const bool cacheable = amp::cast_cache_enabled() && autograd::grad_mode_enabled() &&
                         dt == amp::autocast_lower_dtype() && x.dtype() == kFloat32 && x.is_leaf() &&
                         x.requires_grad();
  if (!cacheable) return x.to(dt);
  const Tensor hit = amp::cast_cache_lookup(x, dt);
  // A backward inside the region (without retain_graph) frees the cast's node; then cast again.
  if (hit.defined() && hit.grad_fn() && !hit.grad_fn()->freed) return hit;
  Tensor y = x.to(dt);
  amp::cast_cache_insert(x, y);
  return y;
}

}  // namespace ops

Tensor Tensor::to(Dtype d) const {
  HG_CHECK(defined(), "to: input is an undefined tensor");
  if (dtype() == d) return *this;
  HG_CHECK(is_floating(d) || !requires_grad(), "to: cannot cast a tensor that requires grad to " << dtype_name(d));
  Tensor y = cast_copy(d);
  const Dtype src = dtype();
  amp::count_cast(src, d, numel());  // autocast/cast_stats.h: the precision report's cast counter
  return autograd::record("to", y, {*this}, {}, [src](const Tensor& gy) -> std::vector<Tensor> {
    if (gy.dtype() != src) amp::count_cast(gy.dtype(), src, gy.numel(), amp::CastPass::Backward);
    return {gy.cast_copy(src)};
  });
}

Tensor Tensor::to(Device dev) const {
  HG_CHECK(defined(), "to(device): input is an undefined tensor");
  if (device() == dev) return *this;
  Tensor y = copy_to(dev);
  const Device src = device();
  return autograd::record("to_device", y, {*this}, {}, [src](const Tensor& gy) -> std::vector<Tensor> {
    return {gy.copy_to(src)};
  });
}

Tensor Tensor::to(MemoryFormat f) const {
  HG_CHECK(defined(), "to(memory_format): input is an undefined tensor");
  if (memory_format() == f) return *this;
  Tensor y = format_copy(f);
  const MemoryFormat src = memory_format();
  return autograd::record("to_memory_format", y, {*this}, {}, [src](const Tensor& gy) -> std::vector<Tensor> {
    return {gy.format_copy(src)};
  });
}

}  // namespace halfgrad
