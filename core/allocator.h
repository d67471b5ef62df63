// allocator.h - the CPU caching allocator behind every Storage.
//
// A training step allocates the same sizes step after step (activations, gradients, GEMM buffers).
// Fresh memory from the OS costs a page fault per 4 KiB on first touch, which made large ops about
// 3x slower than writing into memory already touched. Blocks of at least kMinCachedBytes are
// therefore kept on free when released and handed out again for a request of the same rounded size;
// smaller blocks go straight to malloc/free. Large blocks are also advised to use transparent huge
// pages. The cache holds at most `cache_limit_bytes()` (default 4 GiB, env HALFGRAD_CPU_CACHE_MB);
// beyond that, released blocks are freed. This is the CPU twin of the CUDA caching allocator that the
// GPU backend needs (no cudaMalloc per op in steady state).
#pragma once
#include <cstddef>

namespace halfgrad {

constexpr size_t kMinCachedBytes = size_t{1} << 16;  // 64 KiB: below this malloc is already cheap

/// 64-byte aligned block of at least `nbytes` (never null; throws halfgrad::Error when out of memory).
void* cpu_allocate(size_t nbytes);
/// Return a block from cpu_allocate with the same `nbytes`.
void cpu_free(void* ptr, size_t nbytes);

struct CpuAllocatorStats {
  size_t cached_bytes = 0;     // held in the cache, free
  size_t allocated_bytes = 0;  // handed out, live
  size_t peak_allocated_bytes = 0;
  size_t hits = 0, misses = 0;
};
CpuAllocatorStats cpu_allocator_stats();
/// Free every cached block (e.g. between benchmark phases).
void cpu_empty_cache();
void cpu_reset_peak_stats();

}  // namespace halfgrad
