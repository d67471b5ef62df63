// tensor_access.cuh - typed device pointers of Tensors and the float32 / float16 / bfloat16 dispatch
// that the memory-bound CUDA ops share (.cu files only). A kernel templated on the storage type T
// loads and stores through to_float / from_float (check.cuh) and computes in float.
#pragma once
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/tensor.h"

namespace halfgrad::cuda {

/// Typed device pointer of a float32 / float16 / bfloat16 tensor (FP16 is uint16_t in C++, __half in
/// kernels; BF16 is bfloat16_bits in C++, __nv_bfloat16 in kernels). The dtype is checked.
template <typename T>
T* dev(const Tensor& t) {
  if constexpr (std::is_same_v<T, __half>) return reinterpret_cast<__half*>(t.data<uint16_t>());
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return reinterpret_cast<__nv_bfloat16*>(t.data<bfloat16_bits>());
  else return t.data<T>();
}

/// f(float{}), f(__half{}) or f(__nv_bfloat16{}) by dtype; any other dtype throws
/// "<op>: CUDA <what> take float32, float16 or bfloat16".
template <typename F>
void dispatch_float(const char* op, const char* what, Dtype d, F&& f) {
  if (d == kFloat32) f(float{});
  else if (d == kFloat16) f(__half{});
  else if (d == kBFloat16) f(__nv_bfloat16{});
  else HG_FAIL(op << ": CUDA " << what << " take float32, float16 or bfloat16, got " << dtype_name(d));
}

}  // namespace halfgrad::cuda
