// block_allocator.cpp - the splitting, best-fit caching policy of block_allocator.h (PyTorch's
// CUDACachingAllocator: round_size, get_allocation_size, get_free_block, should_split,
// try_merge_blocks, release_cached_blocks), over an abstract SegmentBackend.
#include "core/cuda/block_allocator.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace halfgrad::cuda {

// One block: a run of bytes [ptr, ptr + size) inside one segment. The blocks of a segment form a
// doubly linked list in address order; the segment's first block has prev == nullptr and starts at
// the segment's address (the pointer raw_free takes back).
struct BlockAllocator::Block {
  size_t size = 0;       // bytes, a multiple of 512
  size_t requested = 0;  // the caller's nbytes while allocated (release checks it)
  uintptr_t addr = 0;
  bool small = false;    // the pool of the segment
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
  bool whole_segment() const { return prev == nullptr && next == nullptr; }
};

bool BlockAllocator::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->addr < b->addr;
}

BlockAllocator::BlockAllocator(SegmentBackend& backend, BlockAllocatorOptions options)
    : backend_(backend), options_(options), budget_(options.budget ? options.budget : &own_budget_) {
  own_budget_.limit = options.memory_limit;
  // PyTorch's rule for max_split_size_mb: at most a 20 MiB segment's size would keep a fresh
  // segment's rest from ever being split for a small request (every request a new segment).
  HG_CHECK(options_.max_split_size > kLargeBuffer,
           "BlockAllocator: max_split_size " << options_.max_split_size << " bytes; expected more than "
                                             << kLargeBuffer << " (20 MiB, as PyTorch's max_split_size_mb)");
}

BlockAllocator::~BlockAllocator() {
  // Collect every block once (free ones are in the pools, live ones in live_), give back each
  // segment through its first block, then delete the blocks.
  std::vector<Block*> all(small_.begin(), small_.end());
  all.insert(all.end(), large_.begin(), large_.end());
  for (auto& kv : live_) all.push_back(kv.second);
  for (Block* b : all)
    if (b->prev == nullptr) backend_.raw_free(reinterpret_cast<void*>(b->addr));
  for (Block* b : all) delete b;
  budget_->reserved -= stats_.reserved_bytes;
}

