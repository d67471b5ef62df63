// elementwise_loss_math.h - the per-element math of ops/loss/elementwise_loss.h, shared by the CPU
// loop and the CUDA kernel (HALFGRAD_HD is __host__ __device__ under nvcc). T is float (FP32, and
// FP16 widened) or double. pw is BCE's positive-class weight (1 when absent); the other losses ignore it.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace halfgrad::elementwise_loss {

#ifndef __CUDACC__
using std::exp;  // float and double overloads on the host; nvcc provides both for device code
using std::fabs;
using std::log1p;
#endif

enum class Kind : uint8_t { Mse, L1, BceWithLogits };

/// softplus(-x) = log(1 + exp(-x)) = max(-x, 0) + log1p(exp(-|x|)): no overflow for any x; a NaN stays
/// NaN (the comparison is written so that max(-NaN, 0) does not return 0).
template <typename T>
HALFGRAD_HD inline T softplus_neg(T x) { return (-x > T(0) ? -x : T(0)) + log1p(exp(-fabs(x))); }

template <typename T>
HALFGRAD_HD inline T sigmoid_of(T x) { return T(1) / (T(1) + exp(-x)); }

/// sign(d): -1, 0 or 1, and NaN for NaN: l1_loss's backward (PyTorch's sgn(x - t)). Where PyTorch 1.13's
/// CPU kernel gives sign(NaN) = 0, a zero gradient for a NaN input, halfgrad keeps the NaN, so that a
/// NaN never becomes a plausible gradient (tests/ops/nonfinite_test.cpp, l1_loss cases).
template <typename T>
HALFGRAD_HD inline T sign_of(T d) { return d > T(0) ? T(1) : d < T(0) ? T(-1) : d == T(0) ? T(0) : d; }

/// The element's loss l(x, t).
template <typename T>
HALFGRAD_HD inline T forward(Kind k, T x, T t, T pw) {
  switch (k) {
    case Kind::Mse: return (x - t) * (x - t);
    case Kind::L1: return fabs(x - t);
    case Kind::BceWithLogits: return (T(1) - t) * x + (T(1) + (pw - T(1)) * t) * softplus_neg(x);
  }
  return T(0);
}

/// dl/dx. BCE: (1 + (pw - 1) t) sigmoid(x) - pw t (PyTorch's binary_cross_entropy_with_logits_backward).
template <typename T>
HALFGRAD_HD inline T grad_input(Kind k, T x, T t, T pw) {
  switch (k) {
    case Kind::Mse: return T(2) * (x - t);
    case Kind::L1: return sign_of(x - t);
    case Kind::BceWithLogits: return (T(1) + (pw - T(1)) * t) * sigmoid_of(x) - pw * t;
  }
  return T(0);
}

/// dl/dt. BCE: (pw - 1) softplus(-x) - x, and -x when pw is 1 (PyTorch's target backward without a
/// pos_weight is -x: so a logit of -inf gives +inf, not 0 * inf = NaN).
template <typename T>
HALFGRAD_HD inline T grad_target(Kind k, T x, T t, T pw) {
  switch (k) {
    case Kind::Mse: return T(-2) * (x - t);
    case Kind::L1: return -sign_of(x - t);
    case Kind::BceWithLogits: return (pw == T(1) ? T(0) : (pw - T(1)) * softplus_neg(x)) - x;
  }
  return T(0);
}

}  // namespace halfgrad::elementwise_loss
