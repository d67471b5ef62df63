// distributed_data_parallel.cpp - buckets, hooks and the reduction of distributed_data_parallel.h.
#include "dist/distributed_data_parallel.h"

#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ops/elementwise/elementwise.h"

namespace halfgrad::dist {

namespace {

// The dtype a parameter's gradient is reduced in.
Dtype bucket_dtype(Dtype param_dtype, const DdpOptions& o) {
  return o.gradient_as_fp32() && is_reduced_float(param_dtype) ? kFloat32 : param_dtype;
}

// Raw copy of nbytes between two buffers on `device` (host memcpy, or a device copy on the stream).
void copy_bytes(void* dst, const void* src, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  if (device == Device::CUDA) cuda::copy_d2d(dst, src, nbytes);
  else std::memcpy(dst, src, nbytes);
}

char* byte_ptr(const Tensor& t, int64_t element_offset) {
  return static_cast<char*>(t.raw_data()) + element_offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

/// Broadcasts `t` from rank 0 in place. A tensor the module keeps on the host while its parameters
/// are on a GPU (BatchNorm's num_batches_tracked counter) travels through a copy on `device`: NCCL
/// reduces device memory only.
void broadcast_on(Communicator& comm, Tensor& t, Device device) {
  if (t.device() == device) {
    comm.broadcast(t, 0);
    return;
  }
  Tensor staged = t.copy_to(device);
  comm.broadcast(staged, 0);
  t.copy_from(staged.copy_to(t.device()));
}

/// The device of the module's first parameter (the CPU for a module without any).
Device parameter_device(nn::Module& m) {
  const std::vector<Tensor> ps = m.parameters();
  return ps.empty() ? Device::CPU : ps.front().device();
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<Communicator> comm,
                                                 DdpOptions options)
    : module_(std::move(module)), comm_(std::move(comm)), options_(options) {
  HG_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  HG_CHECK(comm_ != nullptr, "DistributedDataParallel: the communicator is null");
  HG_CHECK(options_.bucket_cap_mb() > 0, "DistributedDataParallel: bucket_cap_mb " << options_.bucket_cap_mb()
                                                                                   << "; expected > 0");
  {
    NoGradGuard no_grad;
    for (Tensor& p : module_->parameters()) comm_->broadcast(p, 0);
    const Device device = parameter_device(*module_);
    for (Tensor& b : module_->buffers()) broadcast_on(*comm_, b, device);
  }
  build_buckets();
  hook_ids_.reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const int slot = static_cast<int>(i);
    hook_ids_.push_back(autograd::add_post_accumulate_grad_hook(
        slots_[i].param, [this, slot](const Tensor&) { on_grad_ready(slot); }));
  }
  prepare_pass();
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < hook_ids_.size(); ++i) autograd::remove_post_accumulate_grad_hook(slots_[i].param, hook_ids_[i]);
}

// Reverse registration order; one open bucket per (dtype, device); a bucket is closed once it holds
// bucket_cap_mb or more (the Reducer's compute_bucket_assignment_by_size).
void DistributedDataParallel::build_buckets() {
  const nn::NamedTensors named = module_->named_parameters();
  const double cap_bytes = options_.bucket_cap_mb() * 1024.0 * 1024.0;
  std::map<std::pair<Dtype, Device>, int> open;  // -> index in buckets_
  std::vector<int64_t> bytes;
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    const Tensor& p = it->second;
    if (!p.requires_grad()) continue;
    const Dtype dt = bucket_dtype(p.dtype(), options_);
    const auto key = std::make_pair(dt, p.device());
    auto found = open.find(key);
    if (found == open.end()) {
      buckets_.emplace_back();
      bucket_info_.push_back(BucketInfo{{}, dt, p.device(), 0});
      bytes.push_back(0);
      found = open.emplace(key, static_cast<int>(buckets_.size()) - 1).first;
    }
    const int b = found->second;
    Slot s;
    s.param = p;
    s.name = it->first;
    s.bucket = b;
    s.offset = bucket_info_[b].numel;
    slots_.push_back(std::move(s));
    buckets_[b].slots.push_back(static_cast<int>(slots_.size()) - 1);
    bucket_info_[b].params.push_back(it->first);
    bucket_info_[b].numel += p.numel();
    bytes[b] += p.numel() * static_cast<int64_t>(dtype_size(dt));
    if (static_cast<double>(bytes[b]) >= cap_bytes) open.erase(found);
  }
  HG_CHECK(!slots_.empty(), "DistributedDataParallel: the module has no parameter that requires grad");
  // Buckets were numbered as opened; launch order is by the position of their first parameter,
  // which is the same thing, so bucket index = launch order.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].flat = Tensor::zeros({bucket_info_[b].numel}, bucket_info_[b].dtype, bucket_info_[b].device);
  }
}

