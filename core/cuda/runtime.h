// runtime.h - the CUDA device runtime halfgrad's GPU tensors stand on, in plain C++ (no CUDA types),
// so that every layer can ask for device memory and copies without including CUDA headers.
//
// One device (the current one, 0 unless CUDA_VISIBLE_DEVICES says otherwise) and one stream: every
// kernel halfgrad launches, every copy and every allocation is ordered on `cuda::stream()` (declared
// in check.cuh). One stream keeps the caching allocator simple and correct: a block freed by the host
// while kernels still read it is only handed to kernels queued after those, on the same stream. It is
// also the stream a CUDA graph captures later.
// The one exception is core/cuda/streams.h: a second stream for host-to-device copies into device
// buffers outside this allocator (cudaMalloc'd by DeviceBuffer, so not in its stats nor under its
// memory limit), ordered against this stream by events (the batch loader's).
//
// Caching allocator: core/cuda/block_allocator.h's policy (PyTorch's CUDACachingAllocator: sizes
// rounded to 512 B, a small pool of 2 MiB segments for requests <= 1 MiB and a large pool, best fit,
// blocks split and free neighbours merged) over cudaMalloc / cudaFree segments. Only a miss calls
// cudaMalloc; on cudaMalloc failure every cached free segment is cudaFree'd and the call retried
// once, then halfgrad::Error("<op>: out of CUDA memory ...") names the request and the totals.
// Memory limit: env HALFGRAD_CUDA_MEMORY_LIMIT_MB=<MiB> read at the first allocation (a positive
// integer; 0 or unset = none), or set_memory_limit at run time. Reserved memory (all segments) never
// passes it: a request that needs a new segment beyond it gives back the cached free segments first,
// then throws halfgrad::Error("<op>: out of CUDA memory: ... memory limit ..."). Like PyTorch's
// set_per_process_memory_fraction, it bounds reserved memory, so a run that fits in it fits on a
// device of that size. Everything halfgrad holds on the device counts: the eager cache, the private
// pools of live CUDA graphs (graph_pools.h) and DeviceBuffers (streams.h, through reserve_external);
// allocator_stats().budget_* give their sum. Stats mirror torch.cuda.memory_stats (allocated, reserved, their peaks, ...).
//
// Poison (a debugging instrument, the twin of the CPU allocator's in core/allocator.h): with a byte set
// (env HALFGRAD_CUDA_POISON=<byte> at start, 0..255, decimal or 0x.. hex; or set_poison at run time),
// every block allocate hands out, from the cache or from cudaMalloc, is first filled with it by a
// cudaMemsetAsync queued on the stream, so before any kernel that uses the block. Results must not
// change between two patterns (0x00, and 0xFF: NaN in FP32 and FP16): a difference is a kernel
// reading device memory it never wrote. One memset per allocation: for tests and bisecting only.
//
// In a build without CUDA (HALFGRAD_CUDA undefined) compiled() and is_available() are false and every
// other function throws halfgrad::Error("... halfgrad was built without CUDA"). In a CUDA build on a
// machine without a usable device, is_available() is false and every function that needs the device
// (sm_count, allocate, the copies, synchronize) throws halfgrad::Error("<op>: CUDA is not available
// (<driver's reason>)"); allocator_stats / reset_peak_stats / empty_cache do nothing, and
// set_memory_limit / memory_limit only keep the number.
// Errors of CUDA calls throw halfgrad::Error naming the op, the call and CUDA's error string.
// Threads: the allocator's bookkeeping is locked; all work goes to the one stream, so work queued by
// two host threads runs in the order it was queued. Copies of 0 bytes do nothing; copy_d2d's ranges
// must not overlap.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cuda/allocator_stats.h"

