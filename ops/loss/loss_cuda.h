// loss_cuda.h - the fused segmentation loss L = w_ce * CE + w_dice * Dice on the GPU (plain C++: no
// CUDA types or headers). Math and kernels: loss_cuda.cu; the ops, checks, errors and autograd: loss.cpp.
//
// logits (N, C, *spatial) float32 / float16 CUDA, NCDHW or (5-D) NDHWC; target (N, *spatial) int64
// CUDA (contiguous). The loss is a 0-d CUDA tensor in logits' dtype; dlogits comes back in logits'
// dtype and memory format.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace halfgrad::cuda {

struct LossCudaArgs {
  const char* op = "segmentation_loss";
  double w_ce = 1, w_dice = 1;  // L = w_ce * CE + w_dice * Dice
  double smooth = 1e-5;
  /// Null: the forward checks its labels and waits for the result. Else a device flag (ops::
  /// DeferredLabelCheck's) that a bad label's position is atomicMin'ed into; nothing waits.
  unsigned long long* deferred_bad = nullptr;
};

struct LossCudaForward {
  Tensor loss;               // 0-d, logits' dtype
  Tensor lse;                // (N * S) float32: log-sum-exp per position, saved for backward
  Tensor coef;               // (2, C) float32: the Dice gradient's a_c, b_c (zeros without Dice)
  int64_t bad_position = -1; // flat index into target of its first label outside [0, C), or -1
};

/// The loss, and what backward needs. Waits once, for the label check (an 8-byte copy to the host);
/// a bad label leaves bad_position >= 0 and the caller throws. With a.deferred_bad nothing waits and
/// bad_position stays -1.
LossCudaForward loss_forward(const LossCudaArgs& a, const Tensor& logits, const Tensor& target);

/// dlogits for the incoming gradient dL (a 1-element tensor on either device: a CUDA one is read by
/// the kernel, so there is no sync).
Tensor loss_backward(const LossCudaArgs& a, const Tensor& logits, const Tensor& target, const Tensor& lse,
                     const Tensor& coef, const Tensor& dL);

}  // namespace halfgrad::cuda
