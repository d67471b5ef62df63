// sqrt_clamp_math.h - the scalar math of ops/elementwise/sqrt_clamp.h, shared by the CPU loops
// (sqrt_clamp.cpp) and the CUDA kernels (sqrt_clamp_cuda.cu), so both compute the same formulas.
// T is float (FP32, and FP16 widened) or double.
#pragma once
#include <cmath>

#include "ops/activation/smooth_math.h"  // HALFGRAD_HD

namespace halfgrad::sqrt_clamp {

#ifndef __CUDACC__
using std::sqrt;
#endif

/// y = sqrt(x): NaN for x < 0 (IEEE, as torch.sqrt).
template <typename T>
HALFGRAD_HD inline T sqrt_forward(T x) { return sqrt(x); }
/// dx = g / (2 y), PyTorch's sqrt backward (it saves the output): inf at y = 0 for g > 0.
template <typename T>
HALFGRAD_HD inline T sqrt_backward(T g, T y) { return g / (T(2) * y); }

/// The bounds of clamp; an absent bound is not applied (has_lo / has_hi false).
struct ClampBounds {
  double lo = 0, hi = 0;
  bool has_lo = false, has_hi = false;
};

/// y = min(max(x, lo), hi), each only when given; NaN stays NaN (torch.clamp). With lo > hi every
/// value becomes hi, as torch.clamp.
template <typename T>
HALFGRAD_HD inline T clamp_forward(T x, ClampBounds b) {
  if (x != x) return x;
  T y = x;
  if (b.has_lo && y < T(b.lo)) y = T(b.lo);
  if (b.has_hi && y > T(b.hi)) y = T(b.hi);
  return y;
}
/// dx = g where lo <= x <= hi (both ends included), else 0; 0 at a NaN x (PyTorch's clamp_backward:
/// where((x >= min) & (x <= max), g, 0)).
template <typename T>
HALFGRAD_HD inline T clamp_backward(T g, T x, ClampBounds b) {
  const bool pass = (!b.has_lo || x >= T(b.lo)) && (!b.has_hi || x <= T(b.hi)) && x == x;
  return pass ? g : T(0);
}

}  // namespace halfgrad::sqrt_clamp
