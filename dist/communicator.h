// communicator.h - the collectives data-parallel training needs, behind one interface with two
// implementations: threads as ranks in one process (in_process_communicator.cpp: tests and CPU
// training) and NCCL between processes, one GPU each (nccl_communicator.h).
//
// A group of `world_size` ranks, numbered 0..world_size-1, each holding one Communicator. Every
// collective is called by every rank of the group, in the same order, with tensors of the same shape,
// dtype, device and memory format (as torch.distributed and NCCL require). The operations work on the
// tensor's buffer element by element, in place.
//
// Errors (halfgrad::Error) name the collective and what was wrong. A mismatch between ranks (shape,
// dtype, device, op, root, or one rank calling all_reduce while another calls broadcast) is an Error
// on every rank, naming both ranks' arguments. A rank that fails - it throws inside a collective, or
// its Communicator is destroyed while others still wait for it - marks the group broken: every rank
// then throws "rank R failed: ..." from its next or current collective instead of hanging. (For NCCL,
// the same guarantee needs the program side's agreed stop flag: see nccl_communicator.h.)
//
// Thread-safety: one Communicator belongs to one rank and is used by one thread at a time.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::dist {

/// How all_reduce combines the ranks' values. kSum adds them (in rank order 0..n-1 in-process, so the
/// result's bits are the same every run); kMax takes the largest. In-process a NaN wins; NCCL does not
/// promise that, so flags that must survive a reduction are passed as 0/1 (GradScaler's found-inf
/// flag is 0 or 1 before it is reduced).
enum class ReduceOp { kSum, kMax };

const char* reduce_op_name(ReduceOp op);

/// A collective in flight, returned by all_reduce_async.
/// wait(): NCCL - makes cuda::stream() wait (an event) for the communication stream's work, so kernels
/// queued later see the result; the host does not block. In-process - returns once every rank has
/// contributed and the result is written into the tensor. Throws halfgrad::Error on a mismatch between
/// ranks or when the group is broken. A second wait() does nothing. The tensor passed to the collective
/// must stay alive and unmodified until wait() returns.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This rank, 0..world_size()-1.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// "in_process" or "nccl".
  virtual const char* backend() const = 0;

  /// Starts an in-place reduction of `t` (a defined, dense tensor; dtypes float32, float16, bfloat16,
  /// float64, int64) across every rank: afterwards each rank's `t` holds the sum (or max) of all ranks'
  /// values, identical bits on every rank. Every rank passes the same shape, dtype, device and memory
  /// format. A float16/bfloat16 sum is rounded to the dtype after each addition (as NCCL's ring holds
  /// partial sums in the buffer's dtype), so it overflows to inf where the dtype does: pre-divide.
  /// Throws halfgrad::Error "all_reduce: ..." for a bad tensor (at once) or a mismatch (from wait()).
  virtual std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) = 0;
  /// all_reduce_async(t, op)->wait().
  void all_reduce(Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }
  /// Copies root's `t` into every other rank's `t` (in place; same shape, dtype, device, memory format
  /// on every rank; any dtype). Blocking in the same sense as Work::wait(). root in [0, world_size).
  virtual void broadcast(Tensor& t, int root) = 0;
  /// Returns on each rank once every rank has called it (host-blocking).
  virtual void barrier() = 0;
};

/// Threads as ranks (tests, and CPU training): `world_size` >= 1 communicators sharing one state;
/// thread i uses element i. Collectives sum in a fixed rank order (same bits every run). CPU and CUDA
/// tensors (a CUDA tensor is copied to the host and back through cuda::copy_d2h/h2d: for tests, not
/// speed). `timeout` bounds how long a rank waits for the others in one collective before the group
/// is marked broken (a guard against a rank that stopped calling collectives without failing).
std::vector<std::shared_ptr<Communicator>> make_in_process_group(
    int world_size, std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace halfgrad::dist