namespace halfgrad::cuda {

/// True when this build has the CUDA backend.
bool compiled();
/// True when the backend is compiled and a CUDA device can be used (driver present, >= 1 device).
bool is_available();
/// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)", or why CUDA is unavailable.
std::string device_description();
/// Multiprocessor count and compute capability (major*10+minor) of the current device.
int sm_count();
int compute_capability();

/// Device memory of at least `nbytes` (256-byte aligned: cudaMalloc's guarantee for a segment, kept by
/// blocks that start at multiples of 512 bytes into it), from the cache or cudaMalloc. `op` names the
/// caller in the out-of-memory error. Never null (nbytes 0 gives a valid 512-byte block).
void* allocate(size_t nbytes, const char* op = "cuda::allocate");
/// Returns a block from allocate to the cache, where the next request may take it at once (one
/// stream). `nbytes` must be the nbytes it was allocated with: another value, or a pointer that is
/// not a live block, throws halfgrad::Error (a caller's bug; from a destructor, as Storage's, that
/// ends the process with the message). Null does nothing.
void release(void* ptr, size_t nbytes);

/// Copies ordered on the stream. Host-to-device and device-to-device return once queued (the host
/// buffer of h2d is copied into a pinned staging buffer first, so it may be reused at once);
/// device-to-host waits until the bytes are on the host.
void copy_h2d(void* dst, const void* src, size_t nbytes);
void copy_d2h(void* dst, const void* src, size_t nbytes);
void copy_d2d(void* dst, const void* src, size_t nbytes);
/// Sets nbytes bytes at dst to `byte`, queued on the stream.
void memset_async(void* dst, int byte, size_t nbytes);
/// Waits for all work queued on the stream; an asynchronous kernel fault surfaces here, named with `what`.
void synchronize(const char* what = "cuda::synchronize");

/// The allocator's statistics (fields in core/cuda/allocator_stats.h). cuda_malloc_calls is flat once
/// training is in steady state.
using AllocatorStats = BlockAllocatorStats;
AllocatorStats allocator_stats();

struct MemoryInfo {
  size_t free_bytes = 0;   // cudaMemGetInfo's free: what cudaMalloc can still get, all processes counted
  size_t total_bytes = 0;  // the device's memory
};
/// cudaMemGetInfo of the current device (memory cached by this allocator counts as used; add
/// allocator_stats().reserved_bytes - allocated_bytes for what halfgrad can still hand out).
/// Throws halfgrad::Error when CUDA is not available.
MemoryInfo memory_info();
/// Peak allocated and peak reserved restart from the current values.
void reset_peak_stats();
/// Waits for the stream, then cudaFree's every segment with no live block (as torch.cuda.empty_cache).
void empty_cache();
/// Bytes reserved memory may reach (0 = none; see the header comment). Overrides
/// HALFGRAD_CUDA_MEMORY_LIMIT_MB. Throws halfgrad::Error in a build without CUDA.
void set_memory_limit(size_t bytes);
/// The limit in bytes, 0 when none (always 0 in a build without CUDA). Throws halfgrad::Error when
/// HALFGRAD_CUDA_MEMORY_LIMIT_MB does not parse, naming the variable and its value.
size_t memory_limit();
/// Device memory taken outside the caching allocator (cuda::DeviceBuffer's cudaMalloc) is counted
/// against the memory limit: reserve_external before taking `nbytes`, release_external after giving
/// them back. reserve_external gives back cached free segments when the limit would be passed, then
/// throws halfgrad::Error("<op>: out of CUDA memory: a buffer of N bytes ... past the memory limit
/// ...") if it still would (nothing counted). Without CUDA: reserve throws, release does nothing.
void reserve_external(size_t nbytes, const char* op);
void release_external(size_t nbytes);
/// The poison byte (0..255), or -1 when off (the default without HALFGRAD_CUDA_POISON; always -1 in
/// a build without CUDA).
int poison();
/// Sets the poison byte: 0..255 fills every block allocate hands out from now on, -1 turns it off.
/// Throws halfgrad::Error for any other value, and in a build without CUDA.
void set_poison(int byte);

}  // namespace halfgrad::cuda
