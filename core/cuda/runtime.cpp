// runtime.cpp - the CUDA runtime of runtime.h: one device, one stream, a caching allocator (the
// policy of core/cuda/block_allocator.h over cudaMalloc / cudaFree segments).
// Compiled only in a CUDA build (HALFGRAD_CUDA); core/cuda/runtime_stub.cpp stands in otherwise.
#include "core/cuda/runtime.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/cuda/block_allocator.h"
#include "core/cuda/graph.h"
#include "core/cuda/graph_pools.h"
#include "core/cuda/check.cuh"
#include "core/error.h"

namespace halfgrad::cuda {

namespace {
// What the active graph capture records (cuda::Graph::capture's `what`), empty when none: named in
// the error of a call the capture refuses.
std::mutex& capture_mu() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::string& capture_what() {
  static std::string* s = new std::string();
  return *s;
}
// The thread running the active capture (meaningful only while capture_what() is not empty).
std::thread::id& capture_thread() {
  static std::thread::id* t = new std::thread::id();
  return *t;
}
// Whether the calling thread is the one capturing (its allocations go to the graph's pool).
bool is_capturing_thread() {
  std::lock_guard<std::mutex> lock(capture_mu());
  return !capture_what().empty() && capture_thread() == std::this_thread::get_id();
}
bool is_capture_error(cudaError_t err) {
  switch (err) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureWrongThread:
      return true;
    default:
      return false;
  }
}
}  // namespace

void throw_cuda_error(const char* op, const char* call, cudaError_t err) {
  std::ostringstream os;
  os << op << ": " << call << " failed: " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")";
  std::string what;
  {
    std::lock_guard<std::mutex> lock(capture_mu());
    what = capture_what();
  }
  if (is_capture_error(err))
    os << "; a CUDA graph capture" << (what.empty() ? std::string() : " of '" + what + "'")
       << " refused it: a graph cannot hold a call that waits for the device or reads its results on the "
          "host (item(), a device-to-host copy, synchronize, an allocator segment release); keep such calls out "
          "of the captured work, or run it eagerly";
  else if (!what.empty())
    os << " (during the CUDA graph capture of '" << what << "')";
  throw Error(os.str());
}

bool compiled() { return true; }

namespace {

struct DeviceState {
  bool available = false;
  std::string why;
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;
};

DeviceState& state() {
  static DeviceState* s = [] {
    auto* st = new DeviceState();  // never destroyed: tensors may be freed during static destruction
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      st->why = std::string("no usable CUDA driver/device: ") + cudaGetErrorString(e);
      cudaGetLastError();  // clear the sticky-free error so later calls are not confused by it
    } else if (n == 0) {
      st->why = "no CUDA device";
    } else {
      int dev = 0;
      cudaGetDevice(&dev);
      cudaGetDeviceProperties(&st->prop, dev);
      st->available = true;
    }
    return st;
  }();
  return *s;
}

DeviceState& need_device(const char* op) {
  DeviceState& s = state();
  HG_CHECK(s.available, op << ": CUDA is not available (" << s.why << ")");
  return s;
}

// Segments of the caching allocator: cudaMalloc / cudaFree. Out of memory is nullptr (the policy
// then gives back its cache and retries once); any other CUDA error throws at once.
class CudaSegments final : public SegmentBackend {
 public:
  void* raw_alloc(size_t nbytes) override {
    void* p = nullptr;
    // cudaMalloc is a "potentially unsafe" call, which a thread-local capture (graph.h) refuses; a
    // graph's pool needs real segments while it captures, and a segment is not stream work, so the
    // thread's capture mode is relaxed around this one call (push-pop, as CUDA's docs advise).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    HG_CUDA_CHECK("cuda::allocate", cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t e = cudaMalloc(&p, nbytes);
    cudaThreadExchangeStreamCaptureMode(&mode);  // back to what it was
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: out of memory is not sticky
      return nullptr;
    }
    if (e != cudaSuccess) throw_cuda_error("cuda::allocate", "cudaMalloc", e);
    return p;
  }
  // Only whole free segments are given back (empty_cache, or a miss that needs room), but kernels
  // queued earlier may still read their blocks: wait for the stream first (cudaFree would wait for
  // the device anyway; this says so).
  void raw_free(void* ptr) override {
    HG_CUDA_CHECK("cuda allocator", cudaStreamSynchronize(stream()));
    HG_CUDA_CHECK("cuda allocator", cudaFree(ptr));
  }
  const char* name() const override { return "CUDA"; }
};

