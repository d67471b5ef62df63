// nccl_communicator.cpp - see nccl_communicator.h for the stream and lifetime rules.
#include "dist/nccl_communicator.h"

#include "core/error.h"

#if HALFGRAD_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <mutex>
#include <type_traits>
#include <cstring>
#include <string>
#include <thread>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#endif

namespace halfgrad::dist {

#if HALFGRAD_NCCL

namespace {

// libnccl is loaded on first use (dlopen), not linked: every halfgrad program then starts on a
// machine without NCCL (it is 200+ MB and often not installed where a single GPU trains), and only
// the nccl backend fails there, saying so. The calls below go through this table; nccl.h gives the
// types and signatures. Search order: libnccl.so.2 on the loader's path (LD_LIBRARY_PATH, e.g.
// PyTorch's nvidia/nccl/lib), then the library CMake found (HALFGRAD_NCCL_PATH).
struct NcclApi {
  decltype(&::ncclGetUniqueId) ncclGetUniqueId = nullptr;
  decltype(&::ncclCommInitRank) ncclCommInitRank = nullptr;
  decltype(&::ncclCommDestroy) ncclCommDestroy = nullptr;
  decltype(&::ncclCommAbort) ncclCommAbort = nullptr;
  decltype(&::ncclCommGetAsyncError) ncclCommGetAsyncError = nullptr;
  decltype(&::ncclAllReduce) ncclAllReduce = nullptr;
  decltype(&::ncclBroadcast) ncclBroadcast = nullptr;
  decltype(&::ncclGetErrorString) ncclGetErrorString = nullptr;
  decltype(&::ncclGetLastError) ncclGetLastError = nullptr;
};

const NcclApi& nccl() {
  static NcclApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
#ifdef HALFGRAD_NCCL_PATH
    if (!h) h = dlopen(HALFGRAD_NCCL_PATH, RTLD_NOW | RTLD_GLOBAL);
#endif
    if (!h) {
      error = std::string("cannot load libnccl.so.2 (") + dlerror() +
              "); put the folder holding it on LD_LIBRARY_PATH (the CUDA toolkit's lib, or PyTorch's nvidia/nccl/lib)";
      return;
    }
    const auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && error.empty()) error = std::string("libnccl.so.2 has no ") + name + " (NCCL older than 2.13?)";
    };
    get(api.ncclGetUniqueId, "ncclGetUniqueId");
    get(api.ncclCommInitRank, "ncclCommInitRank");
    get(api.ncclCommDestroy, "ncclCommDestroy");
    get(api.ncclCommAbort, "ncclCommAbort");
    get(api.ncclCommGetAsyncError, "ncclCommGetAsyncError");
    get(api.ncclAllReduce, "ncclAllReduce");
    get(api.ncclBroadcast, "ncclBroadcast");
    get(api.ncclGetErrorString, "ncclGetErrorString");
    get(api.ncclGetLastError, "ncclGetLastError");
  });
  HG_CHECK(error.empty(), "nccl: " << error);
  return api;
}

[[noreturn]] void throw_nccl(const char* op, const char* call, ncclResult_t r, ncclComm_t comm) {
  std::string detail = nccl().ncclGetErrorString(r);
  if (comm) {
    const char* last = nccl().ncclGetLastError(comm);
    if (last && *last) detail += " (" + std::string(last) + ")";
  }
  HG_FAIL(op << ": " << call << " failed: " << detail);
}

