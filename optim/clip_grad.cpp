#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "core/error.h"
#ifdef HALFGRAD_CUDA
#include "optim/clip_grad_cuda.h"
#endif

namespace halfgrad::optim {

// ||g||_p of one gradient, accumulated in double and rounded to the gradient's dtype.
static double grad_norm(const Tensor& g, double p) {
  const std::vector<double> v = g.to_double_vector();
  double acc = 0.0;
  if (std::isinf(p)) {
    for (double x : v) acc = std::isnan(x) || std::isnan(acc) ? NAN : std::max(acc, std::abs(x));
  } else {
    for (double x : v) acc += x * x;
    acc = std::sqrt(acc);
  }
  switch (g.dtype()) {
    case kFloat16: return round_to_half(static_cast<float>(acc));
    case kBFloat16: return round_to_bfloat16(static_cast<float>(acc));
    case kFloat32: return static_cast<float>(acc);
    default: return acc;
  }
}

// Scale every gradient by min(max_norm / (total + 1e-6), 1), computed in T; returns total as T.
template <typename T>
static double clip_with(const std::vector<Tensor>& grads, double total, double max_norm, double norm_type,
                        bool error_if_nonfinite) {
  const T total_norm = static_cast<T>(total);
  HG_CHECK(!error_if_nonfinite || std::isfinite(total_norm),
           "clip_grad_norm_: the total norm of order " << norm_type << " for gradients from `parameters` is "
               "non-finite, so it cannot be clipped. To disable this error and scale the gradients by the "
               "non-finite norm anyway, set error_if_nonfinite=false");
  // PyTorch: clip_coef = max_norm / (total_norm + 1e-6), a Python number divided by a tensor, which
  // Tensor.__rtruediv__ evaluates as reciprocal(total_norm + 1e-6) * max_norm.
  const T clip_coef = (T(1) / (total_norm + static_cast<T>(1e-6))) * static_cast<T>(max_norm);
  // PyTorch multiplies every gradient by the clamped coefficient (1 under max_norm) in place, so each
  // one's version goes up; here a coefficient of 1 skips the arithmetic but counts the same.
  for (const Tensor& g : grads) g.bump_version();
  if (clip_coef < T(1) || std::isnan(clip_coef)) {  // clamp(max=1) lets NaN through, as in PyTorch
    for (const Tensor& g : grads) {
      const int64_t n = g.numel();
      if (g.dtype() == kFloat64) {
        double* d = g.data<double>();
        for (int64_t i = 0; i < n; ++i) d[i] *= static_cast<double>(clip_coef);
      } else if (g.dtype() == kFloat32) {
        float* d = g.data<float>();
        for (int64_t i = 0; i < n; ++i) d[i] *= static_cast<float>(clip_coef);
      } else if (g.dtype() == kFloat16) {  // half: multiply in float, round once
        uint16_t* d = g.data<uint16_t>();
        const float c = static_cast<float>(clip_coef);
        for (int64_t i = 0; i < n; ++i) d[i] = float_to_half_bits(half_bits_to_float(d[i]) * c);
      } else {  // bfloat16: the same, rounded to bfloat16
        bfloat16_bits* d = g.data<bfloat16_bits>();
        const float c = static_cast<float>(clip_coef);
        for (int64_t i = 0; i < n; ++i) d[i].bits = float_to_bfloat16_bits(bfloat16_bits_to_float(d[i].bits) * c);
      }
    }
  }
  return static_cast<double>(total_norm);
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  HG_CHECK(norm_type == 2.0 || std::isinf(norm_type),
           "clip_grad_norm_: norm_type " << norm_type << " is not supported; expected 2 or infinity");
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
#ifdef HALFGRAD_CUDA
  size_t on_cuda = 0;
  for (const Tensor& g : grads) on_cuda += g.is_cuda() ? 1 : 0;
  HG_CHECK(on_cuda == 0 || on_cuda == grads.size(),
           "clip_grad_norm_: " << on_cuda << " of " << grads.size() << " gradients are on CUDA and the others on the "
                               "CPU; the total norm needs them on one device");
  if (on_cuda > 0) {
    std::vector<ClipGradCudaTensor> entries;
    for (const Tensor& g : grads) {
      entries.push_back({g.raw_data(), g.numel(), g.dtype()});
      g.bump_version();  // the kernel scales it in place (by 1 under max_norm: PyTorch's mul_ counts too)
    }
    return clip_grad_norm_cuda(entries, max_norm, std::isinf(norm_type), error_if_nonfinite);
  }
#endif

  double total = 0.0;
  if (std::isinf(norm_type)) {
    for (const Tensor& g : grads) {
      const double n = grad_norm(g, norm_type);
      total = std::isnan(n) || std::isnan(total) ? NAN : std::max(total, n);
    }
  } else {
    for (const Tensor& g : grads) {
      const double n = grad_norm(g, norm_type);
      total += n * n;
    }
    total = std::sqrt(total);
  }
  // The total norm is an FP64 tensor in PyTorch when a gradient is FP64 (torch.stack promotes), FP32 otherwise.
  bool f64 = false;
  for (const Tensor& g : grads) f64 = f64 || g.dtype() == kFloat64;
  return f64 ? clip_with<double>(grads, total, max_norm, norm_type, error_if_nonfinite)
             : clip_with<float>(grads, total, max_norm, norm_type, error_if_nonfinite);
}

}  // namespace halfgrad::optim
