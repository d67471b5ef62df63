// allocator_cuda_test.cpp - the CUDA caching allocator (core/cuda/runtime.h over
// core/cuda/block_allocator.h) on the real device: split blocks hold distinct, writable, aligned
// ranges; released blocks are reused without cudaMalloc; the poison fill covers reused split blocks;
// the stats add up; the memory limit refuses with its error; a training-step-like pattern reserves
// less than the old exact-size allocator would have. The policy's rules themselves are checked on
// the CPU (tests/core/block_allocator_test.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <vector>

#include "core/cuda/runtime.h"
#include "tests/check_error.h"
#include "tests/core/allocation_pattern.h"
#include "tests/cuda/cuda_test_case.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

constexpr size_t MiB = size_t{1} << 20;

// Restores the poison byte and the memory limit on scope exit.
struct RuntimeSettings {
  int poison = cuda::poison();
  size_t limit = cuda::memory_limit();
  ~RuntimeSettings() {
    cuda::set_poison(poison);
    cuda::set_memory_limit(limit);
  }
};

// The stats' invariants, whatever else the process holds.
void check_consistent(const cuda::AllocatorStats& s) {
  CHECK(s.allocated_bytes <= s.reserved_bytes);
  CHECK(s.peak_allocated_bytes >= s.allocated_bytes);
  CHECK(s.peak_reserved_bytes >= s.reserved_bytes);
  CHECK(s.inactive_split_bytes <= s.reserved_bytes - s.allocated_bytes);
  CHECK(s.largest_free_block <= s.reserved_bytes - s.allocated_bytes);
  CHECK(s.segments <= s.cuda_malloc_calls);
  CHECK(s.cuda_malloc_calls - s.cuda_free_calls == s.segments);
  CHECK((s.active_blocks == 0) == (s.allocated_bytes == 0));
}

}  // namespace

CUDA_TEST_CASE("cuda allocator: split blocks are distinct aligned ranges that hold their bytes; reuse needs no cudaMalloc") {
  const std::vector<size_t> sizes = {1, 700, 4096, 100000, 1 * MiB, 1 * MiB + 1, 3 * MiB, 7 * MiB + 123, 12 * MiB};
  const auto before = cuda::allocator_stats();
  auto round = [&] {
    std::vector<void*> ptrs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      void* p = cuda::allocate(sizes[i], "allocator test");
      CHECK(reinterpret_cast<uintptr_t>(p) % 512 == 0);
      cuda::memset_async(p, static_cast<int>(i + 1), sizes[i]);
      ptrs.push_back(p);
    }
    // Each block still holds its own byte after all were written: no two ranges overlap.
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<unsigned char> host(sizes[i]);
      cuda::copy_d2h(host.data(), ptrs[i], sizes[i]);
      size_t bad = 0;
      for (unsigned char b : host) bad += b != static_cast<unsigned char>(i + 1);
      CHECK_MESSAGE(bad == 0, "block " << i << " of " << sizes[i] << " bytes: " << bad << " bytes overwritten");
    }
    for (size_t i = 0; i < sizes.size(); ++i) cuda::release(ptrs[i], sizes[i]);
  };
  round();
  const auto mid = cuda::allocator_stats();
  CHECK(mid.allocated_bytes == before.allocated_bytes);
  CHECK(mid.active_blocks == before.active_blocks);
  round();
  round();
  const auto after = cuda::allocator_stats();
  CHECK(after.cuda_malloc_calls == mid.cuda_malloc_calls);
  CHECK(after.hits >= mid.hits + 2 * sizes.size());
  CHECK(after.splits > before.splits);
  CHECK(after.merges > before.merges);
  check_consistent(after);
  check_error([] { cuda::allocate(size_t{1} << 50, "allocator test"); }, {"allocator test", "out of CUDA memory"});
  check_error([] { cuda::release(reinterpret_cast<void*>(uintptr_t{512}), 4); }, {"cuda::release", "not a live block"});
  void* p = cuda::allocate(1000, "allocator test");
  check_error([&] { cuda::release(p, 999); }, {"cuda::release", "allocated with 1000 bytes but released with 999"});
  cuda::release(p, 1000);
}

