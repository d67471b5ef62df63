// clip_grad.h - gradient clipping by total norm, as torch.nn.utils.clip_grad_norm_ (PyTorch 1.13).
//
//   norms_i     = ||grad_i||_p, each rounded to its gradient's dtype (as torch.norm returns it)
//   total_norm  = ||(norms_1, ..., norms_k)||_p                       in FP32 (FP64 if a grad is FP64)
//   clip_coef   = max_norm / (total_norm + 1e-6)                      in the total norm's precision
//   every grad *= min(clip_coef, 1)                                    (rounded to the grad's dtype)
// p = 2 (the default) or infinity (max |g|). Parameters without a gradient are skipped; with none at
// all the total norm is 0. A non-finite total norm gives clip_coef 0 and so NaN gradients (inf * 0),
// exactly as PyTorch does, unless error_if_nonfinite, which throws instead. Multiplying by a clamped
// coefficient of 1 changes nothing, so "scale only when clip_coef < 1" and PyTorch's always-multiply
// agree bit for bit.
//
// Mixed precision: clip after GradScaler::unscale_, or the norm is the scaled one. Note that a Float16
// gradient's own norm is rounded to half, as in PyTorch, and so overflows to inf above 65504.
// Accumulation is in FP64 (PyTorch's CPU reduction order differs; the result agrees to FP32 rounding).
//
// CUDA gradients (Float32 / Float16; all of them on CUDA - CPU and CUDA gradients in one call are
// refused): the same semantics in three launches over all gradients at once (clip_grad_cuda.cu),
// squares accumulated in FP32 per chunk and the chunk sums in FP64; the clip coefficient stays on the
// device, and the one device-to-host copy is of the returned norm.
#pragma once
#include <limits>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::optim {

/// Returns the total norm (the value PyTorch's FP32 / FP64 tensor would hold, as a double). Scales
/// the gradients in place: each .grad's version (Tensor::version) goes up by one, as PyTorch's mul_.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

}  // namespace halfgrad::optim
