// check.cuh - what every .cu file of halfgrad includes: the stream, error checks that name the op,
// launch-size helpers, and the NCDHW / NDHWC index arithmetic of a 5-D tensor.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/runtime.h"
#include "core/error.h"

namespace halfgrad::cuda {

/// The one stream every halfgrad kernel and copy runs on (see runtime.h).
cudaStream_t stream();

/// Throws halfgrad::Error("<op>: <call> failed: <cuda error string>").
[[noreturn]] void throw_cuda_error(const char* op, const char* call, cudaError_t err);

/// Blocks of `threads` covering n elements, capped for grid-stride loops.
inline unsigned grid_for(int64_t n, int threads = 256, int64_t cap = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

}  // namespace halfgrad::cuda

/// HG_CUDA_CHECK("conv3d", cudaMemcpyAsync(...)): throws naming the op and the call on failure.
#define HG_CUDA_CHECK(op, call)                                                              \
  do {                                                                                       \
    cudaError_t hg_cuda_err_ = (call);                                                       \
    if (hg_cuda_err_ != cudaSuccess) ::halfgrad::cuda::throw_cuda_error(op, #call, hg_cuda_err_); \
  } while (0)

/// After every <<<...>>>: a bad launch configuration is reported at once, naming the op.
#define HG_CUDA_LAUNCH_CHECK(op)                                                             \
  do {                                                                                       \
    cudaError_t hg_cuda_err_ = cudaGetLastError();                                           \
    if (hg_cuda_err_ != cudaSuccess) ::halfgrad::cuda::throw_cuda_error(op, "kernel launch", hg_cuda_err_); \
  } while (0)

namespace halfgrad::cuda {

/// Element strides of a 5-D (N, C, D, H, W) tensor in either physical layout:
///   NCDHW (contiguous):      offset = n*C*S + c*S + s          (S = D*H*W, s = (d*H + h)*W + w)
///   NDHWC (channels-last):   offset = n*S*C + s*C + c
/// Kernels that walk (n, c, s) take these three strides and serve both layouts with one code path.
struct Strides5 {
  int64_t n, c, s;
};
inline Strides5 strides5(int64_t C, int64_t S, bool channels_last) {
  return channels_last ? Strides5{S * C, 1, C} : Strides5{C * S, S, 1};
}

/// Float <-> storage type conversions for kernels templated on T = float, __half or __nv_bfloat16:
/// every kernel loads and stores its elements through these, so a 16-bit type is added here once.
/// from_float rounds to nearest even (__float2half_rn, __float2bfloat16_rn; the CPU's core/half.h and
/// core/bfloat16.h round the same way).
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/// The storage type of a 16-bit Dtype in kernels: __half for Float16, __nv_bfloat16 for BFloat16.
template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

}  // namespace halfgrad::cuda
