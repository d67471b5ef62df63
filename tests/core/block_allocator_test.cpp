// The CUDA caching allocator's policy (core/cuda/block_allocator.h) on the CPU: a fake backend hands
// out fake addresses (never dereferenced) from a device of a chosen capacity, so every rule of
// PyTorch's CUDACachingAllocator that halfgrad copies is checked here, in every build: rounding, pool
// and segment choice, split, best fit, merge, fragmentation, empty_cache, the memory limit and the
// out-of-memory retry. Expected figures are worked out by hand in the comments beside them.
#include <doctest/doctest.h>

#include <cstdint>
#include <iostream>
#include <map>

#include "core/cuda/block_allocator.h"
#include "tests/check_error.h"
#include "tests/core/allocation_pattern.h"

using namespace halfgrad;
using namespace halfgrad::cuda;
using halfgrad::testing::check_error;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Segments at 1 TiB + k * 4 GiB (far apart, so no two fake segments are adjacent), from a device of
// `capacity` bytes: raw_alloc returns nullptr when the live segments would pass it.
struct FakeDevice final : SegmentBackend {
  size_t capacity = size_t{1} << 40;
  size_t live_bytes = 0;
  size_t allocs = 0, frees = 0, failures = 0;
  std::map<uintptr_t, size_t> segments;  // address -> size
  uintptr_t next = uintptr_t{1} << 40;

  void* raw_alloc(size_t n) override {
    CHECK(n % kMinBlockSize == 0);
    if (live_bytes + n > capacity) {
      ++failures;
      return nullptr;
    }
    const uintptr_t a = next;
    next += uintptr_t{4} << 30;
    segments[a] = n;
    live_bytes += n;
    ++allocs;
    return reinterpret_cast<void*>(a);
  }
  void raw_free(void* p) override {
    auto it = segments.find(reinterpret_cast<uintptr_t>(p));
    REQUIRE_MESSAGE(it != segments.end(), "raw_free of an address that is not a segment");
    live_bytes -= it->second;
    segments.erase(it);
    ++frees;
  }
  const char* name() const override { return "fake"; }
};

