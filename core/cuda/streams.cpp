// streams.cpp - streams.h in a CUDA build (HALFGRAD_CUDA); core/cuda/runtime_stub.cpp stands in otherwise.
#include "core/cuda/streams.h"

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/check.cuh"
#include "core/error.h"

namespace halfgrad::cuda {
namespace {

void need_device(const char* op) {
  HG_CHECK(is_available(), op << ": CUDA is not available (" << device_description() << ")");
}
cudaEvent_t ev(void* p) { return static_cast<cudaEvent_t>(p); }
cudaStream_t st(void* p) { return static_cast<cudaStream_t>(p); }

}  // namespace

// ---- PinnedBuffer ---------------------------------------------------------------------------------
PinnedBuffer::PinnedBuffer(size_t nbytes) {
  HG_CHECK(nbytes > 0, "cuda::PinnedBuffer: expected a size > 0 bytes");
  need_device("cuda::PinnedBuffer");
  HG_CUDA_CHECK("cuda::PinnedBuffer", cudaHostAlloc(&ptr_, nbytes, cudaHostAllocPortable));
  size_ = nbytes;
}
PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

// ---- DeviceBuffer ---------------------------------------------------------------------------------
DeviceBuffer::DeviceBuffer(size_t nbytes) {
  HG_CHECK(nbytes > 0, "cuda::DeviceBuffer: expected a size > 0 bytes");
  need_device("cuda::DeviceBuffer");
  reserve_external(nbytes, "cuda::DeviceBuffer");  // under the memory limit, as the allocator's segments
  const cudaError_t e = cudaMalloc(&ptr_, nbytes);
  if (e != cudaSuccess) {
    release_external(nbytes);
    ptr_ = nullptr;
    cudaGetLastError();
    throw_cuda_error("cuda::DeviceBuffer", "cudaMalloc", e);
  }
  size_ = nbytes;
}
DeviceBuffer::~DeviceBuffer() { free_now(); }
void DeviceBuffer::free_now() noexcept {
  if (!ptr_) return;
  cudaFree(ptr_);
  release_external(size_);
  ptr_ = nullptr;
  size_ = 0;
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    free_now();
    ptr_ = std::exchange(o.ptr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

// ---- Event ----------------------------------------------------------------------------------------
Event::Event() {
  need_device("cuda::Event");
  cudaEvent_t e = nullptr;
  HG_CUDA_CHECK("cuda::Event", cudaEventCreate(&e));
  ev_ = e;
}
Event::~Event() {
  if (ev_) cudaEventDestroy(ev(ev_));
}
Event::Event(Event&& o) noexcept : ev_(std::exchange(o.ev_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (ev_) cudaEventDestroy(ev(ev_));
    ev_ = std::exchange(o.ev_, nullptr);
  }
  return *this;
}
void Event::record_on_main() {
  HG_CHECK(ev_, "cuda::Event::record_on_main: the event was moved from");
  HG_CUDA_CHECK("cuda::Event::record_on_main", cudaEventRecord(ev(ev_), stream()));
}
void Event::record(const Stream& s) {
  HG_CHECK(ev_ && s.handle(), "cuda::Event::record: the event or the stream was moved from");
  HG_CUDA_CHECK("cuda::Event::record", cudaEventRecord(ev(ev_), st(s.handle())));
}
void Event::synchronize() const {
  HG_CHECK(ev_, "cuda::Event::synchronize: the event was moved from");
  HG_CUDA_CHECK("cuda::Event::synchronize", cudaEventSynchronize(ev(ev_)));
}
bool Event::query() const {
  HG_CHECK(ev_, "cuda::Event::query: the event was moved from");
  const cudaError_t e = cudaEventQuery(ev(ev_));
  if (e == cudaErrorNotReady) return false;
  HG_CUDA_CHECK("cuda::Event::query", e);
  return true;
}
float Event::elapsed_ms_since(const Event& start) const {
  HG_CHECK(ev_ && start.ev_, "cuda::Event::elapsed_ms_since: an event was moved from");
  float ms = 0;
  HG_CUDA_CHECK("cuda::Event::elapsed_ms_since", cudaEventElapsedTime(&ms, ev(start.ev_), ev(ev_)));
  return ms;
}

void main_stream_wait(const Event& e) {
  HG_CHECK(e.handle(), "cuda::main_stream_wait: the event was moved from");
  HG_CUDA_CHECK("cuda::main_stream_wait", cudaStreamWaitEvent(stream(), ev(e.handle()), 0));
}

void main_stream_copy_d2h_async(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  HG_CUDA_CHECK("cuda::main_stream_copy_d2h_async", cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream()));
}

// ---- Stream ---------------------------------------------------------------------------------------
Stream::Stream() {
  need_device("cuda::Stream");
  cudaStream_t s = nullptr;
  HG_CUDA_CHECK("cuda::Stream", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  s_ = s;
}
Stream::~Stream() {
  if (s_) cudaStreamDestroy(st(s_));
}
Stream::Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(st(s_));
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
void Stream::wait(const Event& e) {
  HG_CHECK(s_ && e.handle(), "cuda::Stream::wait: the stream or the event was moved from");
  HG_CUDA_CHECK("cuda::Stream::wait", cudaStreamWaitEvent(st(s_), ev(e.handle()), 0));
}
void Stream::copy_h2d_async(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  HG_CHECK(s_, "cuda::Stream::copy_h2d_async: the stream was moved from");
  HG_CUDA_CHECK("cuda::Stream::copy_h2d_async", cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, st(s_)));
}
void Stream::synchronize() {
  HG_CHECK(s_, "cuda::Stream::synchronize: the stream was moved from");
  HG_CUDA_CHECK("cuda::Stream::synchronize", cudaStreamSynchronize(st(s_)));
}

}  // namespace halfgrad::cuda
