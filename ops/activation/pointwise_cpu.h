// pointwise_cpu.h - the CPU loops of the pointwise activations (activation.cpp, smooth.cpp): one
// parallel, vectorisable pass in the compute type T (float for Float32 and Float16 - an FP32 copy,
// rounded to half once at the end - or double for Float64). Internal to ops/ (activation/ and
// elementwise/sqrt_clamp.cpp use them).
#pragma once
#include "ops/common.h"

namespace halfgrad::ops::detail {

// y = f(x) elementwise in x's dtype; T is x's compute type (float for Float16, computed on an FP32
// copy and rounded once).
template <typename T, typename F>
Tensor map_in_dtype(const Tensor& x, F f) {
  Tensor cx = to_compute(x);
  Tensor y = Tensor::empty(x.shape(), compute_dtype(x.dtype()));
  const int64_t n = x.numel();
  const T* px = cx.data<T>();
  T* py = y.data<T>();
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
  return from_compute(y, x.dtype());
}

// dx = f(dy, s) elementwise, where s is the saved tensor (relu: y, leaky_relu: x) and T its compute type.
template <typename T, typename F>
Tensor masked_grad(const Tensor& gy, const Tensor& saved, F f) {
  Tensor cg = to_compute(gy), cs = to_compute(saved);
  Tensor dx = Tensor::empty(saved.shape(), compute_dtype(saved.dtype()));
  const int64_t n = saved.numel();
  const T* pg = cg.data<T>();
  const T* ps = cs.data<T>();
  T* pd = dx.data<T>();
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) pd[i] = f(pg[i], ps[i]);
  return from_compute(dx, saved.dtype());
}


}  // namespace halfgrad::ops::detail
