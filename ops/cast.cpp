// cast.cpp - the differentiable dtype conversion, Tensor::to(dtype).
//   forward:  y = round_to(dtype, x)      (half: round to nearest even, >= 65520 -> inf)
//   backward: dx = convert(dy, x.dtype)   (the cast's Jacobian is the identity)
// Under autocast the FP16 copies of FP32 weights are made by this op, so the weights' gradients come
// back through it in FP32 (the master copy's dtype).
#include "ops/common.h"

namespace halfgrad {

Tensor Tensor::to(Dtype d) const {
  ops::check_input("to", "input", *this);
  if (dtype() == d) return *this;
  HG_CHECK(is_floating(d) || !requires_grad(), "to: cannot cast a tensor that requires grad to " << dtype_name(d));
  Tensor y = cast_copy(d);
  const Dtype src = dtype();
  return autograd::record("to", y, {*this}, [src](const Tensor& gy) -> std::vector<Tensor> {
    return {gy.cast_copy(src)};
  });
}

}  // namespace halfgrad