uintptr_t addr(void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

TEST_CASE("block allocator: sizes round up to 512 B; pool and segment size follow PyTorch's thresholds") {
  CHECK(BlockAllocator::round_size(0) == 512);
  CHECK(BlockAllocator::round_size(1) == 512);
  CHECK(BlockAllocator::round_size(512) == 512);
  CHECK(BlockAllocator::round_size(513) == 1024);
  CHECK(BlockAllocator::round_size(3 * MiB + 1) == 3 * MiB + 512);
  CHECK(BlockAllocator::is_small(1 * MiB));
  CHECK_FALSE(BlockAllocator::is_small(1 * MiB + 512));
  CHECK(BlockAllocator::segment_size(512) == 2 * MiB);               // small pool: 2 MiB segments
  CHECK(BlockAllocator::segment_size(1 * MiB) == 2 * MiB);
  CHECK(BlockAllocator::segment_size(1 * MiB + 512) == 20 * MiB);    // 1..10 MiB: a 20 MiB segment
  CHECK(BlockAllocator::segment_size(10 * MiB - 512) == 20 * MiB);
  CHECK(BlockAllocator::segment_size(10 * MiB) == 10 * MiB);         // from 10 MiB: rounded to 2 MiB
  CHECK(BlockAllocator::segment_size(10 * MiB + 512) == 12 * MiB);

  FakeDevice dev;
  BlockAllocator a(dev);
  void* small = a.allocate(1 * MiB, "t");
  void* mid = a.allocate(1 * MiB + 1, "t");
  void* big = a.allocate(25 * MiB + 1, "t");  // fits no rest: a segment of 25 MiB + 512 rounded to 2 MiB
  CHECK(dev.segments.at(addr(small)) == 2 * MiB);
  CHECK(dev.segments.at(addr(mid)) == 20 * MiB);
  CHECK(dev.segments.at(addr(big)) == 26 * MiB);
  CHECK(a.block_size(small) == 1 * MiB);
  CHECK(a.block_size(mid) == 1 * MiB + 512);
  // The pools are apart: with the small pool's 2 MiB segment free again, a 1.5 MiB request still
  // comes from the large pool (the 20 MiB segment's rest, right behind `mid`) ...
  a.release(small, 1 * MiB, "t");
  void* again = a.allocate(1 * MiB + 512 * KiB, "t");
  CHECK(addr(again) == addr(mid) + 1 * MiB + 512);
  CHECK(dev.allocs == 3);
  void* tiny = a.allocate(100, "t");  // ... and a small request from the small pool's free segment
  CHECK(addr(tiny) == addr(small));
  CHECK(dev.allocs == 3);
}

TEST_CASE("block allocator: a block is split when the rest is big enough, and the rest serves the next request") {
  FakeDevice dev;
  BlockAllocator a(dev);
  SUBCASE("small pool: a rest of >= 512 B is split off") {
    void* p = a.allocate(1000, "t");  // 1024 B at the front of a 2 MiB segment
    void* q = a.allocate(4096, "t");  // from the rest, right behind p
    CHECK(addr(q) == addr(p) + 1024);
    const auto s = a.stats();
    CHECK(s.cuda_malloc_calls == 1);
    CHECK(s.splits == 2);
    CHECK(s.hits == 1);
    CHECK(s.allocated_bytes == 1024 + 4096);
    CHECK(s.reserved_bytes == 2 * MiB);
    CHECK(s.largest_free_block == 2 * MiB - 1024 - 4096);
  }
  SUBCASE("large pool: a rest of <= 1 MiB stays in the block, which counts as allocated") {
    void* p = a.allocate(3 * MiB, "t");   // 20 MiB segment, 17 MiB rest split off
    void* q = a.allocate(16 * MiB, "t");  // takes the 17 MiB rest; its 1 MiB rest is not > 1 MiB
    CHECK(addr(q) == addr(p) + 3 * MiB);
    CHECK(a.block_size(q) == 17 * MiB);
    const auto s = a.stats();
    CHECK(s.splits == 1);
    CHECK(s.allocated_bytes == 20 * MiB);
    CHECK(s.largest_free_block == 0);
    CHECK(s.segments == 1);
  }
}

TEST_CASE("block allocator: a released block merges with free neighbours on both sides into one segment block") {
  FakeDevice dev;
  BlockAllocator a(dev);
  void* x = a.allocate(64 * KiB, "t");
  void* y = a.allocate(64 * KiB, "t");
  void* z = a.allocate(64 * KiB, "t");  // segment: x y z [rest of 2 MiB - 192 KiB]
  CHECK(a.stats().splits == 3);
  a.release(x, 64 * KiB, "t");  // no free neighbour: x stays a block of its own
  CHECK(a.stats().merges == 0);
  a.release(z, 64 * KiB, "t");  // merges with the rest behind it
  CHECK(a.stats().merges == 1);
  CHECK(a.stats().inactive_split_blocks == 2);  // x, and z + rest
  CHECK(a.stats().inactive_split_bytes == 2 * MiB - 64 * KiB);
  a.release(y, 64 * KiB, "t");  // merges with x before it and z + rest after it
  const auto s = a.stats();
  CHECK(s.merges == 3);
  CHECK(s.largest_free_block == 2 * MiB);  // the whole segment again
  CHECK(s.inactive_split_bytes == 0);
  CHECK(s.inactive_split_blocks == 0);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.active_blocks == 0);
  // The merged block serves the biggest small-pool request (1 MiB) from the segment's start.
  void* w = a.allocate(1 * MiB, "t");
  CHECK(addr(w) == addr(x));
  CHECK(a.stats().cuda_malloc_calls == 1);
}

TEST_CASE("block allocator: best fit takes the smallest adequate free block, the lowest address among equals") {
  FakeDevice dev;
  BlockAllocator a(dev);
  // One small segment laid out as: f8 L f4 L f16 L f4b L [rest], where f* will be freed and L stay live.
  void* f8 = a.allocate(8 * KiB, "t");
  void* l1 = a.allocate(512, "t");
  void* f4 = a.allocate(4 * KiB, "t");
  void* l2 = a.allocate(512, "t");
  void* f16 = a.allocate(16 * KiB, "t");
  void* l3 = a.allocate(512, "t");
  void* f4b = a.allocate(4 * KiB, "t");
  void* l4 = a.allocate(512, "t");
  for (void* p : {f16, f4b, f8, f4}) a.release(p, a.block_size(p), "t");
  CHECK(addr(a.allocate(3 * KiB, "t")) == addr(f4));    // 4 KiB fits; f4 is below f4b
  CHECK(addr(a.allocate(4 * KiB, "t")) == addr(f4b));   // the other 4 KiB block
  CHECK(addr(a.allocate(5 * KiB, "t")) == addr(f8));    // 8 KiB is the smallest that fits 5 KiB
  CHECK(addr(a.allocate(9 * KiB, "t")) == addr(f16));   // only 16 KiB (or the rest) fits 9 KiB
  CHECK(a.stats().cuda_malloc_calls == 1);
  (void)l1, (void)l2, (void)l3, (void)l4;
}

