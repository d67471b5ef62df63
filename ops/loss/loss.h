// loss.h - segmentation losses (autocast FP32 list).
//
// cross_entropy(logits (N, C, *spatial), target int64 (N, *spatial)), mean over N*spatial:
//   L = -mean_v log_softmax(logits)[target_v, v]   (torch.nn.functional.cross_entropy, reduction mean)
//   dlogits = (softmax - one_hot(target)) / (N * spatial) * dL
// soft_dice_loss(logits, target), exactly the Dice term of ../shared/reference/torch_unet_step.py:
//   p = softmax(logits, 1), oh = one_hot(target, C),
//   inter_c = sum_{n,v} p*oh, den_c = sum_{n,v} p + sum_{n,v} oh,
//   L = 1 - mean_c (2 inter_c + smooth) / (den_c + smooth),  smooth = 1e-5
// segmentation_loss = cross_entropy + soft_dice_loss (the reference U-Net's loss).
// Device: CPU, or CUDA logits (NCDHW or NDHWC) with a CUDA target; the loss is a 0-d tensor on logits'
// device, dlogits keeps their memory format.
// Non-finite logits as PyTorch: a NaN, or a +inf, at a position makes CE NaN (and Dice NaN, since
// its sums pool every position), with dlogits NaN at that position for CE and everywhere for Dice; a
// -inf at a non-target class is probability 0 (finite loss); a -inf at the target class makes CE +inf.
// Errors: logits not (N, C, ...), target shape not logits' without C, target not int64, a target
// value outside [0, C) (names the value and its position).
// The CUDA label check copies 8 bytes to the host and waits, once per loss; DeferredLabelCheck below
// keeps it on the device instead (a training step with no host synchronisation, for CUDA graphs).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace halfgrad::ops {

/// While one is alive on this thread, the CUDA losses above do not read their label check back: a
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

Tensor cross_entropy(const Tensor& logits, const Tensor& target);
Tensor soft_dice_loss(const Tensor& logits, const Tensor& target, double smooth = 1e-5);
Tensor segmentation_loss(const Tensor& logits, const Tensor& target);

}  // namespace halfgrad::ops
