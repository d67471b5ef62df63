// The CPU caching allocator: its run-time settings (the cache limit and the poison fill, core/allocator.h),
// and, at the end, its reuse of cached blocks and their AddressSanitizer poisoning (tools/sanitize.sh).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tests/check_error.h"
#include "core/allocator.h"
#include "core/tensor.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

using namespace halfgrad;
using halfgrad::testing::check_error;

namespace {

// Restores the limit and the poison byte on scope exit.
struct AllocatorSettings {
  size_t limit = cpu_cache_limit();
  int poison = cpu_poison();
  ~AllocatorSettings() {
    cpu_set_cache_limit(limit);
    cpu_set_poison(poison);
  }
};

bool all_bytes(const void* p, size_t n, unsigned char b) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (c[i] != b) return false;
  return true;
}

}  // namespace

TEST_CASE("cpu allocator: cpu_set_cache_limit(0) frees the cached blocks and caches no released block") {
  AllocatorSettings restore;
  constexpr size_t kBytes = size_t{1} << 20;  // 1 MiB: above kMinCachedBytes
  cpu_set_cache_limit(size_t{64} << 20);
  cpu_free(cpu_allocate(kBytes), kBytes);
  CHECK(cpu_allocator_stats().cached_bytes >= kBytes);
  cpu_set_cache_limit(0);
  CHECK(cpu_cache_limit() == 0);
  CHECK(cpu_allocator_stats().cached_bytes == 0);
  const size_t hits = cpu_allocator_stats().hits;
  void* p = cpu_allocate(kBytes);
  cpu_free(p, kBytes);
  CHECK(cpu_allocator_stats().cached_bytes == 0);
  cpu_free(cpu_allocate(kBytes), kBytes);
  CHECK(cpu_allocator_stats().hits == hits);  // nothing was served from the cache
}

TEST_CASE("cpu allocator: lowering the limit evicts the largest cached blocks first, down to the limit") {
  AllocatorSettings restore;
  cpu_empty_cache();
  cpu_set_cache_limit(size_t{64} << 20);
  const size_t small = size_t{1} << 17, large = size_t{8} << 20;
  void* a = cpu_allocate(small);
  void* b = cpu_allocate(large);
  cpu_free(a, small);
  cpu_free(b, large);
  CHECK(cpu_allocator_stats().cached_bytes == small + large);
  cpu_set_cache_limit(size_t{1} << 20);
  CHECK(cpu_allocator_stats().cached_bytes == small);  // the 8 MiB block went, the 128 KiB one stays
  const size_t hits = cpu_allocator_stats().hits;
  cpu_free(cpu_allocate(small), small);
  CHECK(cpu_allocator_stats().hits == hits + 1);
}

TEST_CASE("cpu allocator: poison fills fresh and reused blocks of every size, and is off at -1") {
  AllocatorSettings restore;
  cpu_set_cache_limit(size_t{64} << 20);
  for (size_t n : {size_t{1}, size_t{100}, size_t{4096}, size_t{1} << 16, size_t{3} << 20}) {
    CAPTURE(n);
    cpu_set_poison(0xA5);
    CHECK(cpu_poison() == 0xA5);
    unsigned char* p = static_cast<unsigned char*>(cpu_allocate(n));
    CHECK(all_bytes(p, n, 0xA5));
    std::memset(p, 0x11, n);
    cpu_free(p, n);
    cpu_set_poison(0xFF);
    p = static_cast<unsigned char*>(cpu_allocate(n));  // a large block comes back from the cache
    CHECK(all_bytes(p, n, 0xFF));
    cpu_free(p, n);
  }
  // An empty tensor under poison 0xFF reads as NaN (0xFFFFFFFF), so an op that forgets to write it shows.
  cpu_set_poison(0xFF);
  Tensor t = Tensor::empty({4}, kFloat32);
  for (int64_t i = 0; i < 4; ++i) CHECK(std::isnan(t.data<float>()[i]));
  cpu_set_poison(-1);
  CHECK(cpu_poison() == -1);
  unsigned char buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  cpu_poison_fill(buf, sizeof buf);  // off: untouched
  CHECK(buf[0] == 1);
  CHECK(buf[7] == 8);
  cpu_set_poison(0x00);
  cpu_poison_fill(buf, sizeof buf);
  CHECK(all_bytes(buf, sizeof buf, 0x00));
}

TEST_CASE("cpu allocator: cpu_set_poison refuses a value outside 0..255 and -1") {
  AllocatorSettings restore;
  check_error([] { cpu_set_poison(256); }, {"cpu_set_poison", "256", "0..255", "-1"});
  check_error([] { cpu_set_poison(-2); }, {"cpu_set_poison", "-2"});
}

// ---- the cache under AddressSanitizer (tools/sanitize.sh) ----

TEST_CASE("core: cpu allocator caches a 64 KiB+10 byte block and reuses it for the same rounded size") {
  const size_t nbytes = kMinCachedBytes + 10;  // rounds up to 68 KiB (a 4 KiB multiple)
  cpu_empty_cache();
  void* p = cpu_allocate(nbytes);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  static_cast<unsigned char*>(p)[nbytes - 1] = 1;  // the last byte asked for is usable
#ifdef __SANITIZE_ADDRESS__
  CHECK(__asan_address_is_poisoned(static_cast<char*>(p) + nbytes - 1) == 0);
  CHECK(__asan_address_is_poisoned(static_cast<char*>(p) + nbytes) == 1);  // the rounding tail
#endif
  const CpuAllocatorStats before = cpu_allocator_stats();
  cpu_free(p, nbytes);
  CHECK(cpu_allocator_stats().cached_bytes == before.cached_bytes + 69632);
#ifdef __SANITIZE_ADDRESS__
  CHECK(__asan_region_is_poisoned(p, 69632) == p);  // cached: any touch is use-after-poison
#endif
  void* q = cpu_allocate(nbytes - 5);  // same rounded size: the cached block comes back
  CHECK(q == p);
  CHECK(cpu_allocator_stats().hits == before.hits + 1);
#ifdef __SANITIZE_ADDRESS__
  CHECK(__asan_region_is_poisoned(q, nbytes - 5) == nullptr);
  CHECK(__asan_address_is_poisoned(static_cast<char*>(q) + nbytes - 5) == 1);
#endif
  cpu_free(q, nbytes - 5);
  cpu_empty_cache();
  CHECK(cpu_allocator_stats().cached_bytes == 0);
}
