// elementwise.h - pointwise arithmetic with NumPy/PyTorch broadcasting.
//
// Binary ops take two tensors whose shapes broadcast (aligned from the right, each extent equal or 1;
// a bias of shape (C, 1, 1, 1) against (N, C, D, H, W), or a 0-d scalar). The output has the
// broadcast shape and the promoted dtype (promote_types: f16, bf16 < f32 < f64, and f16 with bf16
// gives f32; under autocast: the "promote" list).
//   add: y = a + b      da = sum_to(dy, a)        db = sum_to(dy, b)
//   sub: y = a - b      da = sum_to(dy, a)        db = -sum_to(dy, b)
//   mul: y = a * b      da = sum_to(dy * b, a)    db = sum_to(dy * a, b)
//   div: y = a / b      da = sum_to(dy / b, a)    db = -sum_to(dy * a / b^2, b)
// where sum_to(g, t) sums g over the dimensions that were broadcast for t.
// Errors: halfgrad::Error naming the op and both shapes when they do not broadcast.
#pragma once
#include "core/tensor.h"

namespace halfgrad::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

/// y = a * x + b elementwise with double scalars (dtype of x kept). dx = a * dy.
Tensor affine(const Tensor& x, double a, double b);
Tensor neg(const Tensor& x);
/// Elementwise exp / log, on autocast's FP32 list. dx = dy * y  /  dx = dy / x.
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
/// x^p for a scalar exponent (FP32 list). dx = dy * p * x^(p-1); for p = 0, dx = 0 (PyTorch's pow_backward).
Tensor pow(const Tensor& x, double p);

/// The shape two shapes broadcast to; throws naming `op` and both shapes if they do not.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
/// Sum g over broadcast dimensions so that it has `shape` (not recorded on the tape).
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace halfgrad::ops

namespace halfgrad {
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator+(const Tensor& x, double s) { return ops::affine(x, 1.0, s); }
inline Tensor operator+(double s, const Tensor& x) { return ops::affine(x, 1.0, s); }
inline Tensor operator-(const Tensor& x, double s) { return ops::affine(x, 1.0, -s); }
inline Tensor operator-(double s, const Tensor& x) { return ops::affine(x, -1.0, s); }
inline Tensor operator*(const Tensor& x, double s) { return ops::affine(x, s, 0.0); }
inline Tensor operator*(double s, const Tensor& x) { return ops::affine(x, s, 0.0); }
inline Tensor operator/(const Tensor& x, double s) { return ops::affine(x, 1.0 / s, 0.0); }
inline Tensor operator-(const Tensor& x) { return ops::neg(x); }
}  // namespace halfgrad
