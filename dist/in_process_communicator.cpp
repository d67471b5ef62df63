// in_process_communicator.cpp - threads as ranks: the rounds, the rank-order reduction and the broken
// flag described in in_process_communicator.h.
#include "dist/in_process_communicator.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/cuda/runtime.h"

namespace halfgrad::dist {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

namespace {

enum class Kind { kAllReduce, kBroadcast, kBarrier };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kBarrier: return "barrier";
  }
  return "?";
}

/// One rank's arguments to one collective, and a host copy of its tensor's bytes where needed.
struct Deposit {
  bool present = false;
  Kind kind = Kind::kBarrier;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  Shape shape;
  Dtype dtype = kFloat32;
  Device device = Device::CPU;
  MemoryFormat format = MemoryFormat::Contiguous;
  std::vector<uint8_t> bytes;
};

std::string describe(const Deposit& d) {
  std::ostringstream os;
  os << kind_name(d.kind);
  if (d.kind == Kind::kAllReduce) os << "(" << reduce_op_name(d.op) << ")";
  if (d.kind == Kind::kBroadcast) os << "(root " << d.root << ")";
  if (d.kind != Kind::kBarrier) {
    os << " of " << shape_str(d.shape) << " " << dtype_name(d.dtype) << " " << device_name(d.device)
       << (d.format == MemoryFormat::ChannelsLast3d ? " channels_last" : "");
  }
  return os.str();
}

bool agree(const Deposit& a, const Deposit& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == Kind::kBarrier) return true;
  if (a.kind == Kind::kAllReduce && a.op != b.op) return false;
  if (a.kind == Kind::kBroadcast && a.root != b.root) return false;
  return a.shape == b.shape && a.dtype == b.dtype && a.device == b.device && a.format == b.format;
}

/// One collective: every rank's k-th call.
struct Round {
  std::vector<Deposit> deposits;
  int deposited = 0;
  bool done = false;
  std::string error;            // a mismatch between ranks: every rank throws it
  std::vector<uint8_t> result;  // what every rank copies out
  int collected = 0;
};

// acc[i] = acc[i] (op) x[i], element by element, in the dtype's own arithmetic: a reduced float is
// widened to float, combined, and rounded back after each step (as NCCL's ring keeps partial sums).
template <typename T, typename Load, typename Store>
void combine(uint8_t* acc_bytes, const uint8_t* x_bytes, size_t n, ReduceOp op, Load load, Store store) {
  T* acc = reinterpret_cast<T*>(acc_bytes);
  const T* x = reinterpret_cast<const T*>(x_bytes);
  for (size_t i = 0; i < n; ++i) {
    const auto a = load(acc[i]);
    const auto b = load(x[i]);
    decltype(a + b) r;
    if (op == ReduceOp::kSum) {
      r = a + b;
    } else if constexpr (std::is_floating_point_v<decltype(a + b)>) {
      r = (std::isnan(a) || std::isnan(b)) ? (std::isnan(a) ? a : b) : std::max(a, b);
    } else {
      r = std::max(a, b);
    }
    acc[i] = store(r);
  }
}

void combine_bytes(std::vector<uint8_t>& acc, const std::vector<uint8_t>& x, Dtype dtype, ReduceOp op) {
  const size_t n = acc.size() / dtype_size(dtype);
  auto same = [](auto v) { return v; };
  switch (dtype) {
    case kFloat32: combine<float>(acc.data(), x.data(), n, op, same, same); break;
    case kFloat64: combine<double>(acc.data(), x.data(), n, op, same, same); break;
    case kInt64: combine<int64_t>(acc.data(), x.data(), n, op, same, same); break;
    case kFloat16:
      combine<uint16_t>(acc.data(), x.data(), n, op, [](uint16_t h) { return half_bits_to_float(h); },
                        [](float f) { return float_to_half_bits(f); });
      break;
    case kBFloat16:
      combine<uint16_t>(acc.data(), x.data(), n, op, [](uint16_t b) { return bfloat16_bits_to_float(b); },
                        [](float f) { return float_to_bfloat16_bits(f); });
      break;
  }
}

struct GroupState {
  explicit GroupState(int n, std::chrono::milliseconds t) : world_size(n), timeout(t) {}
  const int world_size;
  const std::chrono::milliseconds timeout;
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Round> rounds;  // by sequence number
  bool broken = false;
  std::string broken_reason;  // "rank R failed: ..."

