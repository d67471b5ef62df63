// elementwise.cpp - pointwise arithmetic (math and errors in elementwise.h): public ops, their
// backward closures and the CPU loops; CUDA tensors go to the launchers of elementwise_cuda.h
// (broadcast in place, either memory format) and sum_to_shape to reduce_cuda.h's FP32 reduction.
#include "ops/elementwise/elementwise.h"

#include <cmath>

#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/reduce/reduce_cuda.h"
#endif

namespace halfgrad::ops {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ea = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t eb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    HG_CHECK(ea == eb || ea == 1 || eb == 1, op << ": shapes " << shape_str(a) << " and " << shape_str(b)
                                                << " do not broadcast (dimension " << i << ": " << ea << " vs " << eb
                                                << ")");
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

namespace {

// Strides (in elements) of `s` seen through the broadcast shape `out`: 0 along broadcast dimensions.
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    const size_t o = out.size() - s.size() + i;
    st[o] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
}

// y[i] = f(a[ia(i)], b[ib(i)]) over the broadcast shape.
template <typename T, typename F>
void binary_loop(const T* a, const Shape& sa, const T* b, const Shape& sb, T* y, const Shape& so, F f) {
  const int64_t n = shape_numel(so);
  if (sa == so && sb == so) {
#pragma omp parallel for if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
    return;
  }
  if (sb.empty() || shape_numel(sb) == 1) {
    if (sa == so) {
      const T bv = b[0];
#pragma omp parallel for if (parallel_worth(n))
      for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
      return;
    }
  }
  const auto st_a = broadcast_strides(sa, so), st_b = broadcast_strides(sb, so);
  const int64_t nd = static_cast<int64_t>(so.size());
#pragma omp parallel for if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, ia = 0, ib = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t c = rem % so[d];
      rem /= so[d];
      ia += c * st_a[d];
      ib += c * st_b[d];
    }
    y[i] = f(a[ia], b[ib]);
  }
}

enum class BinOp { Add, Sub, Mul, Div };

#ifdef HALFGRAD_CUDA
cuda::BinaryOp cuda_binary_op(BinOp op) {
  switch (op) {
    case BinOp::Add: return cuda::BinaryOp::Add;
    case BinOp::Sub: return cuda::BinaryOp::Sub;
    case BinOp::Mul: return cuda::BinaryOp::Mul;
    case BinOp::Div: return cuda::BinaryOp::Div;
  }
  return cuda::BinaryOp::Add;
}
#endif

Tensor binary_forward(const char* name, BinOp op, const Tensor& a, const Tensor& b, Dtype dt) {
  const Shape so = broadcast_shapes(name, a.shape(), b.shape());
#ifdef HALFGRAD_CUDA
  if (a.is_cuda() || b.is_cuda()) {
    check_same_device(name, "first operand", a, "second operand", b);
    return cuda::binary(name, cuda_binary_op(op), a.dtype() == dt ? a : a.cast_copy(dt),
                        b.dtype() == dt ? b : b.cast_copy(dt), so);
  }
#endif
  Tensor ca = to_compute(a.dtype() == dt ? a : a.cast_copy(dt));
  Tensor cb = to_compute(b.dtype() == dt ? b : b.cast_copy(dt));
  Tensor y = Tensor::empty(so, compute_dtype(dt));
  dispatch_compute(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = ca.data<T>();
    const T* pb = cb.data<T>();
    T* py = y.data<T>();
    switch (op) {
      case BinOp::Add: binary_loop(pa, ca.shape(), pb, cb.shape(), py, so, [](T u, T v) { return u + v; }); break;
      case BinOp::Sub: binary_loop(pa, ca.shape(), pb, cb.shape(), py, so, [](T u, T v) { return u - v; }); break;
      case BinOp::Mul: binary_loop(pa, ca.shape(), pb, cb.shape(), py, so, [](T u, T v) { return u * v; }); break;
      case BinOp::Div: binary_loop(pa, ca.shape(), pb, cb.shape(), py, so, [](T u, T v) { return u / v; }); break;
    }
  });
  return from_compute(y, dt);
}

Dtype binary_dtype(const char* name, amp::OpKind kind, const Tensor& a, const Tensor& b) {
  check_floating_tensor(name, "first operand", a);
  check_floating_tensor(name, "second operand", b);
  check_same_device(name, "first operand", a, "second operand", b);
  return amp::autocast_dtype(kind, {a.dtype(), b.dtype()});
}

// Gradient w.r.t. an operand: sum over its broadcast dims, in the operand's dtype.
// What a binary op's backward needs of an operand it does not read: its shape and dtype (capturing
// the operand itself would keep its buffer alive until backward; autograd/node.h).
struct OperandMeta {
  Shape shape;
  Dtype dtype;
  explicit OperandMeta(const Tensor& t) : shape(t.shape()), dtype(t.dtype()) {}
};

