// elementwise_loss.cpp - mse_loss, l1_loss and binary_cross_entropy_with_logits (math, shapes and
// errors in elementwise_loss.h). Each is one per-element op, l = f(x, t, pw) with its own backward
// (dx = dl * df/dx, dt = dl * df/dt; the per-element math in elementwise_loss_math.h, shared with
// elementwise_loss_cuda.cu), followed by ops::mul for the weight and ops::sum / ops::mean for the
// reduction, so the reductions are the reduce ops' (deterministic, FP32 under autocast).
// CPU: one parallel loop in float (Float32; Float16 through FP32 copies, rounded once) or double.
#include "ops/loss/elementwise_loss.h"

#include "autocast/autocast.h"
#include "core/nvtx.h"
#include "ops/common.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/elementwise_loss_math.h"
#include "ops/reduce/reduce.h"
#ifdef HALFGRAD_CUDA
#include "ops/loss/elementwise_loss_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

using elementwise_loss::Kind;

// The per-element loss on the CPU: l (x's shape, x's dtype).
Tensor per_element_cpu(Kind k, const Tensor& x, const Tensor& t, const Tensor& pw) {
  Tensor cx = to_compute(x), ct = to_compute(t), cp = pw.defined() ? to_compute(pw) : Tensor();
  Tensor l = Tensor::empty(x.shape(), compute_dtype(x.dtype()));
  const int64_t n = x.numel();
  dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *px = cx.data<T>(), *pt = ct.data<T>(), *pp = cp.defined() ? cp.data<T>() : nullptr;
    T* pl = l.data<T>();
#pragma omp parallel for schedule(static) if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) pl[i] = elementwise_loss::forward<T>(k, px[i], pt[i], pp ? pp[i] : T(1));
  });
  return from_compute(l, x.dtype());
}

std::vector<Tensor> per_element_backward_cpu(Kind k, const Tensor& gy, const Tensor& x, const Tensor& t,
                                             const Tensor& pw, bool need_x, bool need_t) {
  Tensor cg = to_compute(gy.dtype() == x.dtype() ? gy : gy.cast_copy(x.dtype()));
  Tensor cx = to_compute(x), ct = to_compute(t), cp = pw.defined() ? to_compute(pw) : Tensor();
  const Dtype cd = compute_dtype(x.dtype());
  Tensor dx = need_x ? Tensor::empty(x.shape(), cd) : Tensor(), dt = need_t ? Tensor::empty(x.shape(), cd) : Tensor();
  const int64_t n = x.numel();
  dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *pg = cg.data<T>(), *px = cx.data<T>(), *pt = ct.data<T>(), *pp = cp.defined() ? cp.data<T>() : nullptr;
    T* pdx = need_x ? dx.data<T>() : nullptr;
    T* pdt = need_t ? dt.data<T>() : nullptr;
#pragma omp parallel for schedule(static) if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) {
      const T p = pp ? pp[i] : T(1);
      if (pdx) pdx[i] = pg[i] * elementwise_loss::grad_input<T>(k, px[i], pt[i], p);
      if (pdt) pdt[i] = pg[i] * elementwise_loss::grad_target<T>(k, px[i], pt[i], p);
    }
  });
  return {need_x ? from_compute(dx, x.dtype()) : Tensor(), need_t ? from_compute(dt, x.dtype()) : Tensor()};
}

// l = f(x, t, pw) per element, recorded with its backward to x and t (pw is a constant).
Tensor per_element(const char* op, Kind k, const Tensor& x, const Tensor& t, const Tensor& pw) {
  Tensor l;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) l = cuda::elementwise_loss_forward(k, x, t, pw);
#endif
  if (!l.defined()) l = per_element_cpu(k, x, t, pw);
  return autograd::record(op, l, {x, t}, {autograd::Save::input(0, "input"), autograd::Save::input(1, "target")},
                          [k, x = x.detach(), t = t.detach(), pw, need_x = x.requires_grad(),
                           need_t = t.requires_grad()](const Tensor& gy) -> std::vector<Tensor> {
#ifdef HALFGRAD_CUDA
                            if (x.is_cuda()) {
                              const Tensor g = (gy.dtype() == x.dtype() ? gy : gy.cast_copy(x.dtype()))
                                                   .format_copy(x.memory_format());
                              cuda::ElementwiseLossGrads r = cuda::elementwise_loss_backward(k, g, x, t, pw, need_x, need_t);
                              return {r.dx, r.dt};
                            }
#endif
                            return per_element_backward_cpu(k, gy, x, t, pw, need_x, need_t);
                          });
}

// `what` (weight or pos_weight) must broadcast to input's shape.
void check_broadcasts_to(const char* op, const char* what, const Tensor& w, const Tensor& x) {
  check_floating_tensor(op, what, w);
  check_same_device(op, "input", x, what, w);
  bool ok = w.dim() <= x.dim();
  for (int64_t i = 1; ok && i <= w.dim(); ++i) ok = w.size(-i) == 1 || w.size(-i) == x.size(-i);
  HG_CHECK(ok, op << ": " << what << " " << shape_str(w.shape()) << " must broadcast to input's shape "
                  << shape_str(x.shape()) << " (each trailing dim equal or 1)");
}

Tensor loss_op(const char* op, amp::OpKind op_kind, Kind k, const Tensor& input, const Tensor& target,
               const Tensor& weight, const Tensor& pos_weight, Reduction reduction) {
  NvtxRange nvtx_range(op);
  check_floating_tensor(op, "input", input);
  check_floating_tensor(op, "target", target);
  check_same_device(op, "input", input, "target", target);
  HG_CHECK(target.shape() == input.shape(), op << ": target " << shape_str(target.shape())
                                               << " must have the input's shape " << shape_str(input.shape()));
  if (weight.defined()) check_broadcasts_to(op, "weight", weight, input);
  if (pos_weight.defined()) {
    check_broadcasts_to(op, "pos_weight", pos_weight, input);
    HG_CHECK(!pos_weight.requires_grad(), op << ": pos_weight requires grad, but its gradient is not implemented "
                                                "(pass pos_weight.detach())");
  }
  // The FP32 list casts the input (CastInputs::First); the target joins the input's dtype, or a wider one.
  const Dtype dt = promote_types(amp::autocast_dtype(op_kind, {input.dtype()}), target.dtype());
  const Tensor x = autocast_cast(input, dt);
  const Tensor t = target.to(dt).to(x.memory_format());
  Tensor pw;
  if (pos_weight.defined()) {  // a constant: expanded to x's shape and format off the tape
    autograd::NoGradGuard no_grad;
    pw = add(Tensor::zeros(x.shape(), dt, x.device(), x.memory_format()), pos_weight.detach().to(dt))
             .format_copy(x.memory_format());
  }
  Tensor l = per_element(op, k, x, t, pw);
  if (weight.defined()) l = mul(l, weight.to(dt));
  switch (reduction) {
    case Reduction::None: return l;
    case Reduction::Sum: return sum(l);
    case Reduction::Mean: return mean(l);
  }
  return l;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return loss_op("mse_loss", amp::OpKind::MseLoss, Kind::Mse, input, target, Tensor(), Tensor(), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return loss_op("l1_loss", amp::OpKind::L1Loss, Kind::L1, input, target, Tensor(), Tensor(), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  return loss_op("binary_cross_entropy_with_logits", amp::OpKind::BinaryCrossEntropyWithLogits, Kind::BceWithLogits,
                 input, target, weight, pos_weight, reduction);
}

}  // namespace halfgrad::ops
