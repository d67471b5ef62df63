// tensor_kernels.cu - core's CUDA kernels (see tensor_kernels.h).
//   fill / convert / accumulate / count_nonfinite: one thread per element, grid-stride loops.
//   copy_if_flag: the copies go by value in the kernel's arguments (<= 128 of 24 bytes: within the
//   4 KiB of parameters); block row y copies copy y byte by byte, grid-stride; every thread reads the
//   flag first and returns when it is 0 (small buffers: BatchNorm statistics of a few hundred bytes).
//   permute_channels: a 32x32 tile of the (C, S) matrix of one sample goes through shared memory so
//   that both the read and the write are coalesced (the classic transpose; the row is padded by one
//   element so that the column reads of the tile hit 32 different banks).
// Precision: conversions round to nearest even (__float2half_rn, __float2bfloat16_rn); f64 -> f16/bf16
// goes through f32 like the CPU path (tensor.cpp) and PyTorch. (One difference from the CPU: a NaN
// converted to bf16 keeps its sign here, while core/bfloat16.h, as c10, gives +NaN 0x7fc0.)
#include <algorithm>

#include "core/bfloat16.h"
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_kernels.h"
#include "core/half.h"

namespace halfgrad::cuda {
namespace {

template <typename T>
__device__ __forceinline__ double load_as_double(const T* p, int64_t i) { return static_cast<double>(p[i]); }
template <>
__device__ __forceinline__ double load_as_double<__half>(const __half* p, int64_t i) { return to_float(p[i]); }
template <>
__device__ __forceinline__ double load_as_double<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) { return to_float(p[i]); }
template <typename T>
__device__ __forceinline__ void store_from_double(T* p, int64_t i, double v) {
  if constexpr (is_reduced_float_v<T>) p[i] = from_float<T>(static_cast<float>(v));
  else p[i] = static_cast<T>(v);
}

struct FlaggedCopies {
  FlaggedCopy copy[kMaxFlaggedCopies];
};
static_assert(sizeof(FlaggedCopies) <= 4000, "the copies must fit in the kernel's 4 KiB of parameters");

__global__ void copy_if_flag_kernel(const FlaggedCopies copies, const float* flag) {
  if (*flag == 0.0f) return;
  const FlaggedCopy c = copies.copy[blockIdx.y];
  auto* dst = static_cast<uint8_t*>(c.dst);
  const auto* src = static_cast<const uint8_t*>(c.src);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.nbytes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, T v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) p[i] = v;
}

template <typename S, typename D>
__global__ void convert_kernel(const S* s, D* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_from_double(d, i, load_as_double(s, i));
}
// The hot pairs (autocast casts: f32 <-> f16 / bf16) without the detour through double.
template <typename T>
__global__ void f32_to_reduced_kernel(const float* s, T* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = from_float<T>(s[i]);
}
template <typename T>
__global__ void reduced_to_f32_kernel(const T* s, float* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = to_float(s[i]);
}

constexpr int kTile = 32;
// src (N, R, Q) -> dst (N, Q, R): one block moves a 32x32 tile; blockDim = (32, 8).
template <typename T>
__global__ void transpose_kernel(const T* src, T* dst, int64_t R, int64_t Q) {
  __shared__ T tile[kTile][kTile + 1];  // +1: column reads land in 32 different banks
  const int64_t n = blockIdx.z;
  const int64_t q0 = int64_t(blockIdx.x) * kTile, r0 = int64_t(blockIdx.y) * kTile;
  const T* s = src + n * R * Q;
  T* d = dst + n * R * Q;
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t r = r0 + j, q = q0 + threadIdx.x;
    if (r < R && q < Q) tile[j][threadIdx.x] = s[r * Q + q];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t q = q0 + j, r = r0 + threadIdx.x;
    if (r < R && q < Q) d[q * R + r] = tile[threadIdx.x][j];
  }
}

template <typename T>
__global__ void accumulate_kernel(T* d, const T* s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = from_float<T>(to_float(d[i]) + to_float(s[i]));
}
__global__ void accumulate_f64_kernel(double* d, const double* s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) d[i] += s[i];
}

template <typename T>
__global__ void nonfinite_kernel(const T* p, int64_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (!isfinite(load_as_double(p, i))) ++local;
  if (local) atomicAdd(count, local);
}

template <typename F>
void dispatch(Dtype d, F&& f) {
  switch (d) {
    case kFloat32: f(float{}); break;
    case kFloat16: f(__half{}); break;
    case kFloat64: f(double{}); break;
    case kInt64: f(int64_t{}); break;
    case kBFloat16: f(__nv_bfloat16{}); break;
  }
}

}  // namespace

void fill(void* p, Dtype dtype, int64_t n, double value) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    // The fill value is converted here, on the host: from_float is __device__ only (called from host
    // code its stub ends the process). The CPU conversions round to nearest even, as the device's.
    T v;
    if constexpr (std::is_same_v<T, __half>) {
      __half_raw r;
      r.x = float_to_half_bits(static_cast<float>(value));
      v = __half(r);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      __nv_bfloat16_raw r;
      r.x = float_to_bfloat16_bits(static_cast<float>(value));
      v = __nv_bfloat16(r);
    } else {
      v = static_cast<T>(value);
    }
    fill_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<T*>(p), n, v);
  });
  HG_CUDA_LAUNCH_CHECK("fill_");
}

