// allocator_stats.h - the statistics of the CUDA caching allocator (core/cuda/block_allocator.h),
// alone so that runtime.h (which every tensor user includes) does not pull in the allocator's class.
#pragma once
#include <cstddef>

namespace halfgrad::cuda {

/// Bytes are block sizes (rounded; a block may hold an unsplit rest), as torch.cuda.memory_stats.
struct BlockAllocatorStats {
  size_t allocated_bytes = 0;       // in live blocks (torch.cuda.memory_allocated)
  size_t peak_allocated_bytes = 0;  // since the last reset_peak_stats (torch.cuda.max_memory_allocated)
  size_t reserved_bytes = 0;        // in segments, live + cached (torch.cuda.memory_reserved)
  size_t peak_reserved_bytes = 0;   // since the last reset_peak_stats (torch.cuda.max_memory_reserved)
  size_t active_blocks = 0;         // live blocks
  size_t segments = 0;              // segments held
  size_t cuda_malloc_calls = 0;     // raw_alloc calls that gave a segment (cudaMalloc), since start
  size_t cuda_free_calls = 0;       // raw_free calls (cudaFree), since start
  size_t hits = 0;                  // requests served from a cached free block, since start
  size_t splits = 0;                // blocks split, since start
  size_t merges = 0;                // free neighbours merged, since start
  size_t alloc_retries = 0;         // raw_alloc failures followed by giving back the cache, since start
  size_t ooms = 0;                  // out-of-memory errors thrown (device full or over the limit), since start
  size_t largest_free_block = 0;    // the biggest free block of either pool now (bytes)
  size_t inactive_split_bytes = 0;  // free blocks inside segments that have a live block: fragmentation
  size_t inactive_split_blocks = 0;
  // The memory budget this allocator shares (block_allocator.h's MemoryBudget: with cuda::allocate,
  // the eager cache, every CUDA graph's pool and the device buffers; its limit is the memory limit).
  size_t budget_reserved_bytes = 0;       // reserved by all of them now
  size_t budget_peak_reserved_bytes = 0;  // their peak since the last reset_peak_stats
  size_t budget_external_bytes = 0;       // of which outside the allocators (cuda::DeviceBuffer)
  size_t budget_ooms = 0;                 // out-of-memory errors of any of them, since start
};

}  // namespace halfgrad::cuda
