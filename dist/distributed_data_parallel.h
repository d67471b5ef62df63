// distributed_data_parallel.h - data-parallel training over a Communicator, following
// torch.nn.parallel.DistributedDataParallel (torch/nn/parallel/distributed.py and its C++ Reducer,
// torch/csrc/distributed/c10d/reducer.cpp). docs/distributed.md is the user's guide.
//
// Every rank holds a replica of the model and runs it on its own slice of the global batch; after
// backward every rank holds the gradient AVERAGED over the ranks, so identical optimizer steps keep
// the replicas identical. What DistributedDataParallel does:
//
//  * Construction: broadcasts every parameter and buffer from rank 0 (in place), so the replicas
//    start identical whatever each rank's initialisation was (a buffer kept on the host while the
//    parameters are on a GPU, BatchNorm's num_batches_tracked, goes through a device copy: NCCL
//    reduces device memory only). Then groups the parameters that
//    require grad into buckets: in REVERSE registration order (the order backward produces their
//    gradients), a new bucket when the current one reaches bucket_cap_mb (of the bucket's dtype) or
//    when the dtype or device changes (one open bucket per (dtype, device), as the Reducer). Each
//    bucket owns one flat tensor (numel = the sum of its parameters'), allocated once.
//    (PyTorch also caps the first bucket at 1 MB so communication starts sooner; halfgrad has one cap.)
//  * Backward: a post-accumulate-grad hook (autograd/node.h) on each parameter copies its .grad into
//    its bucket's slice, divided by world_size on the way (see "Averaging"). When a bucket's last
//    gradient is in, its all_reduce_async(kSum) is launched at once, while backward goes on with the
//    earlier layers: communication overlaps computation. Buckets are launched in index order (a
//    ready bucket waits for the ones before it, as the Reducer's next_bucket_), so every rank issues
//    the same collectives in the same order even if its hooks fire in another order.
//  * End of backward: the first hook of a pass queues finalize() with autograd's
//    queue_backward_callback (PyTorch's final engine callback), so when backward() returns every
//    bucket has been waited for and each parameter's .grad holds the average. Nothing to call by
//    hand before optimizer.step(); zero_grad between iterations as usual.
//  * Unused parameters: a parameter whose gradient did not arrive in a synced pass makes finalize()
//    throw halfgrad::Error naming it (PyTorch's find_unused_parameters=False is an error too, with a
//    vaguer message). With DdpOptions().find_unused_parameters(true) its slice holds its current
//    .grad (a sum accumulated under no_sync(), as PyTorch copies it) or zeros when it has none, and
//    the bucket is reduced; afterwards its .grad holds the average (created if undefined: where
//    PyTorch leaves a parameter unused on every rank without a .grad, halfgrad gives it zeros). The
//    set of such parameters must be the same on every rank (PyTorch all-reduces a bitmap of them;
//    halfgrad does not), or the ranks launch different buckets (an Error from the communicator, or
//    an NCCL hang).
//  * Averaging: the gradient is multiplied by 1/world_size while it is copied into the bucket, and
//    the bucket is then SUMMED: pre-division, as PyTorch's Reducer does (copy_grad_to_bucket's
//    mul_out by 1/div_factor) and as its comm hooks do (default_hooks.py: allreduce_hook and
//    fp16_compress_hook divide before all_reduce). In an FP16 bucket this keeps the sum of N
//    gradients in range: N gradients near FP16's max would overflow to inf when summed first. By
//    default a bucket has the gradients' dtype. DdpOptions().gradient_as_fp32(true) makes FP16/BF16
//    parameters' buckets FP32 instead (reduced in FP32, rounded back once into the FP16 .grad): twice
//    the bytes on the wire, no rounding in the sum. For world_size 1 nothing is divided (exact).
//  * no_sync(): inside the guard, forward and backward communicate nothing; gradients accumulate in
//    .grad locally. The next forward/backward outside the guard reduces the accumulated sum (the
//    average over ranks of each rank's sum), as PyTorch's no_sync. The decision is taken at
//    forward(), as in PyTorch: run forward through this object, not through module().
//  * BatchNorm is per rank (PyTorch without SyncBatchNorm): each rank normalises with its own batch's
//    statistics. With broadcast_buffers (default true, PyTorch's default) every forward first
//    broadcasts rank 0's buffers (running_mean / running_var), so the running statistics are rank
//    0's; with false each rank keeps its own. halfgrad has no SyncBatchNorm.
//  * Mixed precision: gradients are reduced in backward, BEFORE GradScaler::unscale_ and clipping;
//    scaling is linear, so averaging scaled gradients and unscaling afterwards is the same. The
//    scaler's inf/NaN flag must agree too: dist::set_communicator(scaler, comm)
//    (dist/scaler_agreement.h) MAX-reduces it, so every rank skips the same steps and keeps the
//    same scale. Then clip_grad_norm_ (after unscale_, the train loop's order), then step.
//  * check_replicas(what): compares a hash of every parameter's bits across ranks and throws on
//    every rank, naming the first parameter that differs: the check that FP32 master weights are
//    identical on every rank.
//
// Threads: one DistributedDataParallel belongs to one rank; its hooks run on the thread that runs
// that rank's backward. Several ranks' DDPs may run backward on several threads at once (the engine's
// hook tables are locked; grad mode and autocast are per thread).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/arg.h"
#include "dist/communicator.h"
#include "nn/module.h"

