// CPU caching allocator: a released large block is cached and handed out again for the same rounded
// size; under AddressSanitizer (tools/sanitize.sh) a cached block and the rounding tail of a live one
// are poisoned, so a read of a freed tensor or past its end is reported even though the memory stays
// malloc'ed inside the cache.
#include <doctest/doctest.h>

#include <cstdint>

#include "core/allocator.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

using namespace halfgrad;

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
