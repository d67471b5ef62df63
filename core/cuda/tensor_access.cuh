// tensor_access.cuh - typed device pointers of Tensors and the float32 / float16 dispatch that the
// memory-bound CUDA ops share (.cu files only).
#pragma once
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/tensor.h"

namespace halfgrad::cuda {

/// Typed device pointer of a float32 / float16 tensor (FP16 is uint16_t in C++, __half in kernels).
template <typename T>
T* dev(const Tensor& t) {
  if constexpr (std::is_same_v<T, __half>) return reinterpret_cast<__half*>(t.data<uint16_t>());
  else return t.data<T>();
}

/// f(float{}) or f(__half{}) by dtype; any other dtype throws "<op>: CUDA <what> take float32 or float16".
template <typename F>
void dispatch_float(const char* op, const char* what, Dtype d, F&& f) {
  if (d == kFloat32) f(float{});
  else if (d == kFloat16) f(__half{});
  else HG_FAIL(op << ": CUDA " << what << " take float32 or float16, got " << dtype_name(d));
}

}  // namespace halfgrad::cuda