namespace halfgrad::dist {

class DdpOptions {
 public:
  /// Bucket size in MiB (2^20 bytes) of the bucket's dtype; > 0. Default 25, as PyTorch.
  HG_ARG(double, bucket_cap_mb) = 25.0;
  /// Reduce FP16/BF16 gradients in FP32 buckets (default false: buckets in the gradients' dtype).
  HG_ARG(bool, gradient_as_fp32) = false;
  /// Zero-fill parameters that got no gradient instead of throwing (default false, as PyTorch).
  HG_ARG(bool, find_unused_parameters) = false;
  /// Broadcast rank 0's buffers before every forward in training mode (default true, as PyTorch).
  HG_ARG(bool, broadcast_buffers) = true;
};

/// A bucket as built at construction: which parameters (names as named_parameters()), in the order
/// their gradients sit in the flat tensor, and the flat tensor's dtype, device and numel.
struct BucketInfo {
  std::vector<std::string> params;
  Dtype dtype = kFloat32;
  Device device = Device::CPU;
  int64_t numel = 0;
};

/// One bucket's all-reduce being launched, for tests and tracing: the bucket, when (steady clock, on
/// the rank's backward thread), and whether a hook launched it during backward (true) or finalize()
/// did (false: an unused parameter's bucket, or one queued behind it).
struct BucketLaunch {
  int bucket = 0;
  std::chrono::steady_clock::time_point time;
  bool from_hook = true;
};

class DistributedDataParallel {
 public:
  /// Wraps `module` (non-null) for the group of `comm` (non-null). Broadcasts every parameter and
  /// buffer from rank 0 (every rank must construct its DDP at the same point: it is a collective)
  /// and builds the buckets. Throws halfgrad::Error for null arguments, bucket_cap_mb <= 0, or a
  /// module with no parameter that requires grad; the communicator's errors pass through (a
  /// replica whose parameter shapes differ from rank 0's: the broadcast names both shapes).
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<Communicator> comm,
                          DdpOptions options = DdpOptions());
  /// Removes the hooks from the parameters.
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// (*module)(x), after broadcasting buffers (see the file comment) and preparing this pass's
  /// reduction (or none, inside no_sync()).
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  Communicator& communicator() { return *comm_; }

  /// RAII: forwards (and their backwards) inside the guard do not communicate; see the file comment.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.require_sync_) { ddp.require_sync_ = false; }
    ~NoSyncGuard() { ddp_.require_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  /// `auto guard = ddp.no_sync();` (C++17 guaranteed elision: the guard is not copied).
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Compares every parameter's bits across ranks (an FNV-1a hash of its bytes, rank 0's broadcast
  /// to all), a collective: every rank must call it. Throws halfgrad::Error on EVERY rank when any
  /// rank's copy differs, naming `what`, the first differing parameter (registration order), its
  /// shape and dtype, and how many parameters differ.
  void check_replicas(const char* what);

  /// The buckets, in launch order (bucket 0 holds the last-registered parameters).
  const std::vector<BucketInfo>& buckets() const { return bucket_info_; }
  /// The launches of the last synced backward pass, in the order they happened.
  const std::vector<BucketLaunch>& last_launches() const { return last_launches_; }
  /// Synced backward passes finalised so far (no_sync passes not counted).
  int64_t reductions() const { return reductions_; }

 private:
  struct Slot {  // one parameter in its bucket
    Tensor param;
    std::string name;
    int bucket = 0;
    int64_t offset = 0;  // in elements of the bucket's dtype
    bool ready = false;  // its gradient is in the bucket (this pass)
  };
  struct Bucket {
    std::vector<int> slots;  // indices into slots_
    Tensor flat;             // (numel,) in the bucket's dtype, on the parameters' device
    int pending = 0;         // gradients still to arrive this pass
    std::shared_ptr<Work> work;
  };
  void build_buckets();
  void prepare_pass();
  void on_grad_ready(int slot);
  void launch_ready_buckets(bool from_hook);
  void finalize();
  void copy_into_bucket(Slot& s, const Tensor& grad);
  void copy_out_of_bucket(Slot& s);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<Communicator> comm_;
  DdpOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> bucket_info_;
  std::vector<int> hook_ids_;  // one per slot
  bool require_sync_ = true;   // no_sync() clears it
  bool sync_pass_ = true;      // require_sync_ as the last forward saw it
  bool finalize_queued_ = false;
  int next_bucket_ = 0;        // the next bucket to launch, in index order
  std::vector<BucketLaunch> launches_, last_launches_;
  int64_t reductions_ = 0;
};

}  // namespace halfgrad::dist
