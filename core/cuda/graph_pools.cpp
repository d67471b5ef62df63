// graph_pools.cpp - the routing of graph_pools.h: eager requests to one BlockAllocator, requests
// during a capture to the capturing graph's own, each release back to where its block came from.
#include "core/cuda/graph_pools.h"

#include "core/error.h"

namespace halfgrad::cuda {

GraphPools::GraphPools(SegmentBackend& backend, BlockAllocatorOptions eager_options)
    : backend_(backend), eager_(backend, eager_options) {}

GraphPools::PoolId GraphPools::create_pool() {
  const PoolId id = next_id_++;
  // No memory limit inside a pool (see the header); PyTorch's default max_split_size.
  pools_[id].blocks = std::make_unique<BlockAllocator>(backend_, BlockAllocatorOptions{});
  return id;
}

void GraphPools::begin_capture(PoolId pool, const char* op) {
  HG_CHECK(capturing_ == 0, op << ": a capture into graph pool " << capturing_
                               << " is already active; one capture at a time (one stream)");
  const auto it = pools_.find(pool);
  HG_CHECK(it != pools_.end() && !it->second.retired, op << ": graph pool " << pool << " does not exist or is retired");
  capturing_ = pool;
}

void GraphPools::end_capture() {
  capturing_ = 0;
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