#define HG_NCCL_CHECK(op, call, comm)                               \
  do {                                                              \
    ncclResult_t hg_nccl_r_ = (call);                               \
    if (hg_nccl_r_ != ncclSuccess) throw_nccl(op, #call, hg_nccl_r_, comm); \
  } while (0)

ncclDataType_t nccl_dtype(Dtype d) {
  switch (d) {
    case kFloat32: return ncclFloat32;
    case kFloat16: return ncclFloat16;
    case kBFloat16: return ncclBfloat16;
    case kFloat64: return ncclFloat64;
    case kInt64: return ncclInt64;
  }
  HG_FAIL("all_reduce (nccl): dtype " << dtype_name(d) << " has no NCCL type");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

cudaEvent_t new_event(const char* op) {
  cudaEvent_t e = nullptr;
  HG_CUDA_CHECK(op, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// A collective on the communication stream: keeps the tensor's storage alive, and orders
// cuda::stream() after it in wait() (or in the destructor, when nobody waited).
class NcclWork : public Work {
 public:
  NcclWork(Tensor keep, cudaEvent_t done, ncclComm_t comm) : keep_(std::move(keep)), done_(done), comm_(comm) {}
  ~NcclWork() override {
    if (!waited_) cudaStreamWaitEvent(cuda::stream(), done_, 0);  // no throw from a destructor
    cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    HG_CUDA_CHECK("all_reduce (nccl): Work::wait", cudaStreamWaitEvent(cuda::stream(), done_, 0));
    keep_ = Tensor();  // the storage may now be reused: cuda::stream() runs after the collective
    ncclResult_t async = ncclSuccess;
    HG_NCCL_CHECK("all_reduce (nccl): Work::wait", nccl().ncclCommGetAsyncError(comm_, &async), comm_);
    if (async != ncclSuccess) throw_nccl("all_reduce (nccl)", "the collective (asynchronous error)", async, comm_);
  }

 private:
  Tensor keep_;
  cudaEvent_t done_;
  ncclComm_t comm_;
  bool waited_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int world_size, const Blob& unique_id) : rank_(rank), world_(world_size) {
    HG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
             "make_nccl_communicator: rank " << rank << " of world size " << world_size
                                             << "; expected 0 <= rank < world size");
    HG_CHECK(unique_id.size() == sizeof(ncclUniqueId),
             "make_nccl_communicator: unique id of " << unique_id.size() << " bytes; expected "
                                                     << sizeof(ncclUniqueId) << " (ncclUniqueId, from rank 0's nccl_unique_id)");
    HG_CHECK(cuda::is_available(), "make_nccl_communicator: CUDA is not available; NCCL needs a GPU per rank");
    ncclUniqueId id;
    std::memcpy(&id, unique_id.data(), sizeof id);
    HG_CUDA_CHECK("make_nccl_communicator", cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    const ncclResult_t r = nccl().ncclCommInitRank(&comm_, world_size, id, rank);
    if (r != ncclSuccess) {
      cudaStreamDestroy(comm_stream_);
      throw_nccl("make_nccl_communicator", "ncclCommInitRank", r, nullptr);
    }
    barrier_flag_ = Tensor::zeros({1}, kInt64, Device::CUDA);
  }

  ~NcclCommunicator() override {
    // A collective still queued waits for peers that may have gone (a rank that failed): give the
    // stream 10 s, then abort instead of hanging in ncclCommDestroy.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    cudaError_t q;
    while ((q = cudaStreamQuery(comm_stream_)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (q == cudaSuccess) nccl().ncclCommDestroy(comm_);
    else nccl().ncclCommAbort(comm_);
    cudaStreamDestroy(comm_stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce (nccl)");
    const ncclDataType_t dt = nccl_dtype(t.dtype());
    cudaEvent_t done = enqueue_after_main("all_reduce (nccl)", [&] {
      HG_NCCL_CHECK("all_reduce (nccl)",
                    nccl().ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), dt, nccl_op(op), comm_,
                                  comm_stream_),
                    comm_);
    });
    t.bump_version();
    return std::make_shared<NcclWork>(t, done, comm_);
  }

  void broadcast(Tensor& t, int root) override {
    check_tensor(t, "broadcast (nccl)");
    HG_CHECK(root >= 0 && root < world_, "broadcast (nccl): root " << root << "; expected [0, " << world_ << ")");
    // Any dtype: the bytes are copied as they are.
    cudaEvent_t done = enqueue_after_main("broadcast (nccl)", [&] {
      HG_NCCL_CHECK("broadcast (nccl)",
                    nccl().ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm_, comm_stream_), comm_);
    });
    if (rank_ != root) t.bump_version();
    NcclWork(t, done, comm_).wait();
  }

  void barrier() override {
    all_reduce(barrier_flag_, ReduceOp::kSum);
    cuda::synchronize("barrier (nccl)");  // cuda::stream() waits for the collective, the host for it
  }

 private:
  void check_tensor(const Tensor& t, const char* op) const {
    HG_CHECK(t.defined(), op << ": undefined tensor");
    HG_CHECK(t.device() == Device::CUDA,
             op << ": tensor on the CPU; the nccl backend reduces CUDA tensors (use the in-process group on the CPU)");
  }

  // Queues `collective` on the communication stream after everything queued on cuda::stream() so
  // far, and returns an event recorded after it.
  template <typename F>
  cudaEvent_t enqueue_after_main(const char* op, F collective) {
    cudaEvent_t ready = new_event(op);
    cudaEvent_t done = nullptr;
    try {
      HG_CUDA_CHECK(op, cudaEventRecord(ready, cuda::stream()));
      HG_CUDA_CHECK(op, cudaStreamWaitEvent(comm_stream_, ready, 0));
      collective();
      done = new_event(op);
      HG_CUDA_CHECK(op, cudaEventRecord(done, comm_stream_));
    } catch (...) {
      cudaEventDestroy(ready);
      if (done) cudaEventDestroy(done);
      throw;
    }
    cudaEventDestroy(ready);  // released once the stream has passed it
    return done;
  }

  int rank_, world_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  Tensor barrier_flag_;  // (1,) int64 on the device, all-reduced by barrier()
};

}  // namespace

bool nccl_compiled() { return true; }

Blob nccl_unique_id() {
  ncclUniqueId id;
  HG_NCCL_CHECK("nccl_unique_id", nccl().ncclGetUniqueId(&id), nullptr);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&id);
  return Blob(p, p + sizeof id);
}

std::shared_ptr<Communicator> make_nccl_communicator(int rank, int world_size, const Blob& unique_id) {
  return std::make_shared<NcclCommunicator>(rank, world_size, unique_id);
}

#else  // !HALFGRAD_NCCL

namespace {
[[noreturn]] void no_nccl(const char* op) {
  HG_FAIL(op << ": halfgrad was built without NCCL (HALFGRAD_NCCL is off: no CUDA, or nccl.h / libnccl not "
                "found in the CUDA toolkit); the nccl backend and --gpus need a build with it");
}
}  // namespace

bool nccl_compiled() { return false; }
Blob nccl_unique_id() { no_nccl("nccl_unique_id"); }
std::shared_ptr<Communicator> make_nccl_communicator(int, int, const Blob&) { no_nccl("make_nccl_communicator"); }

#endif

std::shared_ptr<Communicator> make_nccl_communicator(const RendezvousConfig& config) {
  // Without NCCL, fail before a rank waits minutes in the rendezvous for a rank 0 that has failed.
  if (!nccl_compiled()) return make_nccl_communicator(config.rank, config.world_size, Blob{});
  const Blob id = config.rank == 0 ? nccl_unique_id() : Blob{};
  return make_nccl_communicator(config.rank, config.world_size, rendezvous(config, id));
}

}  // namespace halfgrad::dist