// HALFGRAD_CUDA_MEMORY_LIMIT_MB: MiB, a non-negative integer; 0 or unset = no limit.
size_t memory_limit_from_env() {
  const char* s = std::getenv("HALFGRAD_CUDA_MEMORY_LIMIT_MB");
  if (!s || !*s) return 0;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  HG_CHECK(end && *end == '\0' && errno == 0 && v >= 0 && v <= (1LL << 40),
           "cuda allocator: environment variable HALFGRAD_CUDA_MEMORY_LIMIT_MB='"
               << s << "' is not a whole number of MiB (0 = no limit)");
  return static_cast<size_t>(v) << 20;
}

struct Cache {
  std::mutex mu;
  CudaSegments segments;
  GraphPools blocks{segments, BlockAllocatorOptions{kNoMaxSplitSize, memory_limit_from_env()}};  // eager + graph pools
};
Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

// Pinned staging for host-to-device copies, so copy_h2d can return before the DMA finishes and the
// caller may reuse its buffer. Grown on demand; a copy waits for the previous user of the buffer.
struct Staging {
  std::mutex mu;
  void* buf = nullptr;
  size_t size = 0;
  cudaEvent_t done = nullptr;
};
Staging& staging() {
  static Staging* s = new Staging();
  return *s;
}

}  // namespace

bool is_available() { return state().available; }

std::string device_description() {
  DeviceState& s = state();
  if (!s.available) return "CUDA unavailable: " + s.why;
  std::ostringstream os;
  os << s.prop.name << " (sm_" << s.prop.major << s.prop.minor << ", " << s.prop.multiProcessorCount << " SMs, "
     << static_cast<double>(s.prop.totalGlobalMem) / (1 << 30) << " GiB)";
  return os.str();
}

int sm_count() { return need_device("cuda::sm_count").prop.multiProcessorCount; }
int compute_capability() {
  const auto& p = need_device("cuda::compute_capability").prop;
  return p.major * 10 + p.minor;
}

cudaStream_t stream() {
  DeviceState& s = need_device("cuda::stream");
  if (!s.stream) HG_CUDA_CHECK("cuda::stream", cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  return s.stream;
}

void* allocate(size_t nbytes, const char* op) {
  need_device(op);
  (void)poison();  // reads HALFGRAD_CUDA_POISON once (a bad value throws) before any block is taken
  Cache& c = cache();
  void* p = nullptr;
  size_t size = 0;
  const bool capturer = is_capturing_thread();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    p = c.blocks.allocate(nbytes, op, capturer);
    size = c.blocks.block_size(p);
  }
  const int b = poison();
  if (b >= 0) HG_CUDA_CHECK(op, cudaMemsetAsync(p, b, size, stream()));  // ordered before the block's users
  return p;
}

void release(void* ptr, size_t nbytes) {
  if (!ptr) return;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.release(ptr, nbytes, "cuda::release");
}

namespace {
// The poison byte, -1 = off; read on every allocation.
std::atomic<int>& poison_byte() {
  static std::atomic<int> b{[] {
    const char* s = std::getenv("HALFGRAD_CUDA_POISON");
    if (!s || !*s) return -1;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s, &end, 0);
    HG_CHECK(end && *end == '\0' && errno == 0 && v >= 0 && v <= 255,
             "cuda allocator: environment variable HALFGRAD_CUDA_POISON='" << s
                 << "' is not a byte 0..255 (decimal or 0x hex)");
    return static_cast<int>(v);
  }()};
  return b;
}
}  // namespace

int poison() { return poison_byte().load(std::memory_order_relaxed); }

