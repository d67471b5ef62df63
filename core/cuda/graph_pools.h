// graph_pools.h - graph-private memory pools beside the eager caching allocator, in plain host C++
// (the routing only; block_allocator.h keeps the policy). Compiled in every build and unit-tested on
// the CPU with a fake backend (tests/core/graph_pools_test.cpp); core/cuda/runtime.cpp routes
// cuda::allocate / cuda::release through it.
//
// Why (PyTorch's graph-private pools, torch.cuda.graphs / CUDACachingAllocator's MempoolId_t): a CUDA
// graph (core/cuda/graph.h) records the device addresses its kernels read and write. Every replay
// uses the same addresses, and between two replays the host runs eager code. If a block a captured
// kernel uses were handed back to the eager cache, eager work would write it and the next replay would
// read garbage (or overwrite an eager tensor). So:
// - While a capture is active (begin_capture(pool) ... end_capture()), allocate() serves every request
//   from that graph's own BlockAllocator, with its own segments.
// - A block of a private pool goes back to that pool when released, whenever that is (during the
//   capture, which lets later captured work reuse it exactly as the eager cache would, or after it,
//   for tensors that outlived the capture: a captured backward's gradients). Eager allocate() never
//   takes a block of a private pool.
// - retire_pool(pool) (the graph is destroyed): the pool's segments go back to the backend once its
//   last live block is released; not during a capture (the backend's free waits for the stream, which
//   a capture forbids): then at end_capture().
// Replays reuse the pool's blocks in the order the capture used them, so a graph's memory is its
// capture's peak, reserved once.
// One capture at a time (one stream). Requests of other threads during a capture (a thread-local
// capture records only the capturing thread's work) are eager: runtime.cpp says which thread asks.
// Not locked: the owner locks (runtime.cpp's mutex).
// Memory limit: one MemoryBudget (block_allocator.h) shared by the eager allocator, every private
// pool and the device memory reserved outside them (reserve_external: cuda::DeviceBuffer), so that a
// limit bounds everything the process holds on the device, as a GPU of that size would. A request
// over the limit gives back cached free segments first: its own allocator's, then the eager cache's
// and those of retired pools (a live graph's free blocks are its replay's memory, never given back).
// During a capture nothing is given back (that would wait on the capturing stream): a capture that
// needs more than the limit allows fails with the out-of-memory error, so begin_capture gives back
// the eager cache first when a limit is set. empty_cache applies to the eager allocator; stats are
// the eager one's and pool_stats(pool) a pool's, each with the shared budget's totals.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/cuda/block_allocator.h"

namespace halfgrad::cuda {

class GraphPools {
 public:
  using PoolId = uint64_t;  // 0 is no pool
  /// `backend` must outlive this object; `eager_options` configure the eager allocator.
  GraphPools(SegmentBackend& backend, BlockAllocatorOptions eager_options);
  GraphPools(const GraphPools&) = delete;
  GraphPools& operator=(const GraphPools&) = delete;

  /// A new, empty private pool.
  PoolId create_pool();
  /// From now on allocate() serves from `pool` (created, not retired). Throws halfgrad::Error if a
  /// capture is already active or the pool is unknown.
  void begin_capture(PoolId pool, const char* op);
  /// allocate() serves eager requests again; pools retired meanwhile and now empty are freed.
  void end_capture();
  /// The pool being captured into, 0 when none.
  PoolId capturing() const { return capturing_; }
  /// The graph of `pool` is gone: its segments are given back once no block of it is live (at once
  /// when none is; after end_capture when a capture is active). Unknown ids throw.
  void retire_pool(PoolId pool);

  /// As BlockAllocator::allocate, from the capturing pool when a capture is active and `capturer`
  /// (the request comes from the capturing thread: the owner knows), else eager.
  void* allocate(size_t nbytes, const char* op, bool capturer = true);
  /// Returns the block to the allocator it came from. Errors as BlockAllocator::release.
  void release(void* ptr, size_t nbytes, const char* op);
  size_t block_size(const void* ptr) const;

  /// Counts `nbytes` of device memory taken outside the allocators (a cuda::DeviceBuffer) against the
  /// budget, giving back cached segments first when it would pass the limit. Throws halfgrad::Error
  /// "<op>: out of <backend> memory: a buffer of N bytes would take reserved memory to ..., past the
  /// memory limit of L bytes ..." (nothing counted) when it still would.
  void reserve_external(size_t nbytes, const char* op);
  /// The inverse, once the buffer is freed.
  void release_external(size_t nbytes);
  /// The shared budget (limit, reserved by all, external, peak).
  const MemoryBudget& budget() const { return budget_; }

  /// The eager allocator (stats, limits, empty_cache).
  BlockAllocator& eager() { return eager_; }
  const BlockAllocator& eager() const { return eager_; }
  /// Statistics of one private pool (allocated, reserved, cudaMalloc calls); unknown ids throw.
  BlockAllocatorStats pool_stats(PoolId pool) const;
  /// Pools not yet freed (retired ones with live blocks included).
  size_t num_pools() const { return pools_.size(); }

 private:
  struct Pool {
    std::unique_ptr<BlockAllocator> blocks;
    int64_t live = 0;
    bool retired = false;
  };
  /// Frees every retired pool without live blocks (never during a capture).
  void free_retired_pools();
  /// The budget's reclaim hook: the eager cache and retired pools' free segments; returns the bytes.
  size_t reclaim_cached();

  SegmentBackend& backend_;
  MemoryBudget budget_;  // before eager_, which points at it
  BlockAllocator eager_;
  std::unordered_map<PoolId, Pool> pools_;
  std::unordered_map<const void*, PoolId> owner_;  // live blocks of private pools
  PoolId capturing_ = 0;
  PoolId next_id_ = 1;
};

}  // namespace halfgrad::cuda