void convert(const void* src, Dtype sd, void* dst, Dtype dd, int64_t n) {
  if (n == 0) return;
  if (sd == dd) {
    copy_d2d(dst, src, static_cast<size_t>(n) * dtype_size(sd));
    return;
  }
  if (sd == kFloat32 && dd == kFloat16) {
    f32_to_reduced_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const float*>(src), static_cast<__half*>(dst), n);
  } else if (sd == kFloat32 && dd == kBFloat16) {
    f32_to_reduced_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const float*>(src), static_cast<__nv_bfloat16*>(dst), n);
  } else if (sd == kFloat16 && dd == kFloat32) {
    reduced_to_f32_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const __half*>(src), static_cast<float*>(dst), n);
  } else if (sd == kBFloat16 && dd == kFloat32) {
    reduced_to_f32_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const __nv_bfloat16*>(src), static_cast<float*>(dst), n);
  } else {
    dispatch(sd, [&](auto s) {
      dispatch(dd, [&](auto d) {
        using S = decltype(s);
        using D = decltype(d);
        convert_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
      });
    });
  }
  HG_CUDA_LAUNCH_CHECK("cast");
}

void permute_channels(const void* src, void* dst, int64_t elem_bytes, int64_t N, int64_t C, int64_t S,
                      bool to_channels_last) {
  if (N * C * S == 0) return;
  const int64_t R = to_channels_last ? C : S, Q = to_channels_last ? S : C;
  HG_CHECK(N <= 65535, "permute_channels: batch " << N << " exceeds 65535");
  dim3 grid(static_cast<unsigned>((Q + kTile - 1) / kTile), static_cast<unsigned>((R + kTile - 1) / kTile),
            static_cast<unsigned>(N));
  HG_CHECK((R + kTile - 1) / kTile <= 65535, "permute_channels: " << R << " rows exceed the grid limit");
  dim3 block(kTile, 8);
  switch (elem_bytes) {
    case 2: transpose_kernel<<<grid, block, 0, stream()>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), R, Q); break;
    case 4: transpose_kernel<<<grid, block, 0, stream()>>>(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), R, Q); break;
    case 8: transpose_kernel<<<grid, block, 0, stream()>>>(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), R, Q); break;
    default: HG_FAIL("permute_channels: element size " << elem_bytes << " is not 2, 4 or 8");
  }
  HG_CUDA_LAUNCH_CHECK("to(memory_format)");
}

void accumulate(void* dst, const void* src, Dtype dtype, int64_t n) {
  if (n == 0) return;
  switch (dtype) {
    case kFloat32: accumulate_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<float*>(dst), static_cast<const float*>(src), n); break;
    case kFloat16: accumulate_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<__half*>(dst), static_cast<const __half*>(src), n); break;
    case kBFloat16: accumulate_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<__nv_bfloat16*>(dst), static_cast<const __nv_bfloat16*>(src), n); break;
    case kFloat64: accumulate_f64_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<double*>(dst), static_cast<const double*>(src), n); break;
    default: HG_FAIL("accumulate: " << dtype_name(dtype) << " is not a floating type");
  }
  HG_CUDA_LAUNCH_CHECK("backward (gradient accumulation)");
}

void copy_if_flag(const FlaggedCopy* copies, int64_t count, const float* flag) {
  HG_CHECK(flag != nullptr && count >= 0 && (count == 0 || copies != nullptr),
           "copy_if_flag: expected a device flag and " << count << " copies");
  for (int64_t begin = 0; begin < count; begin += kMaxFlaggedCopies) {
    const int64_t n = std::min<int64_t>(kMaxFlaggedCopies, count - begin);
    FlaggedCopies batch{};
    int64_t largest = 0;
    for (int64_t i = 0; i < n; ++i) {
      const FlaggedCopy& c = copies[begin + i];
      HG_CHECK(c.nbytes >= 0 && (c.nbytes == 0 || (c.dst != nullptr && c.src != nullptr)),
               "copy_if_flag: copy " << begin + i << " has a null buffer or a negative size");
      batch.copy[i] = c;
      largest = std::max(largest, c.nbytes);
    }
    const dim3 grid(grid_for(largest, 256, 64), static_cast<unsigned>(n));
    copy_if_flag_kernel<<<grid, 256, 0, stream()>>>(batch, flag);
    HG_CUDA_LAUNCH_CHECK("copy_if_flag");
  }
}

int64_t count_nonfinite(const void* p, Dtype dtype, int64_t n) {
  if (n == 0 || dtype == kInt64) return 0;
  auto* count = static_cast<unsigned long long*>(allocate(sizeof(unsigned long long), "count_nonfinite"));
  memset_async(count, 0, sizeof(unsigned long long));
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, int64_t>)
      nonfinite_kernel<<<grid_for(n, 256, 4096), 256, 0, stream()>>>(static_cast<const T*>(p), n, count);
  });
  HG_CUDA_LAUNCH_CHECK("count_nonfinite");
  unsigned long long host = 0;
  copy_d2h(&host, count, sizeof(host));
  release(count, sizeof(unsigned long long));
  return static_cast<int64_t>(host);
}

}  // namespace halfgrad::cuda