TEST_CASE("block allocator: alternating frees fragment a segment; the stats show it, and merging heals it") {
  FakeDevice dev;
  BlockAllocator a(dev);
  void* b[8];
  for (auto& p : b) p = a.allocate(256 * KiB, "t");  // 8 x 256 KiB = one 2 MiB segment, no rest
  CHECK(a.stats().segments == 1);
  CHECK(a.stats().splits == 7);  // the eighth takes the last 256 KiB whole
  for (int i = 0; i < 8; i += 2) a.release(b[i], 256 * KiB, "t");
  auto s = a.stats();
  CHECK(s.allocated_bytes == 1 * MiB);
  CHECK(s.reserved_bytes == 2 * MiB);
  CHECK(s.inactive_split_bytes == 1 * MiB);  // four free holes of 256 KiB between live blocks
  CHECK(s.inactive_split_blocks == 4);
  CHECK(s.largest_free_block == 256 * KiB);
  CHECK(s.merges == 0);
  // 1 MiB is free but no hole fits 512 KiB: a new segment.
  void* big = a.allocate(512 * KiB, "t");
  CHECK(a.stats().cuda_malloc_calls == 2);
  CHECK(dev.segments.count(addr(big)) == 1);
  for (int i = 1; i < 8; i += 2) a.release(b[i], 256 * KiB, "t");
  s = a.stats();
  CHECK(s.merges == 7);  // b1 with b0 and b2, b3 with b2.. and b4, ..., b7 with b6 only
  CHECK(s.inactive_split_blocks == 1);  // the second segment's rest, beside the live 512 KiB block
  CHECK(s.inactive_split_bytes == 2 * MiB - 512 * KiB);
  CHECK(s.largest_free_block == 2 * MiB);
}

TEST_CASE("block allocator: empty_cache gives back only segments with no live block") {
  FakeDevice dev;
  BlockAllocator a(dev);
  void* keep = a.allocate(100 * KiB, "t");       // small segment A, stays partly live
  void* drop = a.allocate(5 * MiB, "t");         // large segment B (20 MiB)
  void* drop2 = a.allocate(16 * MiB, "t");       // B's 15 MiB rest is too small: large segment C (16 MiB)
  void* part = a.allocate(3 * MiB, "t");         // from B's rest
  a.release(drop2, 16 * MiB, "t");
  a.release(drop, 5 * MiB, "t");                 // B still holds `part`
  CHECK(a.empty_cache() == 16 * MiB);            // only C
  CHECK(dev.frees == 1);
  auto s = a.stats();
  CHECK(s.segments == 2);
  CHECK(s.reserved_bytes == 22 * MiB);
  CHECK(s.cuda_free_calls == 1);
  a.release(part, 3 * MiB, "t");
  CHECK(a.empty_cache() == 20 * MiB);            // B is one free block now
  a.release(keep, 100 * KiB, "t");
  CHECK(a.empty_cache() == 2 * MiB);
  s = a.stats();
  CHECK(s.segments == 0);
  CHECK(s.reserved_bytes == 0);
  CHECK(dev.segments.empty());
  CHECK(s.peak_reserved_bytes == 38 * MiB);
}

TEST_CASE("block allocator: the memory limit frees the cache first, then refuses with an error naming it") {
  FakeDevice dev;
  BlockAllocator a(dev, BlockAllocatorOptions{kNoMaxSplitSize, 24 * MiB});
  CHECK(a.memory_limit() == 24 * MiB);
  void* p = a.allocate(3 * MiB, "t");       // 20 MiB segment
  void* q = a.allocate(100 * KiB, "t");     // 2 MiB segment: 22 MiB reserved
  void* r = a.allocate(3 * MiB, "t");       // from the 20 MiB segment's rest: no new segment
  CHECK(a.stats().reserved_bytes == 22 * MiB);
  check_error([&] { a.allocate(18 * MiB, "conv3d"); },
              {"conv3d", "out of fake memory", "18874368 bytes", "memory limit of 25165824 bytes"});
  CHECK(a.stats().ooms == 1);
  CHECK(dev.allocs == 2);                   // the backend was not asked
  CHECK(a.stats().reserved_bytes == 22 * MiB);
  for (void* x : {p, r}) a.release(x, 3 * MiB, "t");
  a.release(q, 100 * KiB, "t");
  // 21 MiB fits no cached block and needs a 22 MiB segment: over the limit with the cache (22 + 22),
  // within it once both cached segments are given back.
  void* big = a.allocate(21 * MiB, "t");
  CHECK(dev.frees == 2);
  CHECK(a.stats().reserved_bytes == 22 * MiB);
  CHECK(a.stats().peak_reserved_bytes == 22 * MiB);
  a.release(big, 21 * MiB, "t");
  a.set_memory_limit(0);                    // no limit: a 30 MiB segment beside the cached 22 MiB
  void* huge = a.allocate(30 * MiB, "t");
  CHECK(a.stats().reserved_bytes == 52 * MiB);
  a.release(huge, 30 * MiB, "t");
}

