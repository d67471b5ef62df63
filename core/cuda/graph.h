// graph.h - CUDA graphs: the work a function queues on the compute stream recorded once and replayed
// with one launch (PyTorch's torch.cuda.CUDAGraph), in plain C++ (no CUDA types).
//
// Why: a training step of the U-Net is a few hundred kernels, most of them small. Launched one by one
// from the host, each costs a few microseconds of CPU time and leaves the GPU idle while the host
// queues the next; a graph hands the whole list to the driver at once.
//
// What a graph can hold: work on cuda::stream() only (kernels, device-to-device copies, memsets), at
// the device addresses it had during the capture, with the kernel arguments it had then. So the
// captured function must:
//   * never wait for the device or read a result on the host (Tensor::item(), copy_to(CPU),
//     cuda::synchronize, a host decision on a device value): CUDA refuses these during a capture, and
//     the error names the capture (runtime.cpp's throw_cuda_error);
//   * take every per-step value that changes (the learning rate, the batch, the loss scale, a step
//     count) from device memory that the host or the device itself updates between replays, never
//     from a host number baked into a launch (a baked number is replayed as it was);
//   * read its inputs from buffers that outlive the graph (static input buffers the host copies each
//     batch into before a replay). A tensor made before the capture, read by captured work and freed
//     during the capture goes back to the eager cache, where later eager work may overwrite what the
//     replays read: parameters, optimizer state, the scaler's device state and the static buffers
//     all outlive the graph; nothing else made outside may be read inside.
// Memory: while capture() runs, every cuda::allocate comes from this graph's private pool
// (core/cuda/graph_pools.h), so the addresses replays use are never handed to eager code; tensors
// freed during the capture return to that pool and are reused by later captured work, exactly as the
// eager cache would; tensors that outlive the capture (a captured backward's gradients) keep their
// pool blocks until released. The pool's segments are freed when the graph is destroyed and its last
// block is released.
// Capture mode: cudaStreamCaptureModeThreadLocal - the calling thread may not make unsafe calls
// (cudaMalloc stays legal, cudaStreamSynchronize / cudaMemcpy to the host do not); other threads (the
// batch loader's copies on their own stream) are not affected.
// A capture does not run the work: capture() records it, and replay() runs it. So a training step
// captured after a few eager warm-up steps (which create the optimizer state and anything else made
// lazily) is first executed by the first replay.
// One capture at a time; replays are asynchronous (queued on the stream like any kernel).
// runtime.h's copies during a capture: copy_h2d throws (a replay would copy the staging buffer's
// later bytes) and copy_d2h fails (CUDA refuses the wait), each naming the capture.
// (These declarations sit here rather than in runtime.h, which every .cu file includes.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/cuda/allocator_stats.h"

namespace halfgrad::cuda {

// ---- graph-private memory pools (core/cuda/graph_pools.h): the allocator side of Graph, defined in
// runtime.cpp. cuda::allocate during a capture serves from the capturing graph's pool; cuda::release
// returns a block to the pool it came from; a retired pool's segments are freed once its last block
// is released. allocator_stats(), the memory limit and empty_cache() concern the eager cache only.
/// A new, empty pool; its id. Throws when CUDA is not available.
uint64_t graph_pool_create();
/// Allocations go to `pool` until graph_pool_end_capture(); `what` names the capture in the error of
/// any CUDA call that fails meanwhile (throw_cuda_error adds why a capture refuses waits and copies
/// to the host). Throws if a capture is already active.
void graph_pool_begin_capture(uint64_t pool, const std::string& what);
void graph_pool_end_capture();
/// The pool's graph is gone (see graph_pools.h).
void graph_pool_retire(uint64_t pool);
/// A pool's statistics (its reserved bytes are the graph's memory).
BlockAllocatorStats graph_pool_stats(uint64_t pool);
/// True while a Graph::capture is active (false in a build without CUDA): code that must not bake
/// host values or create state inside a capture asks this.
bool capturing();

class Graph {
 public:
  Graph() = default;
  /// Destroys the executable graph and retires its memory pool (graph_pools.h). Queued replays finish
  /// first (cudaGraphExecDestroy is stream-safe: CUDA keeps the graph until its launches complete).
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Records what `fn` queues on cuda::stream() into a new graph (replacing any earlier one) and
  /// instantiates it. `what` names the capture in errors ("the U-Net training step"). If fn throws, or
  /// CUDA refuses a call inside it, the capture is abandoned (the stream leaves capture mode, the
  /// allocator serves eager requests again) and the error is rethrown, with `what` in its message.
  /// What fn did on the host stays done (tensors it made hold no values: their kernels never ran).
  /// Throws halfgrad::Error when CUDA is not available or a capture is already active.
  void capture(const std::function<void()>& fn, const std::string& what);
  /// Queues one run of the captured work on cuda::stream() (cudaGraphLaunch); the host does not wait.
  /// Throws if nothing was captured.
  void replay();
  /// Whether capture() has succeeded.
  bool ready() const { return exec_ != nullptr; }
  /// Kernel, copy and memset nodes in the captured graph (0 before a capture): the launches one
  /// replay replaces.
  size_t num_nodes() const { return num_nodes_; }
  /// Bytes the graph's private pool holds from the device (0 before a capture).
  size_t pool_reserved_bytes() const;
  const std::string& what() const { return what_; }

 private:
  void destroy();

  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  uint64_t pool_ = 0;      // graph_pools.h's id; 0 before a capture
  size_t num_nodes_ = 0;
  std::string what_;
};

}  // namespace halfgrad::cuda