Tensor grad_for(const Tensor& g, const OperandMeta& operand) {
  Tensor r = sum_to_shape(g, operand.shape);
  return r.dtype() == operand.dtype ? r : r.cast_copy(operand.dtype);
}

template <typename F>
Tensor unary_map(const Tensor& x, Dtype out, F f) {
  Tensor cx = to_compute(x);
  Tensor y = Tensor::empty(x.shape(), compute_dtype(out));
  const int64_t n = x.numel();
  dispatch_compute(out, [&](auto tag) {
    using T = decltype(tag);
    Tensor cxx = cx.dtype() == y.dtype() ? cx : cx.cast_copy(y.dtype());
    const T* px = cxx.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
  });
  return from_compute(y, out);
}

}  // namespace

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  HG_CHECK(shape_numel(shape) <= g.numel(), "sum_to_shape: cannot reduce " << shape_str(g.shape()) << " to "
                                                                         << shape_str(shape));
#ifdef HALFGRAD_CUDA
  if (g.is_cuda()) {
    // Reduce (FP32 accumulation) over the leading dims g has beyond `shape` and the dims `shape` has as 1.
    const Shape& so = g.shape();
    const int64_t lead = static_cast<int64_t>(so.size()) - static_cast<int64_t>(shape.size());
    HG_CHECK(lead >= 0, "sum_to_shape: cannot reduce " << shape_str(so) << " to " << shape_str(shape));
    std::vector<bool> mask(so.size(), false);
    for (int64_t d = 0; d < static_cast<int64_t>(so.size()); ++d) {
      const int64_t t = d < lead ? 1 : shape[d - lead];
      HG_CHECK(t == so[d] || t == 1, "sum_to_shape: cannot reduce " << shape_str(so) << " to " << shape_str(shape));
      mask[d] = t == 1 && so[d] != 1;
    }
    return cuda::sum_dims("sum_to_shape", g, mask, 1.0, g.dtype()).view_as_shape(shape);
  }
#endif
  const Shape so = g.shape();
  Tensor cg = to_compute(g);
  const auto st = broadcast_strides(shape, so);
  const int64_t nd = static_cast<int64_t>(so.size());
  const int64_t n = g.numel();
  std::vector<double> acc(shape_numel(shape), 0.0);  // FP64 accumulation: exact enough for every dtype
  dispatch_compute(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = cg.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, io = 0;
      for (int64_t d = nd - 1; d >= 0; --d) {
        const int64_t c = rem % so[d];
        rem /= so[d];
        io += c * st[d];
      }
      acc[io] += pg[i];
    }
  });
  return Tensor::from_vector(acc, shape, g.dtype());
}

