// smooth_math.h - the scalar math of ops/activation/smooth.h, shared by the CPU loops and the CUDA
// kernels (HALFGRAD_HD is __host__ __device__ under nvcc), so both compute the same formulas.
// T is float (FP32, and FP16 widened) or double.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace halfgrad::smooth {

#ifndef __CUDACC__
using std::erf;  // float and double overloads on the host; nvcc provides both for device code
using std::exp;
using std::tanh;
#endif

enum class Kind : uint8_t { Sigmoid, Tanh, Silu, Gelu, GeluTanh };

/// Whether the backward reads the forward's output (sigmoid, tanh) rather than its input.
constexpr bool saves_output(Kind k) { return k == Kind::Sigmoid || k == Kind::Tanh; }

template <typename T>
HALFGRAD_HD inline T sigmoid_of(T x) { return T(1) / (T(1) + exp(-x)); }

template <typename T>
HALFGRAD_HD inline T forward(Kind k, T x) {
  switch (k) {
    case Kind::Sigmoid: return sigmoid_of(x);
    case Kind::Tanh: return tanh(x);
    case Kind::Silu: return x * sigmoid_of(x);
    case Kind::Gelu: return x * T(0.5) * (T(1) + erf(x * T(M_SQRT1_2)));
    case Kind::GeluTanh: {
      const T k_beta = T(M_SQRT2 * M_2_SQRTPI * 0.5), k_kappa = T(0.044715);
      return T(0.5) * x * (T(1) + tanh(k_beta * (x + k_kappa * x * x * x)));
    }
  }
  return x;
}

/// dx for the cotangent g, given s = the saved tensor's value (y for sigmoid/tanh, x otherwise).
template <typename T>
HALFGRAD_HD inline T backward(Kind k, T g, T s) {
  switch (k) {
    case Kind::Sigmoid: return g * (T(1) - s) * s;  // PyTorch: dy * (1 - y) * y
    case Kind::Tanh: return g * (T(1) - s * s);
    case Kind::Silu: {
      const T sg = sigmoid_of(s);
      return g * sg * (T(1) + s * (T(1) - sg));
    }
    case Kind::Gelu: {
      const T k_alpha = T(M_SQRT1_2), k_beta = T(M_2_SQRTPI * M_SQRT1_2 * 0.5);
      const T cdf = T(0.5) * (T(1) + erf(s * k_alpha));
      const T pdf = k_beta * exp(s * s * T(-0.5));
      return g * (cdf + s * pdf);
    }
    case Kind::GeluTanh: {
      const T k_beta = T(M_SQRT2 * M_2_SQRTPI * 0.5), k_kappa = T(0.044715);
      const T x_sq = s * s, inner = k_beta * (s + k_kappa * x_sq * s), t = tanh(inner);
      const T left = T(0.5) * s, right = T(1) + t;
      const T left_derivative = T(0.5) * right;
      const T right_derivative = left * (T(1) - t * t) * k_beta * (T(1) + T(3) * k_kappa * x_sq);
      return g * (left_derivative + right_derivative);
    }
  }
  return g;
}

}  // namespace halfgrad::smooth
