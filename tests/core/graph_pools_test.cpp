// Graph-private memory pools (core/cuda/graph_pools.h) on the CPU: a fake backend hands out fake
// addresses (never dereferenced), so the routing cuda::Graph relies on is checked in every build:
// requests during a capture never get an eager block and eager requests never get a pool block; a
// block freed during a capture is reused by the same capture; a block that outlives the capture
// returns to its pool; a retired pool gives its segments back only once its last block is released,
// and never during a capture.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>

#include "core/cuda/graph_pools.h"
#include "tests/check_error.h"

using namespace halfgrad;
using namespace halfgrad::cuda;
using halfgrad::testing::check_error;

namespace {

constexpr size_t KiB = 1024;

// Segments at 1 TiB + k * 4 GiB, never reused: a segment's address says which raw_alloc made it.
struct FakeSegments final : SegmentBackend {
  std::map<uintptr_t, size_t> segments;  // live: address -> size
  size_t allocs = 0, frees = 0;
  uintptr_t next = uintptr_t{1} << 40;
  void* raw_alloc(size_t n) override {
    const uintptr_t a = next;
    next += uintptr_t{4} << 30;
    segments[a] = n;
    ++allocs;
    return reinterpret_cast<void*>(a);
  }
  void raw_free(void* p) override {
    REQUIRE_MESSAGE(segments.erase(reinterpret_cast<uintptr_t>(p)) == 1, "raw_free of an address that is not a segment");
    ++frees;
  }
  const char* name() const override { return "fake"; }
};

// The segment (4 GiB slot) an address lies in.
uintptr_t segment_of(const void* p) { return reinterpret_cast<uintptr_t>(p) >> 32; }

}  // namespace

TEST_CASE("graph pools: a capture never takes an eager block, eager code never a pool block") {
  FakeSegments dev;
  GraphPools pools(dev, BlockAllocatorOptions{});
  void* eager_a = pools.allocate(64 * KiB, "test");
  pools.release(eager_a, 64 * KiB, "test");  // cached in the eager small pool, free
  const GraphPools::PoolId g = pools.create_pool();
  pools.begin_capture(g, "test");
  CHECK(pools.capturing() == g);
  void* captured = pools.allocate(64 * KiB, "test");
  CHECK(captured != eager_a);                               // the free eager block is not taken
  CHECK(segment_of(captured) != segment_of(eager_a));       // the pool has a segment of its own
  CHECK(dev.allocs == 2);
  pools.release(captured, 64 * KiB, "test");                // freed during the capture ...
  void* reused = pools.allocate(64 * KiB, "test");
  CHECK(reused == captured);                                // ... and reused by the same capture
  void* outlives = pools.allocate(128 * KiB, "test");       // e.g. a gradient the captured backward made
  CHECK(segment_of(outlives) == segment_of(captured));      // the pool's segment, split
  pools.release(reused, 64 * KiB, "test");
  pools.end_capture();
  CHECK(pools.capturing() == 0);

  // Eager again: the eager cache serves, never the pool's free block at `captured`.
  void* eager_b = pools.allocate(64 * KiB, "test");
  CHECK(eager_b == eager_a);
  void* eager_c = pools.allocate(64 * KiB, "test");
  CHECK(segment_of(eager_c) == segment_of(eager_a));
  CHECK(eager_c != captured);
  // The block that outlived the capture goes back to its pool, not to the eager cache.
  pools.release(outlives, 128 * KiB, "test");
  void* eager_d = pools.allocate(128 * KiB, "test");
  CHECK(segment_of(eager_d) != segment_of(outlives));
  // Stats: the eager allocator's count only eager blocks; the pool's its own segment.
  CHECK(pools.eager().stats().allocated_bytes == 64 * KiB + 64 * KiB + 128 * KiB);
  CHECK(pools.pool_stats(g).allocated_bytes == 0);
  CHECK(pools.pool_stats(g).reserved_bytes == kSmallBuffer);
  CHECK(pools.block_size(eager_d) == 128 * KiB);
  pools.release(eager_b, 64 * KiB, "test");
  pools.release(eager_c, 64 * KiB, "test");
  pools.release(eager_d, 128 * KiB, "test");
}