TEST_CASE("block allocator: a failing backend makes it give back the cache and retry once, then throw") {
  FakeDevice dev;
  dev.capacity = 40 * MiB;
  BlockAllocator a(dev);
  void* p = a.allocate(15 * MiB, "t");  // 16 MiB segment
  a.release(p, 15 * MiB, "t");          // cached
  void* q = a.allocate(30 * MiB, "t");  // 16 + 30 > 40: fails, cache given back, retried
  auto s = a.stats();
  CHECK(dev.failures == 1);
  CHECK(s.alloc_retries == 1);
  CHECK(s.cuda_malloc_calls == 2);
  CHECK(s.cuda_free_calls == 1);
  CHECK(s.reserved_bytes == 30 * MiB);
  check_error([&] { a.allocate(~size_t{0}, "Tensor::empty"); }, {"Tensor::empty", "out of fake memory", "beyond any device"});
  check_error([&] { a.allocate(20 * MiB, "Tensor::empty"); },
              {"Tensor::empty", "out of fake memory allocating 20971520 bytes", "31457280 bytes allocated",
               "31457280 reserved"});
  s = a.stats();
  CHECK(dev.failures == 3);
  CHECK(s.alloc_retries == 2);
  CHECK(s.ooms == 1);
  CHECK(s.allocated_bytes == 30 * MiB);  // unchanged by the failure; the allocator still works
  void* r = a.allocate(10 * MiB, "t");  // a 10 MiB segment still fits: 30 + 10 <= 40
  CHECK(a.stats().reserved_bytes == 40 * MiB);
  a.release(r, 10 * MiB, "t");
  a.release(q, 30 * MiB, "t");
}

TEST_CASE("block allocator: max_split_size at or below 20 MiB is refused (PyTorch's bound)") {
  FakeDevice dev;
  CHECK_THROWS_WITH_AS(BlockAllocator(dev, BlockAllocatorOptions{2 * MiB, 0}), doctest::Contains("max_split_size"),
                       halfgrad::Error);
  CHECK_THROWS_AS(BlockAllocator(dev, BlockAllocatorOptions{20 * MiB, 0}), halfgrad::Error);
  CHECK_NOTHROW(BlockAllocator(dev, BlockAllocatorOptions{20 * MiB + 512, 0}));
}

TEST_CASE("block allocator: max_split_size keeps big blocks whole for big requests") {
  FakeDevice dev;
  BlockAllocator a(dev, BlockAllocatorOptions{32 * MiB, 0});
  void* big = a.allocate(40 * MiB, "t");
  a.release(big, 40 * MiB, "t");
  void* small = a.allocate(4 * MiB, "t");  // may not cut the cached 40 MiB block: a new 20 MiB segment
  CHECK(addr(small) != addr(big));
  CHECK(dev.allocs == 2);
  void* near = a.allocate(39 * MiB, "t");  // 40 < 39 + 20: takes the 40 MiB block, unsplit
  CHECK(addr(near) == addr(big));
  CHECK(a.block_size(near) == 40 * MiB);
  a.release(near, 39 * MiB, "t");
  void* far = a.allocate(33 * MiB, "t");   // 40 >= 33 + 20? no (53): still takes it
  CHECK(addr(far) == addr(big));
  a.release(far, 33 * MiB, "t");
  void* huge = a.allocate(64 * MiB, "t");
  a.release(huge, 64 * MiB, "t");
  void* mid = a.allocate(41 * MiB, "t");   // the 64 MiB block is >= 41 + 20 bigger: a new segment
  CHECK(dev.allocs == 4);
  CHECK(a.block_size(mid) == 42 * MiB);
  a.release(small, 4 * MiB, "t");
  a.release(mid, 41 * MiB, "t");
}

