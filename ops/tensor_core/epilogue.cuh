// epilogue.cuh - the one epilogue store of halfgrad's Tensor Core kernels: results of C (FP32
// accumulators) scaled by alpha, added to beta * C, rounded to C's type (FP32, FP16 or BF16, round to
// nearest even) and written one pair or quad of horizontally adjacent elements at a time. The GEMMs
// (ops/matmul/: mma.sync and the TMA kernel's register epilogue) and the row-major epilogue of the
// implicit-GEMM convolution (ops/conv/conv3d_fprop_cuda.cu) store through it; the convolutions'
// scatter (strided outputs) and the TMA-store epilogue have layouts of their own.
// Internal: .cu / .cuh files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace halfgrad::cuda::tensor_core {

// ---------------------------------------------------------------------------------------------
// Epilogue store of two horizontally adjacent results (row, col) and (row, col+1) of C, guarded
// against the matrix edge. pair_ok: ldc even and C aligned, so the two go out as one 8-byte
// (FP32) or 4-byte (FP16 / BF16) store. beta == 0 never reads C (it may hold NaN or garbage).
// store_quad does the same for four results (row, col..col+3), used by the shared-memory-staged
// epilogue; it falls back to two store_pair where the vector does not fit (edge, alignment).
// ---------------------------------------------------------------------------------------------
struct Epilogue {
  void* C;
  int64_t ldc;
  float alpha, beta;
  bool c_half;   // C is 16-bit: FP16, or BF16 when c_bf16
  bool pair_ok;  // ldc even, C aligned to 2 elements: store_pair writes one 8- or 4-byte vector
  bool quad_ok;  // ldc % 4 == 0, C aligned to 4 elements: store_quad writes one 16- or 8-byte vector
  bool c_bf16 = false;  // last, so that the benches' positional {C, ldc, alpha, beta, c_half, pair, quad} still fit
};

// The two 16-bit output types, as bits: a pair packs element 0 into the low half (little-endian,
// the layout of __half2 / __nv_bfloat162).
__device__ __forceinline__ float c16_to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float c16_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ uint16_t c16_bits(float v) {
  if constexpr (std::is_same_v<T, __half>) return __half_as_ushort(__float2half_rn(v));
  else return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <typename T>
__device__ __forceinline__ float c16_bits_to_float(uint32_t bits) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  else return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
}
template <typename T>
__device__ __forceinline__ uint32_t c16_pack(float lo, float hi) {
  return static_cast<uint32_t>(c16_bits<T>(lo)) | (static_cast<uint32_t>(c16_bits<T>(hi)) << 16);
}

template <typename T>
__device__ __forceinline__ void store_pair16(const Epilogue& e, int64_t at, bool both, float v0, float v1) {
  T* c = static_cast<T*>(e.C) + at;
  if (e.beta != 0.f) {
    v0 += e.beta * c16_to_float(c[0]);
    if (both) v1 += e.beta * c16_to_float(c[1]);
  }
  uint16_t* cb = reinterpret_cast<uint16_t*>(c);
  if (both && e.pair_ok) {
    *reinterpret_cast<uint32_t*>(cb) = c16_pack<T>(v0, v1);
  } else {
    cb[0] = c16_bits<T>(v0);
    if (both) cb[1] = c16_bits<T>(v1);
  }
}

template <typename T>
__device__ __forceinline__ void store_quad16(const Epilogue& e, int64_t at, float4 v) {
  uint2* c = reinterpret_cast<uint2*>(static_cast<T*>(e.C) + at);
  if (e.beta != 0.f) {
    const uint2 old = *c;
    v.x += e.beta * c16_bits_to_float<T>(old.x & 0xffffu);
    v.y += e.beta * c16_bits_to_float<T>(old.x >> 16);
    v.z += e.beta * c16_bits_to_float<T>(old.y & 0xffffu);
    v.w += e.beta * c16_bits_to_float<T>(old.y >> 16);
  }
  uint2 packed;
  packed.x = c16_pack<T>(v.x, v.y);
  packed.y = c16_pack<T>(v.z, v.w);
  *c = packed;
}

__device__ __forceinline__ void store_pair(const Epilogue& e, int M, int N, int row, int col, float v0, float v1) {
  if (row >= M || col >= N) return;
  v0 *= e.alpha;
  v1 *= e.alpha;
  const bool both = col + 1 < N;
  const int64_t at = static_cast<int64_t>(row) * e.ldc + col;
  if (e.c_half) {
    if (e.c_bf16) store_pair16<__nv_bfloat16>(e, at, both, v0, v1);
    else store_pair16<__half>(e, at, both, v0, v1);
  } else {
    float* c = static_cast<float*>(e.C) + at;
    if (e.beta != 0.f) {
      v0 += e.beta * c[0];
      if (both) v1 += e.beta * c[1];
    }
    if (both && e.pair_ok) {
      *reinterpret_cast<float2*>(c) = make_float2(v0, v1);
    } else {
      c[0] = v0;
      if (both) c[1] = v1;
    }
  }
}

__device__ __forceinline__ void store_quad(const Epilogue& e, int M, int N, int row, int col, float4 v) {
  if (row >= M || col >= N) return;
  if (!(e.quad_ok && col + 3 < N)) {
    store_pair(e, M, N, row, col, v.x, v.y);
    store_pair(e, M, N, row, col + 2, v.z, v.w);
    return;
  }
  v.x *= e.alpha;
  v.y *= e.alpha;
  v.z *= e.alpha;
  v.w *= e.alpha;
  const int64_t at = static_cast<int64_t>(row) * e.ldc + col;
  if (e.c_half) {
    if (e.c_bf16) store_quad16<__nv_bfloat16>(e, at, v);
    else store_quad16<__half>(e, at, v);
  } else {
    float4* c = reinterpret_cast<float4*>(static_cast<float*>(e.C) + at);
    if (e.beta != 0.f) {
      const float4 old = *c;
      v.x += e.beta * old.x;
      v.y += e.beta * old.y;
      v.z += e.beta * old.z;
      v.w += e.beta * old.w;
    }
    *c = v;
  }
}

}  // namespace halfgrad::cuda::tensor_core
