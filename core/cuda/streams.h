// streams.h - what a data pipeline needs beside runtime.h's one stream, in plain C++ (no CUDA types):
// pinned host memory, device memory outside the caching allocator, a second stream, and events that
// order work across the two streams (cudaEventRecord / cudaStreamWaitEvent).
//
// Why device memory outside the allocator: runtime.h's caching allocator is stream-ordered on the
// main stream only. A block it hands out may, once released, be handed to kernels queued after the
// release on the main stream; a copy on another stream into such a block would race with them. A
// DeviceBuffer is cudaMalloc'ed once, never enters the cache, and its owner orders every use of it
// across streams with Events (see examples/05_unet3d/loader.h for the ring of slots that does this).
//
// All classes are move-only RAII handles; a default-constructed or moved-from one holds nothing.
// Every CUDA call is checked and throws halfgrad::Error naming the op, the call and CUDA's message;
// destructors never throw (a failed free is ignored, as the CUDA process is then broken anyway).
// Thread-safety: as the CUDA runtime's: two threads may queue on one stream; one handle must not be
// moved or destroyed while another thread uses it. In a build without CUDA every constructor that
// would allocate, and every function below, throws halfgrad::Error("... halfgrad was built without
// CUDA"); in a CUDA build without a device they throw "CUDA is not available (<reason>)".
#pragma once
#include <cstddef>

namespace halfgrad::cuda {

/// Page-locked host memory (cudaHostAlloc, portable), which the DMA engine reads directly, so that an
/// async host-to-device copy from it returns at once and overlaps with kernels.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  /// nbytes > 0 bytes of pinned memory; throws halfgrad::Error (op "cuda::PinnedBuffer") on failure.
  explicit PinnedBuffer(size_t nbytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

/// Device memory from cudaMalloc, never returned to the caching allocator (see the file comment), but
/// counted against its memory limit (runtime.h's reserve_external): over the limit the constructor
/// throws the allocator's out-of-memory halfgrad::Error.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// nbytes > 0 bytes (256-byte aligned); throws halfgrad::Error (op "cuda::DeviceBuffer") on failure.
  explicit DeviceBuffer(size_t nbytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void free_now() noexcept;  // cudaFree and release_external; empty afterwards
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

class Stream;

/// A CUDA event (cudaEventCreate; with timing so that elapsed_ms works). An event never recorded
/// counts as complete: synchronize returns at once and a stream waiting on it does not wait.
class Event {
 public:
  /// Creates the event; throws halfgrad::Error (op "cuda::Event") without a device.
  Event();
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// cudaEventRecord on the main stream (runtime.h's cuda::stream()): completes when everything
  /// queued there before it has run.
  void record_on_main();
  /// cudaEventRecord on `s`.
  void record(const Stream& s);
  /// Blocks the host until the event completes (cudaEventSynchronize); a fault surfaces here.
  void synchronize() const;
  /// Whether the event has completed, without waiting (cudaEventQuery).
  bool query() const;
  /// Milliseconds between `start` and this event, both recorded and complete (cudaEventElapsedTime;
  /// resolution about 0.5 us). Throws halfgrad::Error if either is not complete.
  float elapsed_ms_since(const Event& start) const;
  void* handle() const { return ev_; }  // the cudaEvent_t

 private:
  void* ev_ = nullptr;
};

/// The main stream waits for `e` (cudaStreamWaitEvent): work queued on it from now on starts only
/// after `e` completes; the host does not wait.
void main_stream_wait(const Event& e);

/// Queues a device-to-host copy of nbytes from `src` (device memory) to `dst` (pinned memory, e.g. a
/// PinnedBuffer: the copy is then asynchronous) on the main stream, after the work queued there;
/// returns at once. The bytes are on the host once an Event recorded on the main stream after it
/// completes (a result read a step late without waiting for the running step). 0 bytes does nothing.
void main_stream_copy_d2h_async(void* dst, const void* src, size_t nbytes);

/// A second stream, non-blocking with respect to the legacy default stream (as the main one), for
/// copies that overlap with the main stream's kernels.
class Stream {
 public:
  /// Creates the stream; throws halfgrad::Error (op "cuda::Stream") without a device.
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// Work queued on this stream from now on waits for `e` (cudaStreamWaitEvent).
  void wait(const Event& e);
  /// Queues a host-to-device copy of nbytes from `src` (pinned memory, e.g. a PinnedBuffer, for the
  /// copy to be asynchronous; pageable memory makes the call wait until the bytes are read) to `dst`
  /// (device memory no other stream uses meanwhile). Returns once queued; 0 bytes does nothing.
  void copy_h2d_async(void* dst, const void* src, size_t nbytes);
  /// Blocks the host until everything queued on this stream has run.
  void synchronize();
  void* handle() const { return s_; }  // the cudaStream_t

 private:
  void* s_ = nullptr;
};

}  // namespace halfgrad::cuda