TEST_CASE("block allocator: stats after a sequence equal the hand-computed figures; reset_peak_stats") {
  FakeDevice dev;
  BlockAllocator a(dev);
  void* a1 = a.allocate(1000, "t");        // small seg S1 (2 MiB), block 1024, split
  void* a2 = a.allocate(2 * MiB, "t");     // large seg L1 (20 MiB), block 2 MiB, split (18 MiB rest)
  void* a3 = a.allocate(12 * MiB, "t");    // from L1's rest: 12 MiB, split (6 MiB rest)
  a.release(a2, 2 * MiB, "t");             // free, neighbour a3 live: no merge
  void* a4 = a.allocate(1 * MiB + 1, "t"); // best fit: L1's 2 MiB hole (< 6 MiB rest); rest 1 MiB - 512 not split
  auto s = a.stats();
  CHECK(addr(a4) == addr(a2));
  CHECK(s.allocated_bytes == 1024 + 2 * MiB + 12 * MiB);
  CHECK(s.peak_allocated_bytes == 1024 + 2 * MiB + 12 * MiB);
  CHECK(s.reserved_bytes == 22 * MiB);
  CHECK(s.peak_reserved_bytes == 22 * MiB);
  CHECK(s.active_blocks == 3);
  CHECK(s.segments == 2);
  CHECK(s.cuda_malloc_calls == 2);
  CHECK(s.hits == 2);
  CHECK(s.splits == 3);
  CHECK(s.merges == 0);
  CHECK(s.largest_free_block == 6 * MiB);
  CHECK(s.inactive_split_bytes == 6 * MiB + 2 * MiB - 1024);
  CHECK(s.inactive_split_blocks == 2);
  a.release(a3, 12 * MiB, "t");            // merges with the 6 MiB rest
  a.reset_peak_stats();
  s = a.stats();
  CHECK(s.merges == 1);
  CHECK(s.peak_allocated_bytes == 1024 + 2 * MiB);
  CHECK(s.peak_reserved_bytes == 22 * MiB);
  CHECK(s.largest_free_block == 18 * MiB);
  a.release(a4, 1 * MiB + 1, "t");
  a.release(a1, 1000, "t");
  s = a.stats();
  CHECK(s.merges == 3);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.inactive_split_bytes == 0);
  CHECK(s.peak_allocated_bytes == 1024 + 2 * MiB);
}

TEST_CASE("block allocator: releasing a foreign pointer, twice, or with another size is an error") {
  FakeDevice dev;
  BlockAllocator a(dev);
  void* p = a.allocate(4096, "t");
  int local = 0;
  check_error([&] { a.release(&local, 4, "cuda::release"); }, {"cuda::release", "is not a live block"});
  check_error([&] { a.release(p, 4000, "cuda::release"); },
              {"cuda::release", "allocated with 4096 bytes but released with 4000"});
  a.release(p, 4096, "cuda::release");
  check_error([&] { a.release(p, 4096, "cuda::release"); }, {"freed twice"});
  CHECK(a.stats().allocated_bytes == 0);
}

TEST_CASE("block allocator: the destructor gives every segment back") {
  FakeDevice dev;
  {
    BlockAllocator a(dev);
    a.allocate(1 * MiB, "t");
    void* q = a.allocate(3 * MiB, "t");
    a.allocate(4 * MiB, "t");
    a.release(q, 3 * MiB, "t");
    CHECK(dev.segments.size() == 2);
  }
  CHECK(dev.segments.empty());
  CHECK(dev.live_bytes == 0);
}

TEST_CASE("block allocator: a U-Net-like pattern with a shape change reserves less than the exact-size policy") {
  const std::vector<halfgrad::testing::AllocationEvent> ev = halfgrad::testing::unet_like_pattern();
  FakeDevice dev;
  BlockAllocator a(dev);
  std::map<int, void*> live;
  for (const auto& e : ev) {
    if (e.allocate) live[e.id] = a.allocate(e.bytes, "t");
    else a.release(live.at(e.id), e.bytes, "t");
  }
  const auto s = a.stats();
  const auto old = halfgrad::testing::exact_size_peaks(ev);
  std::cout << "U-Net-like pattern, fake device: peak reserved " << s.peak_reserved_bytes << " B (exact-size policy "
            << old.reserved << " B), peak allocated " << s.peak_allocated_bytes << " B (" << old.allocated << " B)\n";
  CHECK(s.allocated_bytes == 0);
  CHECK(s.peak_reserved_bytes < old.reserved);
  CHECK(s.peak_allocated_bytes <= old.allocated);
  CHECK(s.inactive_split_bytes == 0);  // everything released: every segment is one free block again
}
