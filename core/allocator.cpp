#include "core/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
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

// An environment variable as an unsigned integer (base 0: decimal, 0x.. hex), or `fallback` when unset
// or empty; anything else, or a value above `max`, throws naming the variable.
unsigned long long env_number(const char* name, unsigned long long fallback, unsigned long long max,
                              const char* expected) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 0);
  HG_CHECK(*s != '-' && end && *end == '\0' && errno == 0 && v <= max,
           "cpu allocator: environment variable " << name << "='" << s << "' is not " << expected);
  return v;
}

size_t limit_from_env() {
  constexpr unsigned long long kMaxMb = (~size_t{0}) >> 20;
  return static_cast<size_t>(env_number("HALFGRAD_CPU_CACHE_MB", 4096, kMaxMb, "a size in MiB (0 = no cache)"))
         << 20;
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

// The poison byte, -1 = off; read on every allocation, so a lock-free atomic.
std::atomic<int>& poison_byte() {
  static std::atomic<int> b{std::getenv("HALFGRAD_CPU_POISON") && *std::getenv("HALFGRAD_CPU_POISON")
                                ? static_cast<int>(env_number("HALFGRAD_CPU_POISON", 0, 255,
                                                              "a byte 0..255 (decimal or 0x hex)"))
                                : -1};
  return b;
}

// Frees cached blocks, largest first, until the cache holds at most `limit` bytes. Caller holds c.mu.
void evict_to_limit_locked(Cache& c) {
  while (c.stats.cached_bytes > c.limit && !c.free_blocks.empty()) {
    auto it = std::prev(c.free_blocks.end());
    std::free(it->second);
    c.stats.cached_bytes -= it->first;
    c.free_blocks.erase(it);
  }
}

void* system_alloc(size_t size) {
  void* p = std::aligned_alloc(size >= kMinCachedBytes ? kPage : kAlign, size ? size : kAlign);
  HG_CHECK(p != nullptr, "cpu_allocate: out of memory allocating " << size << " bytes");
#ifdef MADV_HUGEPAGE
  if (size >= (size_t{4} << 20)) madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

/// The block `p` of rounded `size` handed out for `nbytes`: addressable up to nbytes only (under
/// ASan), and filled with the poison byte when one is set (cpu_set_poison).
void* handed_out(void* p, size_t nbytes, size_t size) {
  HG_UNPOISON(p, nbytes);
  cpu_poison_fill(p, nbytes);
  HG_POISON(static_cast<char*>(p) + nbytes, size - nbytes);
  return p;
}

}  // namespace

void* cpu_allocate(size_t nbytes) {
  const size_t size = rounded_size(nbytes);
  (void)cpu_poison();  // reads HALFGRAD_CPU_POISON once (a bad value throws) before any block is taken
  Cache& c = cache();
  if (size >= kMinCachedBytes) {
    void* hit = nullptr;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      auto it = c.free_blocks.find(size);
      if (it != c.free_blocks.end()) {
        hit = it->second;
        c.free_blocks.erase(it);
        c.stats.cached_bytes -= size;
        c.stats.allocated_bytes += size;
        c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
        ++c.stats.hits;
      } else {
        ++c.stats.misses;
      }
    }
    if (hit) return handed_out(hit, nbytes, size);  // the poison fill runs outside the lock
  }
  void* p = system_alloc(size);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.allocated_bytes += size;
    c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
  }
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

size_t cpu_cache_limit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.limit;
}

void cpu_set_cache_limit(size_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.limit = bytes;
  evict_to_limit_locked(c);
}

int cpu_poison() { return poison_byte().load(std::memory_order_relaxed); }

void cpu_set_poison(int byte) {
  HG_CHECK(byte >= -1 && byte <= 255,
           "cpu_set_poison: byte " << byte << " is out of range; expected 0..255 (fill) or -1 (off)");
  poison_byte().store(byte, std::memory_order_relaxed);
}

void cpu_poison_fill(void* p, size_t n) {
  const int b = cpu_poison();
  if (b >= 0 && p && n) std::memset(p, b, n);
}

}  // namespace halfgrad
