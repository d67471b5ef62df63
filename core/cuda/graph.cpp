// graph.cpp - cuda::Graph (graph.h): cudaStreamBeginCapture / cudaStreamEndCapture on the compute
// stream around the captured function, the allocator's private pool around it too, then
// cudaGraphInstantiate; cudaGraphLaunch per replay. Compiled only in a CUDA build (runtime_stub.cpp
// stands in otherwise).
#include "core/cuda/graph.h"

#include <cuda_runtime.h>

#include <exception>

#include "core/cuda/check.cuh"
#include "core/error.h"

namespace halfgrad::cuda {
namespace {
cudaGraph_t as_graph(void* p) { return static_cast<cudaGraph_t>(p); }
cudaGraphExec_t as_exec(void* p) { return static_cast<cudaGraphExec_t>(p); }
}  // namespace

Graph::~Graph() { destroy(); }

void Graph::destroy() {
  // Destructor path: errors are ignored (a broken CUDA context fails everything after it anyway).
  if (exec_) cudaGraphExecDestroy(as_exec(exec_));
  if (graph_) cudaGraphDestroy(as_graph(graph_));
  exec_ = graph_ = nullptr;
  num_nodes_ = 0;
  if (pool_ != 0) {
    try {
      graph_pool_retire(pool_);
    } catch (...) {  // a destructor must not throw; the pool then stays reserved
    }
  }
  pool_ = 0;
}

void Graph::capture(const std::function<void()>& fn, const std::string& what) {
  HG_CHECK(!capturing(), "cuda::Graph::capture of '" << what << "': another capture is active; one at a time");
  destroy();
  what_ = what;
  pool_ = graph_pool_create();
  cudaStream_t s = stream();
  graph_pool_begin_capture(pool_, what);
  // An abandoned capture: leave capture mode (the stream and the allocator serve eager work again)
  // and drop whatever was recorded.
  const auto abandon = [&] {
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(s, &g) != cudaSuccess) cudaGetLastError();  // capture errors are not sticky
    if (g) cudaGraphDestroy(g);
    graph_pool_end_capture();
  };
  const cudaError_t begin = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (begin != cudaSuccess) {
    graph_pool_end_capture();
    throw_cuda_error(("cuda::Graph::capture of '" + what + "'").c_str(), "cudaStreamBeginCapture", begin);
  }
  try {
    fn();
  } catch (const std::exception& e) {
    abandon();
    HG_FAIL("cuda::Graph::capture of '" << what << "' failed: " << e.what());
  } catch (...) {
    abandon();
    throw;
  }
  cudaGraph_t g = nullptr;
  {
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    graph_pool_end_capture();
    if (e != cudaSuccess) {
      cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      throw_cuda_error(("cuda::Graph::capture of '" + what + "'").c_str(), "cudaStreamEndCapture", e);
    }
  }
  graph_ = g;
  size_t n = 0;
  HG_CUDA_CHECK("cuda::Graph::capture", cudaGraphGetNodes(g, nullptr, &n));
  num_nodes_ = n;
  cudaGraphExec_t exec = nullptr;
  HG_CUDA_CHECK("cuda::Graph::capture", cudaGraphInstantiate(&exec, g, 0));
  exec_ = exec;
}

void Graph::replay() {
  HG_CHECK(exec_ != nullptr, "cuda::Graph::replay: nothing was captured (call capture() first)");
  HG_CUDA_CHECK("cuda::Graph::replay", cudaGraphLaunch(as_exec(exec_), stream()));
}

size_t Graph::pool_reserved_bytes() const {
  return pool_ == 0 ? 0 : graph_pool_stats(pool_).reserved_bytes;
}

}  // namespace halfgrad::cuda