Tensor add(const Tensor& a, const Tensor& b) {
  const Dtype dt = binary_dtype("add", amp::OpKind::Add, a, b);
  Tensor y = binary_forward("add", BinOp::Add, a, b, dt);
  return autograd::record("add", y, {a, b}, {}, [ma = OperandMeta(a), mb = OperandMeta(b)](const Tensor& gy) -> std::vector<Tensor> {
    return {grad_for(gy, ma), grad_for(gy, mb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  const Dtype dt = binary_dtype("sub", amp::OpKind::Sub, a, b);
  Tensor y = binary_forward("sub", BinOp::Sub, a, b, dt);
  return autograd::record("sub", y, {a, b}, {}, [ma = OperandMeta(a), mb = OperandMeta(b)](const Tensor& gy) -> std::vector<Tensor> {
    return {grad_for(gy, ma), grad_for(neg(gy), mb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  const Dtype dt = binary_dtype("mul", amp::OpKind::Mul, a, b);
  Tensor y = binary_forward("mul", BinOp::Mul, a, b, dt);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return autograd::record("mul", y, {a, b}, {autograd::Save::input(0, "a", gb), autograd::Save::input(1, "b", ga)},
                          // Each operand is kept only if the other one's gradient reads it.
                          [a = gb ? a.detach() : Tensor(), b = ga ? b.detach() : Tensor(), ma = OperandMeta(a),
                           mb = OperandMeta(b), ga, gb, dt](const Tensor& gy) -> std::vector<Tensor> {
                            NoGradGuard ng;
                            Tensor da, db;
                            if (ga) da = grad_for(binary_forward("mul", BinOp::Mul, gy, b, dt), ma);
                            if (gb) db = grad_for(binary_forward("mul", BinOp::Mul, gy, a, dt), mb);
                            return {da, db};
                          });
}

Tensor div(const Tensor& a, const Tensor& b) {
  const Dtype dt = binary_dtype("div", amp::OpKind::Div, a, b);
  Tensor y = binary_forward("div", BinOp::Div, a, b, dt);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return autograd::record(
      "div", y, {a, b}, {autograd::Save::input(1, "b"), autograd::Save::output(gb)}, [ma = OperandMeta(a), mb = OperandMeta(b), b = b.detach(), y = gb ? y.detach() : Tensor(), ga, gb, dt](const Tensor& gy) -> std::vector<Tensor> {
        Tensor da, db;
        Tensor q = binary_forward("div", BinOp::Div, gy, b, dt);  // dy / b
        if (ga) da = grad_for(q, ma);
        if (gb) db = grad_for(affine(binary_forward("mul", BinOp::Mul, q, y, dt), -1.0, 0.0), mb);  // -dy*a/b^2
        return {da, db};
      });
}

Tensor affine(const Tensor& x, double a, double b) {
  check_floating_tensor("affine", "input", x);
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::unary("affine", x, x.dtype(), {cuda::UnaryOp::Affine, a, b, 1.0});
#endif
  if (!y.defined()) y = dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T ta = static_cast<T>(a), tb = static_cast<T>(b);
    return unary_map(x, x.dtype(), [ta, tb](T v) { return ta * v + tb; });
  });
  return autograd::record("affine", y, {x}, {}, [a](const Tensor& gy) -> std::vector<Tensor> {
    NoGradGuard ng;
    return {affine(gy, a, 0.0)};
  });
}

Tensor neg(const Tensor& x) { return affine(x, -1.0, 0.0); }

Tensor exp(const Tensor& x) {
  check_floating_tensor("exp", "input", x);
  const Dtype dt = amp::autocast_dtype(amp::OpKind::Exp, {x.dtype()});
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::unary("exp", x, dt, {cuda::UnaryOp::Exp});
#endif
  if (!y.defined()) y = dispatch_compute(dt, [&](auto tag) {
    using T = decltype(tag);
    return unary_map(x, dt, [](T v) { return std::exp(v); });
  });
  return autograd::record("exp", y, {x}, {autograd::Save::output()}, [y = y.detach(), xd = x.dtype()](const Tensor& gy) -> std::vector<Tensor> {
    NoGradGuard ng;
    Tensor g = binary_forward("exp", BinOp::Mul, gy, y, y.dtype());
    return {g.dtype() == xd ? g : g.cast_copy(xd)};
  });
}

Tensor log(const Tensor& x) {
  check_floating_tensor("log", "input", x);
  const Dtype dt = amp::autocast_dtype(amp::OpKind::Log, {x.dtype()});
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::unary("log", x, dt, {cuda::UnaryOp::Log});
#endif
  if (!y.defined()) y = dispatch_compute(dt, [&](auto tag) {
    using T = decltype(tag);
    return unary_map(x, dt, [](T v) { return std::log(v); });
  });
  return autograd::record("log", y, {x}, {autograd::Save::input(0, "input")}, [x = x.detach(), dt](const Tensor& gy) -> std::vector<Tensor> {
    Tensor g = binary_forward("log", BinOp::Div, gy, x, dt);
    return {g.dtype() == x.dtype() ? g : g.cast_copy(x.dtype())};
  });
}

Tensor pow(const Tensor& x, double p) {
  check_floating_tensor("pow", "input", x);
  const Dtype dt = amp::autocast_dtype(amp::OpKind::Pow, {x.dtype()});
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::unary("pow", x, dt, {cuda::UnaryOp::Pow, 1.0, 0.0, p});
#endif
  if (!y.defined()) y = dispatch_compute(dt, [&](auto tag) {
    using T = decltype(tag);
    return unary_map(x, dt, [p](T v) { return static_cast<T>(std::pow(v, static_cast<T>(p))); });
  });
  return autograd::record("pow", y, {x}, {autograd::Save::input(0, "input")}, [x = x.detach(), p, dt](const Tensor& gy) -> std::vector<Tensor> {
    // x^0 is constant: dx = 0 exactly, even where p * x^(p-1) = 0 * inf (x = 0) or dy is NaN/inf, as
    // PyTorch's pow_backward (which returns zeros for exponent 0).
    if (p == 0.0) return {Tensor::zeros(x.shape(), x.dtype(), x.device(), x.memory_format())};
    Tensor d;
#ifdef HALFGRAD_CUDA
    if (x.is_cuda()) d = cuda::unary("pow", x, dt, {cuda::UnaryOp::PowGrad, 1.0, 0.0, p});
#endif
    if (!d.defined()) d = dispatch_compute(dt, [&](auto tag) {
      using T = decltype(tag);
      return unary_map(x, dt, [p](T v) { return static_cast<T>(p * std::pow(v, static_cast<T>(p - 1))); });
    });
    Tensor g = binary_forward("pow", BinOp::Mul, gy, d, dt);
    return {g.dtype() == x.dtype() ? g : g.cast_copy(x.dtype())};
  });
}

}  // namespace halfgrad::ops