CUDA_TEST_CASE("cuda allocator: the poison byte fills blocks split from a reused, dirty segment") {
  RuntimeSettings restore;
  cuda::set_poison(-1);
  // Dirty a small-pool segment, release it, then take a piece of it with the poison on.
  void* dirty = cuda::allocate(64 * 1024, "allocator test");
  cuda::memset_async(dirty, 0x11, 64 * 1024);
  cuda::release(dirty, 64 * 1024);
  cuda::set_poison(0xA5);
  for (size_t n : {size_t{3000}, size_t{40000}, 2 * MiB + 5}) {
    void* p = cuda::allocate(n, "allocator test");
    std::vector<unsigned char> host(n);
    cuda::copy_d2h(host.data(), p, n);
    size_t bad = 0;
    for (unsigned char b : host) bad += b != 0xA5;
    CHECK_MESSAGE(bad == 0, n << " bytes: " << bad << " not poisoned");
    cuda::memset_async(p, 0x22, n);
    cuda::release(p, n);
  }
}

CUDA_TEST_CASE("cuda allocator: the memory limit bounds reserved memory and names itself when it refuses") {
  RuntimeSettings restore;
  cuda::synchronize();
  cuda::empty_cache();
  const auto s0 = cuda::allocator_stats();
  // u: bigger than any free hole left in segments other tests keep alive, so that every request below
  // needs a new segment; a multiple of 4 MiB, so that 2u, 1.5u and 2.5u are whole 2 MiB granules.
  const size_t u = (std::max(s0.largest_free_block, 16 * MiB) / (4 * MiB) + 1) * (4 * MiB);
  cuda::set_memory_limit(s0.reserved_bytes + 3 * u);
  CHECK(cuda::memory_limit() == s0.reserved_bytes + 3 * u);
  void* a = cuda::allocate(2 * u, "allocator test");  // fits under the limit
  check_error([&] { cuda::allocate(3 * u / 2, "limit test"); }, {"limit test", "out of CUDA memory", "memory limit of"});
  CHECK(cuda::allocator_stats().reserved_bytes <= cuda::memory_limit());
  cuda::release(a, 2 * u);
  void* b = cuda::allocate(5 * u / 2, "allocator test");  // fits once the cached 2u segment is given back
  CHECK(cuda::allocator_stats().reserved_bytes <= cuda::memory_limit());
  CHECK(cuda::allocator_stats().cuda_free_calls > s0.cuda_free_calls);
  cuda::release(b, 5 * u / 2);
  check_consistent(cuda::allocator_stats());
}

CUDA_TEST_CASE("cuda allocator: a U-Net-like pattern with a shape change reserves less than the exact-size allocator") {
  const std::vector<AllocationEvent> ev = unet_like_pattern();
  cuda::synchronize();
  cuda::empty_cache();
  cuda::reset_peak_stats();
  const auto s0 = cuda::allocator_stats();
  std::map<int, void*> live;
  for (const AllocationEvent& e : ev) {
    if (e.allocate) {
      live[e.id] = cuda::allocate(e.bytes, "allocator test");
      cuda::memset_async(live[e.id], 0, e.bytes);  // used, as a kernel would
    } else {
      cuda::release(live.at(e.id), e.bytes);
    }
  }
  cuda::synchronize();
  const auto s = cuda::allocator_stats();
  const ExactSizePeaks old = exact_size_peaks(ev);
  const size_t reserved = s.peak_reserved_bytes - s0.reserved_bytes;
  std::cout << "U-Net-like pattern on " << cuda::device_description() << ": peak reserved " << reserved / MiB
            << " MiB (exact-size allocator " << old.reserved / MiB << " MiB), peak allocated "
            << (s.peak_allocated_bytes - s0.allocated_bytes) / MiB << " MiB (" << old.allocated / MiB << " MiB)\n";
  CHECK(s.allocated_bytes == s0.allocated_bytes);
  CHECK(reserved < old.reserved);
  CHECK(s.peak_allocated_bytes - s0.allocated_bytes <= old.allocated);
  check_consistent(s);
}