  // Caller holds mu.
  void mark_broken(const std::string& reason) {
    if (broken) return;
    broken = true;
    broken_reason = reason;
    cv.notify_all();
  }

  // The deposit that completes a round: check agreement, then reduce in rank order. Caller holds mu.
  void complete(Round& r) {
    const Deposit& first = r.deposits[0];
    for (int i = 1; i < world_size; ++i) {
      if (!agree(first, r.deposits[i])) {
        std::ostringstream os;
        os << kind_name(r.deposits[i].kind) << ": ranks disagree: rank 0 called " << describe(first)
           << ", rank " << i << " called " << describe(r.deposits[i])
           << "; every rank must call the same collective with the same shape, dtype and device";
        r.error = os.str();
        break;
      }
    }
    if (r.error.empty()) {
      if (first.kind == Kind::kAllReduce) {
        r.result = std::move(r.deposits[0].bytes);
        for (int i = 1; i < world_size; ++i) combine_bytes(r.result, r.deposits[i].bytes, first.dtype, first.op);
      } else if (first.kind == Kind::kBroadcast) {
        r.result = std::move(r.deposits[first.root].bytes);
      }
    }
    r.deposits.clear();
    r.done = true;
    cv.notify_all();
  }
};

void copy_out(const std::vector<uint8_t>& bytes, Tensor& t) {
  if (bytes.empty()) return;
  if (t.device() == Device::CUDA) {
    cuda::copy_h2d(t.raw_data(), bytes.data(), bytes.size());
  } else {
    std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  }
  t.bump_version();
}

std::vector<uint8_t> copy_in(const Tensor& t) {
  std::vector<uint8_t> bytes(t.nbytes());
  if (bytes.empty()) return bytes;
  if (t.device() == Device::CUDA) {
    cuda::copy_d2h(bytes.data(), t.raw_data(), bytes.size());
  } else {
    std::memcpy(bytes.data(), t.raw_data(), bytes.size());
  }
  return bytes;
}

class InProcessCommunicator;

class InProcessWork : public Work {
 public:
  InProcessWork(std::shared_ptr<GroupState> st, int rank, uint64_t seq, Tensor t, const char* what)
      : st_(std::move(st)), rank_(rank), seq_(seq), t_(std::move(t)), what_(what) {}
  ~InProcessWork() override {
    if (waited_) return;
    // Dropped without wait(): give up this rank's claim on the round so it can be freed.
    std::lock_guard<std::mutex> lock(st_->mu);
    auto it = st_->rounds.find(seq_);
    if (it != st_->rounds.end() && it->second.done && ++it->second.collected == st_->world_size) {
      st_->rounds.erase(it);
    }
  }
  void wait() override;

 private:
  std::shared_ptr<GroupState> st_;
  int rank_;
  uint64_t seq_;
  Tensor t_;  // undefined for a barrier
  const char* what_;
  bool waited_ = false;
};