void set_poison(int byte) {
  HG_CHECK(byte >= -1 && byte <= 255,
           "cuda::set_poison: byte " << byte << " is out of range; expected 0..255 (fill) or -1 (off)");
  poison_byte().store(byte, std::memory_order_relaxed);
}

AllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.blocks.eager().stats();
}
MemoryInfo memory_info() {
  need_device("cuda::memory_info");
  MemoryInfo m;
  HG_CUDA_CHECK("cuda::memory_info", cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}
void reset_peak_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.eager().reset_peak_stats();
}
void empty_cache() {
  if (!is_available()) return;
  synchronize("cuda::empty_cache");
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.eager().empty_cache();
}
void reserve_external(size_t nbytes, const char* op) {
  need_device(op);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.reserve_external(nbytes, op);
}
void release_external(size_t nbytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.release_external(nbytes);
}
void set_memory_limit(size_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.eager().set_memory_limit(bytes);
}
size_t memory_limit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.blocks.eager().memory_limit();
}

void copy_h2d(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  {
    // A captured copy would replay from the staging buffer as it is at replay time (the bytes of
    // whatever copy came last), and the wait below is refused by a capture anyway: say so plainly.
    std::lock_guard<std::mutex> lock(capture_mu());
    HG_CHECK(capture_what().empty() || capture_thread() != std::this_thread::get_id(),
             "cuda::copy_h2d: a host-to-device copy of " << nbytes << " bytes during the CUDA graph capture of '"
                 << capture_what() << "'; a graph replays the copy's source address, not its bytes: put the "
                 "value in device memory before capturing (a kernel argument, or a device tensor the host updates "
                 "between replays)");
  }
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.done) HG_CUDA_CHECK("cuda::copy_h2d", cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
  HG_CUDA_CHECK("cuda::copy_h2d", cudaEventSynchronize(st.done));  // the previous copy has left the buffer
  if (st.size < nbytes) {
    if (st.buf) HG_CUDA_CHECK("cuda::copy_h2d", cudaFreeHost(st.buf));
    st.buf = nullptr;
    st.size = 0;
    HG_CUDA_CHECK("cuda::copy_h2d", cudaMallocHost(&st.buf, nbytes));
    st.size = nbytes;
  }
  std::memcpy(st.buf, src, nbytes);
  HG_CUDA_CHECK("cuda::copy_h2d", cudaMemcpyAsync(dst, st.buf, nbytes, cudaMemcpyHostToDevice, stream()));
  HG_CUDA_CHECK("cuda::copy_h2d", cudaEventRecord(st.done, stream()));
}

void copy_d2h(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  HG_CUDA_CHECK("cuda::copy_d2h", cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream()));
  HG_CUDA_CHECK("cuda::copy_d2h", cudaStreamSynchronize(stream()));
}

void copy_d2d(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  HG_CUDA_CHECK("cuda::copy_d2d", cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream()));
}

void memset_async(void* dst, int byte, size_t nbytes) {
  if (nbytes == 0) return;
  HG_CUDA_CHECK("cuda::memset", cudaMemsetAsync(dst, byte, nbytes, stream()));
}

void synchronize(const char* what) {
  HG_CUDA_CHECK(what, cudaStreamSynchronize(stream()));
}

uint64_t graph_pool_create() {
  need_device("cuda::Graph");
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.blocks.create_pool();
}

void graph_pool_begin_capture(uint64_t pool, const std::string& what) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.blocks.begin_capture(pool, "cuda::Graph::capture");
  }
  std::lock_guard<std::mutex> lock(capture_mu());
  capture_what() = what.empty() ? std::string("(unnamed)") : what;
  capture_thread() = std::this_thread::get_id();
}

void graph_pool_end_capture() {
  {
    std::lock_guard<std::mutex> lock(capture_mu());
    capture_what().clear();
  }
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.end_capture();
}

void graph_pool_retire(uint64_t pool) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.retire_pool(pool);
}

AllocatorStats graph_pool_stats(uint64_t pool) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.blocks.pool_stats(pool);
}

bool capturing() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.blocks.capturing() != 0;
}

}  // namespace halfgrad::cuda