TEST_CASE("graph pools: a retired pool gives its segments back after its last live block, never during a capture") {
  FakeSegments dev;
  GraphPools pools(dev, BlockAllocatorOptions{});
  const GraphPools::PoolId g1 = pools.create_pool();
  pools.begin_capture(g1, "test");
  void* kept = pools.allocate(4 * KiB, "test");
  pools.end_capture();
  CHECK(dev.allocs == 1);

  pools.retire_pool(g1);  // the graph is destroyed, but `kept` (a tensor) is still alive
  CHECK(dev.frees == 0);
  CHECK(pools.num_pools() == 1);

  const GraphPools::PoolId g2 = pools.create_pool();
  pools.begin_capture(g2, "test");
  pools.release(kept, 4 * KiB, "test");  // g1's last block, released while g2 captures
  CHECK(dev.frees == 0);                 // the backend's free would wait for the stream: deferred
  void* in_g2 = pools.allocate(4 * KiB, "test");
  CHECK(segment_of(in_g2) != segment_of(kept));  // g1's free block is not g2's
  pools.end_capture();
  CHECK(dev.frees == 1);  // g1's segment, at the end of the capture
  CHECK(pools.num_pools() == 1);

  pools.release(in_g2, 4 * KiB, "test");
  pools.retire_pool(g2);  // no live block: freed at once
  CHECK(dev.frees == 2);
  CHECK(pools.num_pools() == 0);
  CHECK(dev.segments.empty());
}

TEST_CASE("graph pools: one capture at a time, known pools only, a block's size checked on release") {
  FakeSegments dev;
  GraphPools pools(dev, BlockAllocatorOptions{});
  const GraphPools::PoolId g = pools.create_pool();
  check_error([&] { pools.begin_capture(g + 1, "cuda::Graph::capture"); }, {"does not exist"});
  pools.begin_capture(g, "cuda::Graph::capture");
  const GraphPools::PoolId other = pools.create_pool();
  check_error([&] { pools.begin_capture(other, "cuda::Graph::capture"); }, {"already active"});
  check_error([&] { pools.retire_pool(g); }, {"being captured into"});
  void* p = pools.allocate(1 * KiB, "test");
  check_error([&] { pools.release(p, 2 * KiB, "cuda::release"); }, {"cuda::release"});
  pools.release(p, 1 * KiB, "test");  // the failed release changed nothing
  pools.end_capture();
  pools.retire_pool(g);
  check_error([&] { pools.retire_pool(g); }, {"already retired"});
  check_error([&] { (void)pools.pool_stats(g); }, {"does not exist"});
  pools.retire_pool(other);
}

TEST_CASE("graph pools: during a capture, another thread's request (capturer false) is served eagerly") {
  FakeSegments dev;
  GraphPools pools(dev, BlockAllocatorOptions{});
  void* eager = pools.allocate(8 * KiB, "test");
  const GraphPools::PoolId g = pools.create_pool();
  pools.begin_capture(g, "test");
  void* captured = pools.allocate(8 * KiB, "test");
  void* other_thread = pools.allocate(8 * KiB, "test", /*capturer=*/false);
  CHECK(segment_of(other_thread) == segment_of(eager));  // the eager cache's segment
  CHECK(segment_of(captured) != segment_of(eager));
  CHECK(pools.pool_stats(g).allocated_bytes == 8 * KiB);
  pools.release(other_thread, 8 * KiB, "test");  // back to the eager cache, during the capture
  pools.release(captured, 8 * KiB, "test");
  pools.end_capture();
  CHECK(pools.eager().stats().allocated_bytes == 8 * KiB);
  pools.release(eager, 8 * KiB, "test");
  pools.retire_pool(g);
}