void InProcessWork::wait() {
  if (waited_) return;
  waited_ = true;
  std::unique_lock<std::mutex> lock(st_->mu);
  auto ready = [&] {
    auto it = st_->rounds.find(seq_);
    return (it != st_->rounds.end() && it->second.done) || st_->broken;
  };
  if (!st_->cv.wait_for(lock, st_->timeout, ready)) {
    std::ostringstream os;
    os << "rank " << rank_ << " failed: " << what_ << " (collective #" << seq_ << ") timed out after "
       << st_->timeout.count() << " ms waiting for the other ranks";
    st_->mark_broken(os.str());
    throw Error(os.str());
  }
  auto it = st_->rounds.find(seq_);
  if (it == st_->rounds.end() || !it->second.done) {
    throw GroupBrokenError(std::string(what_) + ": " + st_->broken_reason);
  }
  Round& r = it->second;
  const std::string error = r.error;
  if (error.empty() && t_.defined()) copy_out(r.result, t_);
  if (++r.collected == st_->world_size) st_->rounds.erase(it);
  if (!error.empty()) throw Error(error);
}

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<GroupState> st, int rank) : st_(std::move(st)), rank_(rank) {}
  ~InProcessCommunicator() override {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->mark_broken("rank " + std::to_string(rank_) + " failed: its communicator was destroyed");
  }
  int rank() const override { return rank_; }
  int world_size() const override { return st_->world_size; }
  const char* backend() const override { return "in_process"; }

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) override {
    Deposit d = describe_tensor(t, Kind::kAllReduce, "all_reduce");
    d.op = op;
    d.bytes = copy_in(t);
    return std::make_shared<InProcessWork>(st_, rank_, deposit(std::move(d), "all_reduce"), t, "all_reduce");
  }

  void broadcast(Tensor& t, int root) override {
    Deposit d = describe_tensor(t, Kind::kBroadcast, "broadcast");
    if (root < 0 || root >= st_->world_size) {
      fail("broadcast: root " + std::to_string(root) + " is not a rank of a group of " +
           std::to_string(st_->world_size));
    }
    d.root = root;
    if (rank_ == root) d.bytes = copy_in(t);
    InProcessWork w(st_, rank_, deposit(std::move(d), "broadcast"), rank_ == root ? Tensor() : t, "broadcast");
    w.wait();
  }

  void barrier() override {
    Deposit d;
    d.kind = Kind::kBarrier;
    InProcessWork w(st_, rank_, deposit(std::move(d), "barrier"), Tensor(), "barrier");
    w.wait();
  }

 private:
  // A local error: this rank throws it, and the group is marked broken so no other rank waits for it.
  [[noreturn]] void fail(const std::string& msg) {
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->mark_broken("rank " + std::to_string(rank_) + " failed: " + msg);
    }
    throw Error(msg);
  }

  Deposit describe_tensor(const Tensor& t, Kind kind, const char* what) {
    if (!t.defined()) fail(std::string(what) + ": the tensor is undefined");
    if (kind == Kind::kAllReduce && t.dtype() != kFloat32 && t.dtype() != kFloat16 && t.dtype() != kBFloat16 &&
        t.dtype() != kFloat64 && t.dtype() != kInt64) {
      fail(std::string(what) + ": dtype " + dtype_name(t.dtype()) + " is not reducible");
    }
    Deposit d;
    d.kind = kind;
    d.shape = t.shape();
    d.dtype = t.dtype();
    d.device = t.device();
    d.format = t.memory_format();
    return d;
  }

  uint64_t deposit(Deposit d, const char* what) {
    std::lock_guard<std::mutex> lock(st_->mu);
    if (st_->broken) throw GroupBrokenError(std::string(what) + ": " + st_->broken_reason);
    const uint64_t seq = next_seq_++;
    Round& r = st_->rounds[seq];
    if (r.deposits.empty() && !r.done) r.deposits.resize(st_->world_size);
    d.present = true;
    r.deposits[rank_] = std::move(d);
    if (++r.deposited == st_->world_size) st_->complete(r);
    return seq;
  }

  std::shared_ptr<GroupState> st_;
  int rank_;
  uint64_t next_seq_ = 0;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_in_process_group(int world_size,
                                                                 std::chrono::milliseconds timeout) {
  HG_CHECK(world_size >= 1, "make_in_process_group: world_size " << world_size << "; expected >= 1");
  HG_CHECK(timeout.count() > 0, "make_in_process_group: timeout " << timeout.count() << " ms; expected > 0");
  auto st = std::make_shared<GroupState>(world_size, timeout);
  std::vector<std::shared_ptr<Communicator>> group;
  for (int r = 0; r < world_size; ++r) group.push_back(std::make_shared<InProcessCommunicator>(st, r));
  return group;
}

void run_in_process_ranks(int world_size, const std::function<void(Communicator&)>& fn,
                          std::chrono::milliseconds timeout) {
  auto group = make_in_process_group(world_size, timeout);
  std::mutex mu;
  std::exception_ptr cause, any;
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, comm = std::move(group[r])]() mutable {
      try {
        fn(*comm);
      } catch (const GroupBrokenError&) {
        std::lock_guard<std::mutex> lock(mu);
        if (!any) any = std::current_exception();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!cause) cause = std::current_exception();
      }
      comm.reset();  // a failed rank's group is broken from here on: nobody waits for it
    });
  }
  for (auto& t : threads) t.join();
  if (cause) std::rethrow_exception(cause);
  if (any) std::rethrow_exception(any);
}

}  // namespace halfgrad::dist
