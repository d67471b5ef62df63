// block_allocator.h - the policy of halfgrad's CUDA caching allocator, in plain host C++: which
// block of which segment serves a request, when a block is split, when free neighbours merge, when
// a segment goes back to the device. It never touches the memory it manages (a segment is an
// address range from a SegmentBackend), so it is compiled in every build and unit-tested on the CPU
// with a fake backend of fake addresses (tests/core/block_allocator_test.cpp); core/cuda/runtime.cpp
// plugs in cudaMalloc / cudaFree.
//
// The design is PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp), one stream:
// - Sizes are rounded up to 512 B (kMinBlockSize); a request of 0 bytes takes a 512-byte block.
// - Two pools. Requests <= 1 MiB (kSmallSize) are served from the small pool, whose segments are
//   2 MiB (kSmallBuffer). Larger requests use the large pool; a new large segment is 20 MiB
//   (kLargeBuffer) for requests below 10 MiB (kMinLargeAlloc), else the request rounded up to 2 MiB
//   (kRoundLarge). A segment never moves between pools.
// - Best fit: each pool's free blocks sit in a std::set ordered by (size, address); a request takes
//   the smallest free block of at least its rounded size (the lowest address among equals), and only
//   when there is none does the backend give a new segment.
// - Split: the request takes the front of the block, the rest becomes a free block of its own when it
//   is >= 512 B (small pool) or > 1 MiB (large pool); a smaller rest stays inside the block, which is
//   then that much bigger than asked (and counts as allocated, as PyTorch's block->size does).
// - Merge: a released block absorbs its free neighbours of the same segment (before and after it),
//   so a segment whose blocks are all free is one free block again.
// - max_split_size (PyTorch's PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb; default unlimited, as
//   PyTorch's): a free block of at least max_split_size is never split and never serves a request
//   below max_split_size; a request of at least max_split_size takes such a block only when it is
//   less than kLargeBuffer bigger than the request. This keeps big segments whole for big requests.
// - empty_cache() gives back every segment that is one free block; a segment with a live block
//   stays, whole (its free parts are not returned).
// - Out of memory: when the backend cannot give a segment (raw_alloc returns nullptr), every cached
//   free segment is given back and the backend asked once more; then halfgrad::Error("<op>: out of
//   <backend> memory ...") names the request, the segment asked for and the totals.
// - Memory limit (0 = none), held in a MemoryBudget that several allocators may share (graph_pools.h:
//   the eager cache, every CUDA graph's private pool and the device buffers outside them count against
//   one limit, so that a budget is the real one). A new segment that would take the budget's reserved
//   bytes past the limit first makes the allocator give back its own cached free segments, then asks
//   the budget's reclaim hook to give back the other sharers' cached ones; if it would still pass the
//   limit, halfgrad::Error("<op>: out of <backend> memory: ... memory limit of L bytes ...") is thrown
//   and the backend is not called. The budget's reserved bytes never exceed the limit (set before the
//   first segment). While the budget's frees are blocked (a CUDA graph capture, when giving a segment
//   back would have to wait for the capturing stream), nothing is given back: the request fails instead.
// Streams: none. The owner orders all work on one stream (runtime.h), so a block released by the host
// may be handed out at once: its next user is queued after its last one.
// Threads: not locked; the owner locks (runtime.cpp holds a mutex around every call).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>

#include "core/cuda/allocator_stats.h"

namespace halfgrad::cuda {

constexpr size_t kMinBlockSize = 512;                  // every block size is a multiple of this
constexpr size_t kSmallSize = size_t{1} << 20;         // requests up to 1 MiB use the small pool
constexpr size_t kSmallBuffer = size_t{2} << 20;       // a small-pool segment: 2 MiB
constexpr size_t kMinLargeAlloc = size_t{10} << 20;    // requests below 10 MiB ...
constexpr size_t kLargeBuffer = size_t{20} << 20;      // ... get a 20 MiB large-pool segment
constexpr size_t kRoundLarge = size_t{2} << 20;        // larger ones a segment rounded up to 2 MiB
constexpr size_t kNoMaxSplitSize = std::numeric_limits<size_t>::max();

/// Where segments come from: cudaMalloc / cudaFree in runtime.cpp, fake addresses in the tests.
class SegmentBackend {
 public:
  virtual ~SegmentBackend() = default;
  /// A fresh segment of exactly `nbytes` (a multiple of 512), at least 256-byte aligned (cudaMalloc's
  /// guarantee; blocks inside it start at multiples of 512 bytes, so they keep it); nullptr when
  /// the device has no memory for it (any other failure throws halfgrad::Error).
  virtual void* raw_alloc(size_t nbytes) = 0;
  /// Gives back a segment from raw_alloc.
  virtual void raw_free(void* ptr) = 0;
  /// "CUDA": the word in "out of CUDA memory".
  virtual const char* name() const = 0;
};

/// One memory limit over everything that shares it: the segments of every BlockAllocator built with
/// it (BlockAllocatorOptions::budget) plus device memory taken outside them (`external`). Bytes.
/// Not locked: the owner of the allocators locks (runtime.cpp's mutex).
struct MemoryBudget {
  size_t limit = 0;          // reserved may not pass this; 0 = none
  size_t reserved = 0;       // every sharer's segments + external
  size_t peak_reserved = 0;  // since the last reset_peak_stats of a sharer
  size_t external = 0;       // device memory outside the allocators (cuda::DeviceBuffer)
  size_t ooms = 0;           // out-of-memory errors of any sharer, since start
  bool frees_blocked = false;  // true while nothing may be given back (a graph capture)
  /// Gives back the other sharers' cached free segments; returns the bytes given back. Empty: none.
  std::function<size_t()> reclaim;

