// deferred_label_check.h - the CUDA losses' label-range check (loss.h) without a host wait.
//
// Why: a CUDA segmentation_loss checks its target labels in the forward kernel and then copies 8
// bytes to the host and waits, to throw at once about a label outside [0, C). That wait is one host
// synchronisation per training step, which a step captured in a CUDA graph (core/cuda/graph.h)
// cannot hold. Under a DeferredLabelCheck the kernel records a bad label's position in a device flag
// instead, and the loop reads the flag once an epoch.
#pragma once
#include <string>

#include "core/tensor.h"

namespace halfgrad::ops {

/// While one is alive on this thread, the CUDA losses of loss.h do not read their label check back: a
/// label outside [0, C) records its flat position in this guard's device flag (the smallest position
/// over every loss since the last check(), whichever batch it was in), nothing waits, and the loss of
/// such a batch is not meaningful. check() reads the flag (one 8-byte copy: the host waits for the
/// stream) - once an epoch, say - and throws then. CPU losses check at once, as without the guard.
/// Guards nest (the innermost one is used) and must be destroyed in reverse order, on their thread.
class DeferredLabelCheck {
 public:
  /// Makes the flag on the CUDA device (throws without one).
  DeferredLabelCheck();
  /// Restores the enclosing guard (or none). Does not check: call check() first.
  ~DeferredLabelCheck();
  DeferredLabelCheck(const DeferredLabelCheck&) = delete;
  DeferredLabelCheck& operator=(const DeferredLabelCheck&) = delete;
  /// Throws halfgrad::Error("<where>: a target label outside [0, C) at flat index i of a batch since
  /// the last check ...") if any loss since the last check saw one; clears the flag either way.
  void check(const std::string& where);
  /// The flag (an unsigned 64-bit position, all ones for none) the CUDA loss kernels write.
  void* device_flag() const { return flag_.raw_data(); }
  /// The innermost guard alive on this thread, or null.
  static DeferredLabelCheck* current();

 private:
  Tensor flag_;
  DeferredLabelCheck* enclosing_;
};

}  // namespace halfgrad::ops
