// runtime_stub.cpp - runtime.h in a build without CUDA: nothing is available, every use says why.
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/cuda/streams.h"
#include "core/cuda/tensor_kernels.h"

#include "core/error.h"

namespace halfgrad::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  HG_FAIL(what << ": halfgrad was built without CUDA (no CUDA toolkit was found at configure time)");
}
}  // namespace

bool compiled() { return false; }
bool is_available() { return false; }
std::string device_description() { return "CUDA unavailable: halfgrad was built without CUDA"; }
int sm_count() { no_cuda("cuda::sm_count"); }
int compute_capability() { no_cuda("cuda::compute_capability"); }
void* allocate(size_t, const char* op) { no_cuda(op); }
void release(void*, size_t) {}
void copy_h2d(void*, const void*, size_t) { no_cuda("cuda::copy_h2d"); }
void copy_d2h(void*, const void*, size_t) { no_cuda("cuda::copy_d2h"); }
void copy_d2d(void*, const void*, size_t) { no_cuda("cuda::copy_d2d"); }
void memset_async(void*, int, size_t) { no_cuda("cuda::memset"); }
void synchronize(const char* what) { no_cuda(what); }
AllocatorStats allocator_stats() { return {}; }
MemoryInfo memory_info() { no_cuda("cuda::memory_info"); }
void reset_peak_stats() {}
void empty_cache() {}
void set_memory_limit(size_t) { no_cuda("cuda::set_memory_limit"); }
void reserve_external(size_t, const char* op) { no_cuda(op); }
void release_external(size_t) {}
size_t memory_limit() { return 0; }
int poison() { return -1; }
void set_poison(int) { no_cuda("cuda::set_poison"); }
uint64_t graph_pool_create() { no_cuda("cuda::Graph"); }
void graph_pool_begin_capture(uint64_t, const std::string&) { no_cuda("cuda::Graph::capture"); }
void graph_pool_end_capture() {}
void graph_pool_retire(uint64_t) {}
AllocatorStats graph_pool_stats(uint64_t) { return {}; }
bool capturing() { return false; }

// streams.h: nothing to allocate, record or wait on without CUDA. Destructors and moves of empty
// handles do nothing.
PinnedBuffer::PinnedBuffer(size_t) { no_cuda("cuda::PinnedBuffer"); }
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&&) noexcept {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&&) noexcept { return *this; }
DeviceBuffer::DeviceBuffer(size_t) { no_cuda("cuda::DeviceBuffer"); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept { return *this; }
Event::Event() { no_cuda("cuda::Event"); }
Event::~Event() = default;
Event::Event(Event&&) noexcept {}
Event& Event::operator=(Event&&) noexcept { return *this; }
void Event::record_on_main() { no_cuda("cuda::Event::record_on_main"); }
void Event::record(const Stream&) { no_cuda("cuda::Event::record"); }
void Event::synchronize() const { no_cuda("cuda::Event::synchronize"); }
bool Event::query() const { no_cuda("cuda::Event::query"); }
float Event::elapsed_ms_since(const Event&) const { no_cuda("cuda::Event::elapsed_ms_since"); }
void main_stream_wait(const Event&) { no_cuda("cuda::main_stream_wait"); }
void main_stream_copy_d2h_async(void*, const void*, size_t) { no_cuda("cuda::main_stream_copy_d2h_async"); }
Stream::Stream() { no_cuda("cuda::Stream"); }
Stream::~Stream() = default;
Stream::Stream(Stream&&) noexcept {}
Stream& Stream::operator=(Stream&&) noexcept { return *this; }
void Stream::wait(const Event&) { no_cuda("cuda::Stream::wait"); }
void Stream::copy_h2d_async(void*, const void*, size_t) { no_cuda("cuda::Stream::copy_h2d_async"); }
void Stream::synchronize() { no_cuda("cuda::Stream::synchronize"); }

// graph.h: nothing can be captured without CUDA.
Graph::~Graph() = default;
void Graph::destroy() {}
void Graph::capture(const std::function<void()>&, const std::string&) { no_cuda("cuda::Graph::capture"); }
void Graph::replay() { no_cuda("cuda::Graph::replay"); }
size_t Graph::pool_reserved_bytes() const { return 0; }

// tensor_kernels.h: unreachable without CUDA tensors, which a build without CUDA cannot make.
void fill(void*, Dtype, int64_t, double) { no_cuda("fill_"); }
void convert(const void*, Dtype, void*, Dtype, int64_t) { no_cuda("cast"); }
void permute_channels(const void*, void*, int64_t, int64_t, int64_t, int64_t, bool) { no_cuda("to(memory_format)"); }
void accumulate(void*, const void*, Dtype, int64_t) { no_cuda("backward (gradient accumulation)"); }
int64_t count_nonfinite(const void*, Dtype, int64_t) { no_cuda("count_nonfinite"); }

}  // namespace halfgrad::cuda
