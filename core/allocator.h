// allocator.h - the CPU caching allocator behind every Storage.
//
// A training step allocates the same sizes step after step (activations, gradients, GEMM buffers).
// Fresh memory from the OS costs a page fault per 4 KiB on first touch, which made large ops about
// 3x slower than writing into memory already touched. Blocks of at least kMinCachedBytes are
// therefore kept on free when released and handed out again for a request of the same rounded size;
// smaller blocks go straight to malloc/free. Large blocks are also advised to use transparent huge
// pages. The cache holds at most `cpu_cache_limit()` bytes (default 4 GiB; env HALFGRAD_CPU_CACHE_MB
// at start, cpu_set_cache_limit at run time; 0 turns caching off); beyond that, released blocks are
// freed. This is the CPU twin of the CUDA caching allocator that the GPU backend needs (no cudaMalloc
// per op in steady state).
//
// Determinism: whether a block comes from the cache or from malloc, and what it held before, must
// never change a result (same seed, same bits). Every block is 64-byte aligned either way, so SIMD
// loops that peel to an alignment boundary peel the same elements whatever block they get.
//
// Poison (a debugging instrument for reads of memory an op never wrote): with a poison byte set (env
// HALFGRAD_CPU_POISON=<byte> at start, 0..255, decimal or 0x.. hex; or cpu_set_poison at run time),
// every block cpu_allocate hands out, fresh or reused and of any size, is first filled with that byte,
// and so are the CPU ops' per-thread scratch buffers each time an op takes one (cpu_poison_fill).
// Running the same steps with two patterns (0x00, and 0xFF, which is a NaN in every float format) must
// give identical bits; any difference is an op reading memory it did not write. The fill costs a
// memset per allocation: for tests and bisecting, not for training runs.
#pragma once
#include <cstddef>

namespace halfgrad {

constexpr size_t kMinCachedBytes = size_t{1} << 16;  // 64 KiB: below this malloc is already cheap

/// 64-byte aligned block of at least `nbytes` (never null; throws halfgrad::Error when out of memory,
/// or when HALFGRAD_CPU_CACHE_MB / HALFGRAD_CPU_POISON do not parse, naming the variable and value).
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

/// Bytes the cache may hold (rounded block sizes); 0 = no caching.
size_t cpu_cache_limit();
/// Sets the cache limit, in bytes (0 turns caching off). Cached blocks beyond the new limit are freed
/// at once, largest first. Overrides HALFGRAD_CPU_CACHE_MB.
void cpu_set_cache_limit(size_t bytes);

/// The poison byte (0..255), or -1 when poisoning is off (the default without HALFGRAD_CPU_POISON).
int cpu_poison();
/// Sets the poison byte: 0..255 turns the fill on, -1 turns it off. Throws halfgrad::Error for any
/// other value. Overrides HALFGRAD_CPU_POISON.
void cpu_set_poison(int byte);
/// Fills n bytes at p with the poison byte when poisoning is on; does nothing otherwise. For scratch
/// memory that does not come from cpu_allocate (the ops' per-thread buffers), called each time an op
/// takes the buffer, so that a stale value left by an earlier call is caught like an unwritten one.
void cpu_poison_fill(void* p, size_t n);

}  // namespace halfgrad