  /// Whether `bytes` more would pass the limit.
  bool would_pass(size_t bytes) const { return limit != 0 && reserved + bytes > limit; }
  void add(size_t bytes) {
    reserved += bytes;
    if (reserved > peak_reserved) peak_reserved = reserved;
  }
};

struct BlockAllocatorOptions {
  size_t max_split_size = kNoMaxSplitSize;  // bytes; see the header comment
  size_t memory_limit = 0;                  // bytes of reserved memory at most; 0 = none (own budget only)
  /// A budget shared with other allocators (must outlive this one); null: the allocator has its own,
  /// whose limit is memory_limit. With a shared budget, memory_limit is ignored: the budget's rules.
  MemoryBudget* budget = nullptr;
};

class BlockAllocator {
 public:
  /// `backend` must outlive the allocator.
  explicit BlockAllocator(SegmentBackend& backend, BlockAllocatorOptions options = {});
  /// Gives every segment back to the backend, live blocks included (their pointers die with it).
  ~BlockAllocator();
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  /// A block of at least max(nbytes, 1) bytes (round_size of it, or more when the rest was too small
  /// to split); never null. `op` names the caller in errors. Throws halfgrad::Error when out of
  /// memory or over the memory limit (see the header comment); the allocator is unchanged then,
  /// except for the cached segments it gave back.
  void* allocate(size_t nbytes, const char* op);
  /// Returns a block to its pool, merged with its free neighbours. `nbytes` must be the nbytes the
  /// block was allocated with: a pointer that is not a live block, or another nbytes, throws
  /// halfgrad::Error naming `op` (a caller's bug; nothing is changed).
  void release(void* ptr, size_t nbytes, const char* op);
  /// The size of the live block at ptr (bytes), for the poison fill; throws if ptr is not one.
  size_t block_size(const void* ptr) const;

  /// Gives back every segment that is one free block; returns the bytes given back.
  size_t empty_cache();
  /// The budget's limit; 0 = none. Takes effect at the next new segment (a lower limit than reserved
  /// frees nothing now).
  void set_memory_limit(size_t bytes) { budget_->limit = bytes; }
  size_t memory_limit() const { return budget_->limit; }
  /// Peaks restart from the current allocated and reserved bytes (the budget's peak too).
  void reset_peak_stats();
  /// This allocator's statistics; the budget_* fields are the (shared) budget's.
  BlockAllocatorStats stats() const;

  /// max(n, 1) rounded up to a multiple of 512.
  static size_t round_size(size_t n);
  /// The pool a rounded size is served from.
  static bool is_small(size_t rounded) { return rounded <= kSmallSize; }
  /// The size of the segment a miss of `rounded` bytes asks the backend for.
  static size_t segment_size(size_t rounded);

 private:
  struct Block;
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  Pool& pool_for(size_t rounded) { return is_small(rounded) ? small_ : large_; }
  Block* find_free_block(Pool& pool, size_t rounded);
  Block* new_segment(Pool& pool, size_t rounded, size_t nbytes, const char* op);
  bool should_split(const Block& b, size_t rounded) const;
  void merge_into(Block* b, Block* neighbour);
  size_t release_free_segments();
  void free_cache_for(size_t bytes_wanted);
  void note_reserved(size_t bytes);

  SegmentBackend& backend_;
  BlockAllocatorOptions options_;
  MemoryBudget own_budget_;  // used when options_.budget is null
  MemoryBudget* budget_;
  Pool small_, large_;                             // free blocks
  std::unordered_map<const void*, Block*> live_;   // allocated blocks by address
  BlockAllocatorStats stats_;
};

}  // namespace halfgrad::cuda