void DistributedDataParallel::prepare_pass() {
  for (Slot& s : slots_) s.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.slots.size());
    b.work.reset();
  }
  next_bucket_ = 0;
  finalize_queued_ = false;
  launches_.clear();
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (module_->is_training() && options_.broadcast_buffers() && comm_->world_size() > 1) {
    NoGradGuard no_grad;
    const Device device = parameter_device(*module_);
    for (Tensor& b : module_->buffers()) broadcast_on(*comm_, b, device);
  }
  sync_pass_ = require_sync_;
  prepare_pass();
  return (*module_)(x);
}

// grad (already accumulated into .grad) * (1 / world_size), in the bucket's dtype, into the slice.
void DistributedDataParallel::copy_into_bucket(Slot& s, const Tensor& grad) {
  Bucket& b = buckets_[s.bucket];
  NoGradGuard no_grad;
  amp::AutocastGuard no_autocast(false);
  Tensor g = grad.memory_format() == MemoryFormat::Contiguous ? grad : grad.format_copy(MemoryFormat::Contiguous);
  // In the bucket's dtype first (FP16 to FP32 is exact, for gradient_as_fp32), then divided: the
  // product is formed in FP32 (FP64 for double) and rounded once to the bucket's dtype, as PyTorch's
  // mul_out. affine takes the factor as a kernel argument: a scalar tensor copied to the device here
  // would make the host wait for the GPU in every hook (copy_h2d's staging buffer).
  if (g.dtype() != b.flat.dtype()) g = g.cast_copy(b.flat.dtype());
  if (comm_->world_size() > 1) g = ops::affine(g, 1.0 / comm_->world_size(), 0.0);
  copy_bytes(byte_ptr(b.flat, s.offset), g.raw_data(), g.nbytes(), b.flat.device());
}

void DistributedDataParallel::copy_out_of_bucket(Slot& s) {
  Bucket& b = buckets_[s.bucket];
  Tensor avg = Tensor::empty(s.param.shape(), b.flat.dtype(), b.flat.device());
  copy_bytes(avg.raw_data(), byte_ptr(b.flat, s.offset), avg.nbytes(), b.flat.device());
  Tensor grad = s.param.grad();
  if (grad.defined()) grad.copy_from(avg);  // converts to the gradient's dtype and memory format
  else s.param.set_grad(avg.dtype() == s.param.dtype() ? avg : avg.cast_copy(s.param.dtype()));
}

void DistributedDataParallel::on_grad_ready(int slot) {
  if (!sync_pass_) return;  // no_sync(): the gradient stays in .grad, accumulating
  Slot& s = slots_[slot];
  if (s.ready) return;  // a second backward through the same graph before finalize: counted once
  if (!finalize_queued_) {
    autograd::queue_backward_callback([this] { finalize(); });
    finalize_queued_ = true;
  }
  copy_into_bucket(s, s.param.grad());
  s.ready = true;
  if (--buckets_[s.bucket].pending == 0) launch_ready_buckets(true);
}

