// pointwise_cuda.cuh - the flat, format-agnostic loops of the memory-bound CUDA ops (elementwise,
// activation): y[i] = f(x[i]) or y[i] = f(a[i], b[i]) over the physical buffers, which is valid in
// either memory format as long as every operand has the same shape and format.
//
// Parallel mapping: grid-stride loop; each iteration moves one pack of kPack elements with one
// 16-byte load per operand and one store (a pack is 16 bytes of the widest type: 4 floats or 8 halfs,
// so an f16 -> f32 op loads 4 halfs (8 B) and stores 4 floats (16 B)); the tail
// of fewer than kPack elements, and buffers not aligned to a pack, go one element per thread.
// (Tensor buffers come from the caching allocator, 256-byte aligned, so the pack path is the rule.)
// Memory-bound: a float32 binary op moves 12 bytes per element, a float16 one 6 bytes.
// Precision: every functor takes and returns float (FP16 / BF16 is widened on load and rounded once
// on store: check.cuh's to_float / from_float).
// Functors are plain structs with a __device__ operator() (the build has no --extended-lambda).
// For .cu files only (kernels are templates; each .cu instantiates its own).
#pragma once
#include <cstdint>

#include "core/cuda/check.cuh"

namespace halfgrad::cuda::pointwise {

/// kPack elements of T, aligned so that a whole pack moves as one (or two) 16-byte accesses.
template <typename T, int kPack>
struct alignas(sizeof(T) * kPack >= 16 ? 16 : sizeof(T) * kPack) Pack {
  T v[kPack];
};

/// 16 bytes of the widest of the types involved.
template <typename... Ts>
constexpr int pack_for() {
  size_t w = 1;
  ((w = sizeof(Ts) > w ? sizeof(Ts) : w), ...);
  return static_cast<int>(16 / w);
}

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename Tin, typename Tout, int kPack, typename F>
__global__ void unary_kernel(const Tin* __restrict__ x, Tout* __restrict__ y, int64_t n, bool vector, F f) {
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vector) {
    const int64_t packs = n / kPack;
    for (int64_t p = tid; p < packs; p += step) {
      const Pack<Tin, kPack> in = reinterpret_cast<const Pack<Tin, kPack>*>(x)[p];
      Pack<Tout, kPack> out;
#pragma unroll
      for (int j = 0; j < kPack; ++j) out.v[j] = from_float<Tout>(f(to_float(in.v[j])));
      reinterpret_cast<Pack<Tout, kPack>*>(y)[p] = out;
    }
    done = packs * kPack;
  }
  for (int64_t i = done + tid; i < n; i += step) y[i] = from_float<Tout>(f(to_float(x[i])));
}

template <typename Ta, typename Tb, typename Tout, int kPack, typename F>
__global__ void binary_kernel(const Ta* __restrict__ a, const Tb* __restrict__ b, Tout* __restrict__ y, int64_t n,
                              bool vector, F f) {
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vector) {
    const int64_t packs = n / kPack;
    for (int64_t p = tid; p < packs; p += step) {
      const Pack<Ta, kPack> va = reinterpret_cast<const Pack<Ta, kPack>*>(a)[p];
      const Pack<Tb, kPack> vb = reinterpret_cast<const Pack<Tb, kPack>*>(b)[p];
      Pack<Tout, kPack> out;
#pragma unroll
      for (int j = 0; j < kPack; ++j) out.v[j] = from_float<Tout>(f(to_float(va.v[j]), to_float(vb.v[j])));
      reinterpret_cast<Pack<Tout, kPack>*>(y)[p] = out;
    }
    done = packs * kPack;
  }
  for (int64_t i = done + tid; i < n; i += step) y[i] = from_float<Tout>(f(to_float(a[i]), to_float(b[i])));
}

/// y[i] = f(x[i]), i < n, on cuda::stream(); `op` names the caller in launch errors.
template <typename Tin, typename Tout, typename F>
void launch_unary(const char* op, const Tin* x, Tout* y, int64_t n, F f) {
  if (n == 0) return;
  constexpr int kPack = pack_for<Tin, Tout>();
  const bool vector = aligned_to(x, sizeof(Tin) * kPack) && aligned_to(y, sizeof(Tout) * kPack);
  unary_kernel<Tin, Tout, kPack><<<grid_for(vector ? (n + kPack - 1) / kPack : n), 256, 0, stream()>>>(x, y, n, vector, f);
  HG_CUDA_LAUNCH_CHECK(op);
}

/// y[i] = f(a[i], b[i]), i < n.
template <typename Ta, typename Tb, typename Tout, typename F>
void launch_binary(const char* op, const Ta* a, const Tb* b, Tout* y, int64_t n, F f) {
  if (n == 0) return;
  constexpr int kPack = pack_for<Ta, Tb, Tout>();
  const bool vector = aligned_to(a, sizeof(Ta) * kPack) && aligned_to(b, sizeof(Tb) * kPack) &&
                      aligned_to(y, sizeof(Tout) * kPack);
  binary_kernel<Ta, Tb, Tout, kPack>
      <<<grid_for(vector ? (n + kPack - 1) / kPack : n), 256, 0, stream()>>>(a, b, y, n, vector, f);
  HG_CUDA_LAUNCH_CHECK(op);
}

}  // namespace halfgrad::cuda::pointwise
