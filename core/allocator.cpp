#include "core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"

// Under AddressSanitizer (tools/sanitize.sh) the cache would hide use-after-free and overflows:
// a cached block is still malloc'ed memory to ASan, and a request is rounded up. So a cached block is
// poisoned whole, and a block handed out is poisoned beyond the `nbytes` asked for; any touch of
// either is then reported as use-after-poison. No effect on what the allocator returns or counts.
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#define HG_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define HG_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define HG_POISON(p, n) ((void)(p), (void)(n))
#define HG_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace halfgrad {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kPage = 4096;

size_t rounded_size(size_t nbytes) {
  if (nbytes < kMinCachedBytes) return (nbytes + kAlign - 1) / kAlign * kAlign;
  return (nbytes + kPage - 1) / kPage * kPage;
}

size_t limit_from_env() {
  const char* s = std::getenv("HALFGRAD_CPU_CACHE_MB");
  if (s && *s) return static_cast<size_t>(std::strtoull(s, nullptr, 10)) << 20;
  return size_t{4} << 30;
}

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  CpuAllocatorStats stats;
  size_t limit = limit_from_env();
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

void* system_alloc(size_t size) {
  void* p = std::aligned_alloc(size >= kMinCachedBytes ? kPage : kAlign, size ? size : kAlign);
  HG_CHECK(p != nullptr, "cpu_allocate: out of memory allocating " << size << " bytes");
#ifdef MADV_HUGEPAGE
  if (size >= (size_t{4} << 20)) madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

/// The block `p` of rounded `size` handed out for `nbytes`: addressable up to nbytes only.
void* handed_out(void* p, size_t nbytes, size_t size) {
  HG_UNPOISON(p, nbytes);
  HG_POISON(static_cast<char*>(p) + nbytes, size - nbytes);
  return p;
}

}  // namespace

void* cpu_allocate(size_t nbytes) {
  const size_t size = rounded_size(nbytes);
  Cache& c = cache();
  if (size >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.stats.cached_bytes -= size;
      c.stats.allocated_bytes += size;
      c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
      ++c.stats.hits;
      return handed_out(p, nbytes, size);
    }
    ++c.stats.misses;
  }
  void* p = system_alloc(size);
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.allocated_bytes += size;
  c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
  return handed_out(p, nbytes, size);
}

void cpu_free(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t size = rounded_size(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.allocated_bytes -= size;
    if (size >= kMinCachedBytes && c.stats.cached_bytes + size <= c.limit) {
      HG_POISON(ptr, size);
      c.free_blocks.emplace(size, ptr);
      c.stats.cached_bytes += size;
      return;
    }
  }
  std::free(ptr);
}

CpuAllocatorStats cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void cpu_empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [size, p] : c.free_blocks) std::free(p);
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

void cpu_reset_peak_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
}

}  // namespace halfgrad
