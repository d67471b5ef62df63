// norm_reduce.cuh - the block reduction and the shift rule the normalisation kernels share
// (norm_cuda.cu: batch / instance / group norm; layer_norm_cuda.cu). For .cu files only.
//
// Blocks are kThreads = 256 threads (8 warps). block_sum2 sums two doubles over the block: a warp
// shuffle tree, then the 8 warp sums in warp order in thread 0, so the result does not depend on
// timing. norm_shift gives the value subtracted before the one-pass variance (see norm_cuda.cu).
#pragma once
#include "core/cuda/check.cuh"

namespace halfgrad::cuda::norm_reduce {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// The shift K from the group's first value v: v, or 0 when v is inf or NaN (x - inf would make the
// mean of {+inf, 5} NaN instead of +inf). The reduce and finalize kernels must agree on it.
__device__ __forceinline__ float norm_shift(float v) { return isfinite(v) ? v : 0.f; }

// FP64 sum of (a, b) over the block; the result is valid in thread 0. Every thread must call it.
__device__ inline void block_sum2(double& a, double& b) {
  __shared__ double wa[kWarps], wb[kWarps];
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (l == 0) {
    wa[w] = a;
    wb[w] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a = 0;
    b = 0;
    for (int i = 0; i < kWarps; ++i) {
      a += wa[i];
      b += wb[i];
    }
  }
  __syncthreads();  // wa / wb may be reused by the next call
}

}  // namespace halfgrad::cuda::norm_reduce
