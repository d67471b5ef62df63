// graph_pools.cpp - the routing of graph_pools.h: eager requests to one BlockAllocator, requests
// during a capture to the capturing graph's own, each release back to where its block came from.
#include "core/cuda/graph_pools.h"

#include "core/error.h"

namespace halfgrad::cuda {

namespace {
BlockAllocatorOptions sharing(BlockAllocatorOptions o, MemoryBudget* budget) {
  o.budget = budget;
  return o;
}
}  // namespace

GraphPools::GraphPools(SegmentBackend& backend, BlockAllocatorOptions eager_options)
    : backend_(backend), eager_(backend, sharing(eager_options, &budget_)) {
  budget_.limit = eager_options.memory_limit;
  budget_.reclaim = [this] { return reclaim_cached(); };
}

GraphPools::PoolId GraphPools::create_pool() {
  const PoolId id = next_id_++;
  // The shared budget (see the header); PyTorch's default max_split_size.
  pools_[id].blocks = std::make_unique<BlockAllocator>(backend_, sharing(BlockAllocatorOptions{}, &budget_));
  return id;
}

size_t GraphPools::reclaim_cached() {
  if (budget_.frees_blocked) return 0;
  size_t freed = eager_.empty_cache();
  for (auto& kv : pools_)
    if (kv.second.retired) freed += kv.second.blocks->empty_cache();
  return freed;
}

void GraphPools::reserve_external(size_t nbytes, const char* op) {
  if (budget_.would_pass(nbytes)) reclaim_cached();
  if (budget_.would_pass(nbytes)) {
    ++budget_.ooms;
    HG_FAIL(op << ": out of " << backend_.name() << " memory: a buffer of " << nbytes
               << " bytes would take reserved memory to " << budget_.reserved + nbytes << " bytes, past the memory limit of "
               << budget_.limit << " bytes (all pools and buffers: " << budget_.reserved << " reserved, of which "
               << budget_.external << " in device buffers, after freeing the cache)");
  }
  budget_.add(nbytes);
  budget_.external += nbytes;
}

void GraphPools::release_external(size_t nbytes) {
  budget_.reserved -= nbytes;
  budget_.external -= nbytes;
}

void GraphPools::begin_capture(PoolId pool, const char* op) {
  HG_CHECK(capturing_ == 0, op << ": a capture into graph pool " << capturing_
                               << " is already active; one capture at a time (one stream)");
  const auto it = pools_.find(pool);
  HG_CHECK(it != pools_.end() && !it->second.retired, op << ": graph pool " << pool << " does not exist or is retired");
  // Under a limit, the capture may need what the eager cache holds, and nothing can be given back
  // while it runs (see the header).
  if (budget_.limit != 0) reclaim_cached();
  capturing_ = pool;
  budget_.frees_blocked = true;
}

void GraphPools::end_capture() {
  capturing_ = 0;
  budget_.frees_blocked = false;
  free_retired_pools();
}

void GraphPools::retire_pool(PoolId pool) {
  const auto it = pools_.find(pool);
  HG_CHECK(it != pools_.end() && !it->second.retired, "GraphPools::retire_pool: graph pool " << pool
                                                          << " does not exist or is already retired");
  HG_CHECK(capturing_ != pool, "GraphPools::retire_pool: graph pool " << pool << " is being captured into");
  it->second.retired = true;
  free_retired_pools();
}

void GraphPools::free_retired_pools() {
  if (capturing_ != 0) return;  // the backend's free waits for the stream: not during a capture
  for (auto it = pools_.begin(); it != pools_.end();) {
    if (it->second.retired && it->second.live == 0) it = pools_.erase(it);  // ~BlockAllocator gives the segments back
    else ++it;
  }
}

void* GraphPools::allocate(size_t nbytes, const char* op, bool capturer) {
  if (capturing_ == 0 || !capturer) return eager_.allocate(nbytes, op);
  Pool& pool = pools_.at(capturing_);
  void* p = pool.blocks->allocate(nbytes, op);
  owner_[p] = capturing_;
  ++pool.live;
  return p;
}

void GraphPools::release(void* ptr, size_t nbytes, const char* op) {
  const auto it = owner_.find(ptr);
  if (it == owner_.end()) {
    eager_.release(ptr, nbytes, op);
    return;
  }
  Pool& pool = pools_.at(it->second);
  pool.blocks->release(ptr, nbytes, op);  // throws on a wrong nbytes, changing nothing
  owner_.erase(it);
  --pool.live;
  if (pool.retired && pool.live == 0) free_retired_pools();
}

size_t GraphPools::block_size(const void* ptr) const {
  const auto it = owner_.find(ptr);
  return it == owner_.end() ? eager_.block_size(ptr) : pools_.at(it->second).blocks->block_size(ptr);
}

BlockAllocatorStats GraphPools::pool_stats(PoolId pool) const {
  const auto it = pools_.find(pool);
  HG_CHECK(it != pools_.end(), "GraphPools::pool_stats: graph pool " << pool << " does not exist");
  return it->second.blocks->stats();
}

}  // namespace halfgrad::cuda
