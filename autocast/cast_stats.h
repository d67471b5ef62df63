// cast_stats.h - counters for the precision report: the dtype conversions autocast makes, and which
// op kind asked autocast for a dtype last.
//
// Under autocast an op such as conv3d asks `autocast_dtype(OpKind::Conv3d, ...)` for its compute
// dtype, then converts its inputs with the differentiable `Tensor::to(dtype)` (ops/cast.cpp): an FP32
// weight becomes an FP16 copy, every step. Those copies are the cost side of mixed precision (bytes
// read and written that FP32 training does not move), so they are counted here:
//   - `count_cast(from, to, numel)` is called by Tensor::to for every conversion it makes, and by
//     its backward for the conversion of the gradient back to the input's dtype;
//   - `note_autocast_request(kind)` is called by autocast_dtype for every op that asks.
// Both only do work while counting is on (CastCountingGuard), on the calling thread; off, each costs
// one call and one branch. Counts are per thread, like the autocast state.
//
// Attribution to ops: the counters also keep what happened since the last `take_pending()`; the
// precision report (amp/precision_report.h) takes it at the end of every op (a forward hook), so the
// casts an op made at its start, and the op kind it asked for, are charged to that op. A cast made by
// user code between two ops is charged to the next op.
#pragma once
#include <cstdint>
#include <optional>

#include "autocast/autocast.h"
#include "core/dtype.h"

namespace halfgrad::amp {

/// A number of dtype conversions and the memory traffic they caused. Bytes: every element is read
/// once in the source dtype and written once in the destination dtype.
struct CastTally {
  int64_t casts = 0;          // calls of Tensor::to that converted
  int64_t elements = 0;       // elements converted, summed over the casts
  int64_t bytes_read = 0;     // elements * dtype_size(from)
  int64_t bytes_written = 0;  // elements * dtype_size(to)
  int64_t bytes_moved() const { return bytes_read + bytes_written; }
  CastTally& operator+=(const CastTally& o);
};

/// Whether casts and autocast requests are being counted on this thread.
bool cast_counting_enabled();

/// RAII: count on this thread within the scope (restores the previous state on exit; nests). The
/// counters are not reset: call reset_cast_stats() for that.
class CastCountingGuard {
 public:
  explicit CastCountingGuard(bool enabled = true);
  ~CastCountingGuard();
  CastCountingGuard(const CastCountingGuard&) = delete;
  CastCountingGuard& operator=(const CastCountingGuard&) = delete;

 private:
  bool prev_;
};

/// Which pass made a conversion: the forward cast itself, or the backward of a cast converting the
/// gradient back to the input's dtype.
enum class CastPass : uint8_t { Forward, Backward };

/// Called by Tensor::to (ops/cast.cpp) for a conversion of `numel` elements from `from` to `to`:
/// with Forward by the cast itself (counted in the totals and in the pending casts that the
/// precision report charges to an op), with Backward by its backward (counted in the totals only).
void count_cast(Dtype from, Dtype to, int64_t numel, CastPass pass = CastPass::Forward);
/// Called by autocast_dtype (autocast/autocast.cpp): an op of `kind` asked which dtype to run in.
void note_autocast_request(OpKind kind);

/// Every cast of `pass` counted on this thread from `from` to `to` since the last reset.
CastTally cast_total(Dtype from, Dtype to, CastPass pass = CastPass::Forward);
/// The sum of cast_total over every (from, to) pair and both passes.
CastTally cast_total();

/// What was counted since the previous take_pending() on this thread: the casts, and the op kind of
/// the last autocast request (none if no op asked). Resets both.
struct PendingCasts {
  CastTally casts;
  std::optional<OpKind> requested;
};
PendingCasts take_pending();

/// Zero every counter of this thread (totals and pending).
void reset_cast_stats();

}  // namespace halfgrad::amp
