// buffer_snapshot.h - a copy of a module's buffers (BatchNorm's running_mean, running_var,
// num_batches_tracked), taken before a step and put back when the step is skipped.
//
// Why: with mixed precision a forward can overflow (an FP16 convolution output of inf). GradScaler
// then skips the optimizer step and halves the scale, but the forward has already folded the batch's
// statistics, inf or NaN, into the BatchNorm running statistics:
//   running_mean <- (1 - momentum) running_mean + momentum * mean(inf ...) = inf or NaN, for good.
// In PyTorch this is pytorch#115500 (an overflowing batch leaves running_mean NaN; the model then
// predicts NaN in eval mode although every weight is finite). halfgrad's rule, departing from PyTorch:
// a step that GradScaler skips changes nothing but the loss scale. The training loop captures the
// buffers before the forward and restores them when scaler.step reports a skip:
//
//     nn::BufferSnapshot bn(*model);            // once: the copies are allocated here
//     for (...) {
//       bn.capture();                           // before the forward
//       loss = ...; scaler.scale(loss).backward();
//       if (!scaler.step(opt)) bn.restore();    // skipped: the running statistics are as before
//       scaler.update();
//     }
// With a capturable GradScaler (no host read of found_inf) restore_if(flag) makes the same choice
// on the device.
//
// Cost: one copy of every buffer per step (a U-Net's BatchNorm buffers are a few KB; on CUDA one
// device-to-device copy per buffer, queued on the stream, no sync). A module without buffers
// (InstanceNorm, no norm) makes both calls no-ops. The restore also applies when only the backward
// overflowed (the batch's statistics were finite): the rule is about the step, not about the values.
#pragma once
#include <cstddef>
#include <vector>

#include "nn/module.h"

namespace halfgrad::nn {

class BufferSnapshot {
 public:
  /// Copies of every buffer of `module` (recursive, named_buffers order), same shape, dtype and
  /// device, holding the buffers' values now. `module` must outlive the snapshot and keep its buffers
  /// (no Module::to or register_buffer in between: restore throws halfgrad::Error on a shape, dtype or
  /// device mismatch, naming the buffer).
  explicit BufferSnapshot(Module& module);
  /// Copies the buffers' current values into the snapshot (before a step's forward).
  void capture();
  /// Copies the snapshot back into the module's buffers (in place: the buffers keep their tensors,
  /// their version counters are bumped as by any in-place write).
  void restore();
  /// restore() of the module's CUDA buffers, decided on the device: the copies run only if `found_inf`
  /// (GradScaler's 1-element FP32 CUDA flag) is nonzero, in one launch (core/cuda/tensor_kernels.h's
  /// copy_if_flag); the host learns nothing and does not wait, so a step with a capturable GradScaler
  /// can restore the buffers of a skipped step inside a CUDA graph. Their version counters are bumped
  /// either way. Buffers on the CPU are left alone: the host cannot know the flag. In a CUDA model the
  /// only ones are BatchNorm's Int64 num_batches_tracked (Module::to moves floating buffers only), a
  /// count the host advances in forward; halfgrad's BatchNorm uses a fixed momentum, so it feeds no
  /// computation, and with a device-side skip (or graph replays, which run no host code) it counts the
  /// forwards the host ran rather than the updates kept.
  void restore_if(const Tensor& found_inf);
  /// Bytes held by the copies.
  size_t nbytes() const;
  size_t size() const { return saved_.size(); }

 private:
  NamedTensors live_;          // the module's buffers (shared handles)
  std::vector<Tensor> saved_;  // their copies
};

}  // namespace halfgrad::nn
