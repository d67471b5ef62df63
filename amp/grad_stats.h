// grad_stats.h - per-parameter gradient statistics: where each layer's gradients sit relative to
// FP16's range, and so what loss scaling is rescuing (or failing to rescue) in that layer.
//
// Read the gradients after backward and before the optimizer (before scaler.step / unscale_): they
// then hold S * dL/dp, with S the loss scale (1 without a GradScaler). Every statistic except the
// overflow count is about the true gradient g = grad / S:
//
//   max_abs           max |g| over finite elements
//   min_nonzero_abs   min |g| over finite nonzero elements (0 when there is none)
//   zeros             elements that are exactly 0 (a ReLU that was off, an unused class, ...)
//   fp16_underflow    nonzero g that round to 0 in FP16, i.e. would be lost WITHOUT loss scaling:
//                     |g| <= 2^-25 (2^-25 itself is a tie between 0 and 2^-24 and rounds to even, 0)
//   fp16_subnormal    g that round to an FP16 subnormal (2^-25 < |g| < 2^-14 - 2^-25; below 2^-14
//                     FP16 keeps fewer than 10 mantissa bits, so these lose precision)
//   scaled_underflow  nonzero g whose scaled value g * S still rounds to 0 in FP16: what the current
//                     scale does not rescue (|g * S| <= 2^-25)
//   overflow          elements with |g * S| >= 65520, which are inf in FP16 at this scale (65520 is
//                     the midpoint between 65504, FP16's largest value, and 2^16; it rounds up), plus
//                     elements already stored as +-inf
//   nonfinite         NaN or inf elements in the stored gradient (a step GradScaler will skip)
//
// The thresholds are those of core/half.h's round-to-nearest-even conversion (the tests check them
// against float_to_half_bits). Counts are elements; fractions divide by numel.
//
//   amp::GradStatsCsvWriter csv(run_dir + "/grad_stats.csv");
//   scaler.scale(loss).backward();
//   csv.write(step, amp::collect_grad_stats(model->named_parameters(), scaler.get_scale()));
//   scaler.step(opt);
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "nn/module.h"

namespace halfgrad::amp {

/// Statistics of one gradient tensor (or, with name "(all)", of every parameter together).
struct GradStats {
  std::string name;            // parameter name ("enc.0.0.weight"), or "(all)"
  int64_t numel = 0;           // elements
  double loss_scale = 1;       // S the gradient was multiplied by
  double max_abs = 0;          // of g = grad / S, finite elements
  double min_nonzero_abs = 0;  // of g, finite nonzero elements; 0 when none
  int64_t zeros = 0;
  int64_t fp16_underflow = 0;
  int64_t fp16_subnormal = 0;
  int64_t scaled_underflow = 0;
  int64_t overflow = 0;
  int64_t nonfinite = 0;

  double fraction(int64_t count) const { return numel ? static_cast<double>(count) / static_cast<double>(numel) : 0.0; }
  /// Merge another tensor's statistics into this one (same loss scale).
  GradStats& operator+=(const GradStats& o);
};

/// Statistics of `grad`, a floating gradient holding S * dL/dp with S = `loss_scale` (> 0). Any
/// floating dtype (FP16 and BF16 decoded exactly; the thresholds are FP16's whatever the stored
/// dtype, since the question is what FP16 would lose - a BF16 gradient shares FP32's range). Throws halfgrad::Error for an undefined or integer tensor
/// or a loss_scale that is not finite and positive.
GradStats grad_stats(const std::string& name, const Tensor& grad, double loss_scale);

/// grad_stats of every parameter in `params` that has a gradient (others are skipped), in order,
/// followed by one "(all)" row that sums them (omitted when no parameter has a gradient).
std::vector<GradStats> collect_grad_stats(const nn::NamedTensors& params, double loss_scale);

/// Writes grad_stats rows as CSV: one row per step per parameter (and the "(all)" row), in the
/// columns of header(). Fractions are of numel; the values of g are unscaled.
class GradStatsCsvWriter {
 public:
  /// Creates (truncates) `path` and writes the header. Throws halfgrad::Error if it cannot be opened.
  explicit GradStatsCsvWriter(const std::string& path);
  /// Appends one row per entry of `stats`, labelled with `step`, and flushes.
  void write(int64_t step, const std::vector<GradStats>& stats);
  /// "step,param,numel,loss_scale,max_abs,min_nonzero_abs,zero_frac,fp16_underflow_frac,..."
  static const char* header();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace halfgrad::amp