void DistributedDataParallel::launch_ready_buckets(bool from_hook) {
  while (next_bucket_ < static_cast<int>(buckets_.size()) && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    launches_.push_back({next_bucket_, std::chrono::steady_clock::now(), from_hook});
    b.work = comm_->all_reduce_async(b.flat, ReduceOp::kSum);
    ++next_bucket_;
  }
}

void DistributedDataParallel::finalize() {
  // Parameters whose gradient never arrived: an error, or zeros (find_unused_parameters).
  for (size_t b = next_bucket_; b < buckets_.size(); ++b) {
    for (int i : buckets_[b].slots) {
      Slot& s = slots_[i];
      if (s.ready) continue;
      int missing = 0;
      for (const Slot& t : slots_) missing += t.ready ? 0 : 1;
      HG_CHECK(options_.find_unused_parameters(),
               "DistributedDataParallel (rank " << comm_->rank() << "): parameter '" << s.name << "' "
                   << shape_str(s.param.shape()) << " received no gradient in this backward pass ("
                   << missing << " of " << slots_.size() << " parameters got none): every parameter must "
                   "take part in the loss on every rank, or set DdpOptions().find_unused_parameters(true) "
                   "to reduce zeros for them");
      // A gradient accumulated by earlier no_sync() passes is reduced as it stands (PyTorch copies the
      // existing .grad too); with none, zeros.
      if (s.param.grad().defined()) {
        copy_into_bucket(s, s.param.grad());
      } else {
        Tensor zeros = Tensor::zeros({s.param.numel()}, buckets_[b].flat.dtype(), buckets_[b].flat.device());
        copy_bytes(byte_ptr(buckets_[b].flat, s.offset), zeros.raw_data(), zeros.nbytes(), zeros.device());
      }
      s.ready = true;
      --buckets_[b].pending;
    }
  }
  launch_ready_buckets(false);
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    b.work->wait();
    for (int i : b.slots) copy_out_of_bucket(slots_[i]);
  }
  last_launches_ = launches_;
  ++reductions_;
  prepare_pass();
}

namespace {

// FNV-1a over the tensor's bytes (contiguous, on the host).
int64_t bits_hash(const Tensor& t) {
  const Tensor c = t.copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous);
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  int64_t out;
  std::memcpy(&out, &h, sizeof(out));
  return out;
}

}  // namespace

void DistributedDataParallel::check_replicas(const char* what) {
  const nn::NamedTensors named = module_->named_parameters();
  const int64_t n = static_cast<int64_t>(named.size());
  std::vector<int64_t> local(named.size());
  for (size_t i = 0; i < named.size(); ++i) local[i] = bits_hash(named[i].second);
  // The hashes travel as int64 tensors on the parameters' device (NCCL reduces device memory only).
  const Device device = parameter_device(*module_);
  Tensor root = Tensor::from_labels(local, {n});
  broadcast_on(*comm_, root, device);
  const int64_t* r = root.data<int64_t>();
  // Per parameter: 1 where this rank differs from rank 0; max-reduced, so every rank sees every difference.
  std::vector<int64_t> differs(named.size());
  for (size_t i = 0; i < named.size(); ++i) differs[i] = local[i] != r[i] ? 1 : 0;
  Tensor flags = Tensor::from_labels(differs, {n}).copy_to(device);
  comm_->all_reduce(flags, ReduceOp::kMax);
  flags = flags.copy_to(Device::CPU);
  const int64_t* f = flags.data<int64_t>();
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (f[i] == 0) continue;
    if (first < 0) first = i;
    ++count;
  }
  if (first < 0) return;
  const Tensor& p = named[first].second;
  HG_FAIL("DistributedDataParallel::check_replicas(" << what << "): parameter '" << named[first].first << "' "
          << shape_str(p.shape()) << " " << dtype_name(p.dtype()) << " differs between ranks ("
          << (local[first] != r[first] ? "this rank's bits differ from rank 0's" : "this rank agrees with rank 0")
          << "; " << count << " of " << n << " parameters differ)");
}

}  // namespace halfgrad::dist
