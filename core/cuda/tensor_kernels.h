// tensor_kernels.h - the few kernels core itself needs on CUDA tensors: fill, dtype conversion, the
// NCDHW <-> NDHWC permutation, in-place accumulation (autograd's +=), a non-finite count, and copies
// made only when a device flag is set (a skipped step's restore decided on the device).
// Plain C++ launchers over raw device pointers; each runs on cuda::stream() and checks its launch.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace halfgrad::cuda {

/// p[i] = value (converted to dtype, half rounds to nearest even), i < n.
void fill(void* p, Dtype dtype, int64_t n, double value);
/// dst[i] = convert(src[i]) for i < n; every pair of halfgrad's dtypes.
void convert(const void* src, Dtype src_dtype, void* dst, Dtype dst_dtype, int64_t n);
/// Permutes a 5-D tensor (N, C, S = D*H*W) between NCDHW and NDHWC: to_channels_last true reads
/// src as (N, C, S) and writes dst as (N, S, C); false the reverse. Element size 2, 4 or 8 bytes.
void permute_channels(const void* src, void* dst, int64_t elem_bytes, int64_t N, int64_t C, int64_t S,
                      bool to_channels_last);
/// dst[i] += src[i] (same dtype, float types), i < n.
void accumulate(void* dst, const void* src, Dtype dtype, int64_t n);
/// Number of NaN or +-inf elements (waits for the result).
int64_t count_nonfinite(const void* p, Dtype dtype, int64_t n);

/// One copy of copy_if_flag: nbytes bytes from src to dst (device buffers that do not overlap).
struct FlaggedCopy {
  void* dst;
  const void* src;
  int64_t nbytes;
};
/// Every copy, only if *flag (a 1-element FP32 device buffer, GradScaler's found_inf) is nonzero: the
/// host does not learn the flag, nothing waits. One launch per kMaxFlaggedCopies copies.
constexpr int kMaxFlaggedCopies = 128;
void copy_if_flag(const FlaggedCopy* copies, int64_t count, const float* flag);

}  // namespace halfgrad::cuda