// Issue 30: a memory limit is the real one only if a CUDA graph's pool and the device buffers
// outside the allocator count against it (14_equal_memory ran out of memory with a graph pool of
// 2 GiB held beside a 2 GiB limit).
TEST_CASE("graph pools: one memory limit over the eager cache, every graph pool and external buffers") {
  constexpr size_t MiB = 1024 * KiB;
  FakeSegments dev;
  GraphPools pools(dev, BlockAllocatorOptions{kNoMaxSplitSize, 64 * MiB});
  void* eager = pools.allocate(30 * MiB, "test");  // a 30 MiB segment
  const GraphPools::PoolId g = pools.create_pool();
  pools.begin_capture(g, "test");
  void* captured = pools.allocate(30 * MiB, "test");  // 60 of 64 MiB
  CHECK(pools.budget().reserved == 60 * MiB);
  // A third 30 MiB segment would pass the limit: refused, naming the totals, though neither the
  // eager allocator nor the pool alone is over it.
  check_error([&] { pools.allocate(30 * MiB, "capture"); },
              {"capture: out of fake memory", "past the memory limit of 67108864 bytes",
               "all pools and buffers under the limit: 62914560 reserved", "during a CUDA graph capture"});
  pools.end_capture();
  check_error([&] { pools.allocate(30 * MiB, "eager"); }, {"eager: out of fake memory", "past the memory limit"});
  check_error([&] { pools.reserve_external(8 * MiB, "cuda::DeviceBuffer"); },
              {"cuda::DeviceBuffer: out of fake memory: a buffer of 8388608 bytes", "past the memory limit"});
  CHECK(pools.budget().ooms == 3);
  pools.reserve_external(4 * MiB, "cuda::DeviceBuffer");  // 64 of 64 MiB: fits exactly
  CHECK(pools.budget().reserved == 64 * MiB);
  CHECK(pools.budget().external == 4 * MiB);
  pools.release_external(4 * MiB);

  // Released eager memory is cached, and given back when a graph pool (or a buffer) needs the room;
  // a live graph's free blocks are its replays' memory and are never given back.
  pools.release(eager, 30 * MiB, "test");
  CHECK(pools.budget().reserved == 60 * MiB);
  pools.reserve_external(30 * MiB, "cuda::DeviceBuffer");  // takes the eager cache's room
  CHECK(pools.eager().stats().reserved_bytes == 0);
  CHECK(pools.budget().reserved == 60 * MiB);
  pools.release(captured, 30 * MiB, "test");  // free in the live graph's pool: stays reserved
  check_error([&] { pools.reserve_external(30 * MiB, "cuda::DeviceBuffer"); }, {"past the memory limit"});
  CHECK(pools.pool_stats(g).reserved_bytes == 30 * MiB);

  // The graph goes: its pool's segments leave the budget with it.
  pools.retire_pool(g);
  CHECK(pools.num_pools() == 0);
  CHECK(pools.budget().reserved == 30 * MiB);
  pools.release_external(30 * MiB);
  CHECK(pools.budget().reserved == 0);
  CHECK(pools.budget().peak_reserved == 64 * MiB);
  CHECK(pools.eager().stats().budget_peak_reserved_bytes == 64 * MiB);
}

TEST_CASE("graph pools: under a limit, a capture starts by giving back the eager cache") {
  constexpr size_t MiB = 1024 * KiB;
  FakeSegments dev;
  GraphPools pools(dev, BlockAllocatorOptions{kNoMaxSplitSize, 40 * MiB});
  pools.release(pools.allocate(30 * MiB, "test"), 30 * MiB, "test");  // 30 MiB cached
  const GraphPools::PoolId g = pools.create_pool();
  pools.begin_capture(g, "test");
  CHECK(pools.budget().reserved == 0);  // given back before the capture, which could not give it back
  void* p = pools.allocate(30 * MiB, "test");
  CHECK(pools.budget().reserved == 30 * MiB);
  pools.end_capture();
  pools.release(p, 30 * MiB, "test");
  pools.retire_pool(g);
  CHECK(pools.budget().reserved == 0);
  CHECK(dev.segments.empty());
}