size_t BlockAllocator::round_size(size_t n) {
  if (n < kMinBlockSize) return kMinBlockSize;
  return (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t BlockAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

// PyTorch's get_free_block: the smallest free block >= rounded (lowest address among equals), unless
// max_split_size forbids it (an oversize block for a small request, or an oversize block more than
// kLargeBuffer bigger than an oversize request). The block is taken out of the pool.
BlockAllocator::Block* BlockAllocator::find_free_block(Pool& pool, size_t rounded) {
  Block key;
  key.size = rounded;
  key.addr = 0;
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  const size_t max_split = options_.max_split_size;
  if (rounded < max_split && (*it)->size >= max_split) return nullptr;
  if (rounded >= max_split && (*it)->size >= rounded + kLargeBuffer) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

void BlockAllocator::note_reserved(size_t bytes) {
  stats_.reserved_bytes += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  budget_->add(bytes);
}

// Gives back this allocator's cached free segments, then the other sharers' (the budget's reclaim
// hook); nothing while the budget's frees are blocked (a capture).
void BlockAllocator::free_cache_for(size_t bytes_wanted) {
  if (budget_->frees_blocked) return;
  release_free_segments();
  if (budget_->would_pass(bytes_wanted) && budget_->reclaim) budget_->reclaim();
}

// A fresh segment for a miss: within the memory limit, from the backend, with one retry after giving
// back the cache. Throws (counting an OOM) when neither works.
BlockAllocator::Block* BlockAllocator::new_segment(Pool& pool, size_t rounded, size_t nbytes, const char* op) {
  const size_t seg = segment_size(rounded);
  const size_t limit = budget_->limit;
  if (budget_->would_pass(seg)) free_cache_for(seg);
  if (budget_->would_pass(seg)) {
    ++stats_.ooms;
    ++budget_->ooms;
    const bool shared = budget_ != &own_budget_;
    HG_FAIL(op << ": out of " << backend_.name() << " memory: allocating " << nbytes << " bytes needs a new "
               << seg << "-byte segment, which would take reserved memory to " << budget_->reserved + seg
               << " bytes, past the memory limit of " << limit << " bytes (this pool: " << stats_.allocated_bytes
               << " bytes allocated, " << stats_.reserved_bytes << " reserved"
               << (shared ? "; all pools and buffers under the limit: " + std::to_string(budget_->reserved) +
                                " reserved, of which " + std::to_string(budget_->external) + " in device buffers"
                          : std::string())
               << (budget_->frees_blocked ? "; during a CUDA graph capture, when no cached segment can be given back)"
                                          : ", after freeing the cache)"));
  }
  void* p = backend_.raw_alloc(seg);
  if (p == nullptr && !budget_->frees_blocked) {
    ++stats_.alloc_retries;
    free_cache_for(seg);
    p = backend_.raw_alloc(seg);
  }
  if (p == nullptr) {
    ++stats_.ooms;
    ++budget_->ooms;
    HG_FAIL(op << ": out of " << backend_.name() << " memory allocating " << nbytes << " bytes (a " << seg
               << "-byte segment; " << stats_.allocated_bytes << " bytes allocated, " << stats_.reserved_bytes
               << " reserved after freeing the cache, " << stats_.segments << " segments)");
  }
  ++stats_.cuda_malloc_calls;
  ++stats_.segments;
  note_reserved(seg);
  Block* b = new Block();
  b->size = seg;
  b->addr = reinterpret_cast<uintptr_t>(p);
  b->small = &pool == &small_;
  return b;
}

// PyTorch's should_split: the rest is worth a block of its own.
bool BlockAllocator::should_split(const Block& b, size_t rounded) const {
  const size_t rest = b.size - rounded;
  if (b.small) return rest >= kMinBlockSize;
  return rounded < options_.max_split_size && rest > kSmallSize;
}

void* BlockAllocator::allocate(size_t nbytes, const char* op) {
  // Beyond 2^62 B the rounding below could wrap around; no device has that much memory anyway.
  HG_CHECK(nbytes <= (size_t{1} << 62), op << ": out of " << backend_.name() << " memory: a request of " << nbytes
                                            << " bytes is beyond any device");
  const size_t rounded = round_size(nbytes);
  Pool& pool = pool_for(rounded);
  Block* b = find_free_block(pool, rounded);
  if (b) ++stats_.hits;
  else b = new_segment(pool, rounded, nbytes, op);
  if (should_split(*b, rounded)) {
    // The request takes the front; the rest follows it in the segment's list, free.
    Block* rest = new Block();
    rest->size = b->size - rounded;
    rest->addr = b->addr + rounded;
    rest->small = b->small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    pool.insert(rest);
    ++stats_.splits;
  }
  b->allocated = true;
  b->requested = nbytes;
  live_.emplace(reinterpret_cast<void*>(b->addr), b);
  ++stats_.active_blocks;
  stats_.allocated_bytes += b->size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return reinterpret_cast<void*>(b->addr);
}

// b absorbs its free neighbour (which is out of the pool already); PyTorch's try_merge_blocks.
void BlockAllocator::merge_into(Block* b, Block* neighbour) {
  if (neighbour == b->prev) {
    b->addr = neighbour->addr;
    b->prev = neighbour->prev;
    if (b->prev) b->prev->next = b;
  } else {
    b->next = neighbour->next;
    if (b->next) b->next->prev = b;
  }
  b->size += neighbour->size;
  delete neighbour;
  ++stats_.merges;
}

void BlockAllocator::release(void* ptr, size_t nbytes, const char* op) {
  auto it = live_.find(ptr);
  HG_CHECK(it != live_.end(), op << ": pointer " << ptr << " is not a live block of the " << backend_.name()
                                 << " allocator (freed twice, or never allocated here)");
  Block* b = it->second;
  HG_CHECK(b->requested == nbytes, op << ": block " << ptr << " was allocated with " << b->requested
                                      << " bytes but released with " << nbytes);
  live_.erase(it);
  b->allocated = false;
  --stats_.active_blocks;
  stats_.allocated_bytes -= b->size;
  Pool& pool = b->small ? small_ : large_;
  for (Block* n : {b->prev, b->next}) {
    if (n && !n->allocated) {
      pool.erase(n);
      merge_into(b, n);
    }
  }
  pool.insert(b);
}

size_t BlockAllocator::block_size(const void* ptr) const {
  auto it = live_.find(ptr);
  HG_CHECK(it != live_.end(), "cuda allocator: pointer " << ptr << " is not a live block");
  return it->second->size;
}

// PyTorch's release_cached_blocks: every segment that is one free block goes back to the backend.
size_t BlockAllocator::release_free_segments() {
  size_t freed = 0;
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (!b->whole_segment()) {
        ++it;
        continue;
      }
      // Given back first: when raw_free throws (cudaFree reports an earlier kernel fault), the block
      // is still in its pool and the statistics still count it, so the state stays consistent.
      backend_.raw_free(reinterpret_cast<void*>(b->addr));
      it = pool->erase(it);
      ++stats_.cuda_free_calls;
      --stats_.segments;
      stats_.reserved_bytes -= b->size;
      budget_->reserved -= b->size;
      freed += b->size;
      delete b;
    }
  }
  return freed;
}

size_t BlockAllocator::empty_cache() { return release_free_segments(); }

void BlockAllocator::reset_peak_stats() {
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  budget_->peak_reserved = budget_->reserved;
}

BlockAllocatorStats BlockAllocator::stats() const {
  BlockAllocatorStats s = stats_;
  s.budget_reserved_bytes = budget_->reserved;
  s.budget_peak_reserved_bytes = budget_->peak_reserved;
  s.budget_external_bytes = budget_->external;
  s.budget_ooms = budget_->ooms;
  s.largest_free_block = 0;
  s.inactive_split_bytes = 0;
  s.inactive_split_blocks = 0;
  for (const Pool* pool : {&small_, &large_}) {
    if (!pool->empty()) s.largest_free_block = std::max(s.largest_free_block, (*pool->rbegin())->size);
    for (const Block* b : *pool) {
      if (b->whole_segment()) continue;
      s.inactive_split_bytes += b->size;
      ++s.inactive_split_blocks;
    }
  }
  return s;
}

}  // namespace halfgrad::cuda
