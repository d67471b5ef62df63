// grad_stats.cpp - per-parameter gradient statistics against FP16's range (see grad_stats.h).
#include "amp/grad_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/bfloat16.h"
#include "core/half.h"

namespace halfgrad::amp {

namespace {

// Thresholds of round-to-nearest-even float -> binary16 (core/half.h), on |x|:
//   |x| <= 2^-25                 -> 0          (2^-25 is halfway between 0 and 2^-24; ties go to even, 0)
//   |x| <  2^-14 - 2^-25         -> subnormal  (2^-14 - 2^-25 is halfway between the largest subnormal,
//                                               1023 * 2^-24, and 2^-14; the tie goes to even, 2^-14)
//   |x| >= 65520                 -> inf        (halfway between 65504 and 2^16; ties to even, 2^16 = inf)
const double kUnderflowMax = std::ldexp(1.0, -25);
const double kSubnormalEnd = std::ldexp(1.0, -14) - std::ldexp(1.0, -25);
constexpr double kOverflowMin = 65520.0;

template <typename Get>
void accumulate(GradStats& s, int64_t n, double inv_scale, Get get) {
  double max_abs = 0, min_nz = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const double x = get(i);  // the stored, scaled gradient
    if (!std::isfinite(x)) {
      ++s.nonfinite;
      if (std::isinf(x)) ++s.overflow;
      continue;
    }
    const double ax = std::fabs(x);
    if (ax == 0) {
      ++s.zeros;
      continue;
    }
    if (ax >= kOverflowMin) ++s.overflow;
    if (ax <= kUnderflowMax) ++s.scaled_underflow;
    const double ag = ax * inv_scale;  // |g|, unscaled
    max_abs = std::max(max_abs, ag);
    min_nz = std::min(min_nz, ag);
    if (ag <= kUnderflowMax) ++s.fp16_underflow;
    else if (ag < kSubnormalEnd) ++s.fp16_subnormal;
  }
  s.max_abs = max_abs;
  s.min_nonzero_abs = std::isinf(min_nz) ? 0.0 : min_nz;
}

}  // namespace

GradStats& GradStats::operator+=(const GradStats& o) {
  numel += o.numel;
  max_abs = std::max(max_abs, o.max_abs);
  if (o.min_nonzero_abs > 0) min_nonzero_abs = min_nonzero_abs > 0 ? std::min(min_nonzero_abs, o.min_nonzero_abs) : o.min_nonzero_abs;
  zeros += o.zeros;
  fp16_underflow += o.fp16_underflow;
  fp16_subnormal += o.fp16_subnormal;
  scaled_underflow += o.scaled_underflow;
  overflow += o.overflow;
  nonfinite += o.nonfinite;
  return *this;
}

GradStats grad_stats(const std::string& name, const Tensor& grad, double loss_scale) {
  HG_CHECK(grad.defined(), "grad_stats: the gradient of '" << name << "' is undefined (no backward reached it)");
  HG_CHECK(is_floating(grad.dtype()), "grad_stats: the gradient of '" << name << "' must be floating, got "
                                                                     << dtype_name(grad.dtype()));
  HG_CHECK(std::isfinite(loss_scale) && loss_scale > 0,
           "grad_stats: loss_scale must be finite and positive, got " << loss_scale);
  GradStats s;
  s.name = name;
  s.numel = grad.numel();
  s.loss_scale = loss_scale;
  const double inv = 1.0 / loss_scale;
  switch (grad.dtype()) {
    case kFloat32: {
      const float* p = grad.data<float>();
      accumulate(s, s.numel, inv, [p](int64_t i) { return static_cast<double>(p[i]); });
      break;
    }
    case kFloat64: {
      const double* p = grad.data<double>();
      accumulate(s, s.numel, inv, [p](int64_t i) { return p[i]; });
      break;
    }
    case kFloat16: {
      const uint16_t* p = grad.data<uint16_t>();
      accumulate(s, s.numel, inv, [p](int64_t i) { return static_cast<double>(half_bits_to_float(p[i])); });
      break;
    }
    case kBFloat16: {  // decoded exactly; the statistics stay about FP16's range (grad_stats.h)
      const bfloat16_bits* p = grad.data<bfloat16_bits>();
      accumulate(s, s.numel, inv, [p](int64_t i) { return static_cast<double>(bfloat16_bits_to_float(p[i].bits)); });
      break;
    }
    case kInt64: break;  // refused above
  }
  return s;
}

std::vector<GradStats> collect_grad_stats(const nn::NamedTensors& params, double loss_scale) {
  std::vector<GradStats> out;
  GradStats all;
  all.name = "(all)";
  all.loss_scale = loss_scale;
  for (const auto& [name, p] : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g = g.copy_to(Device::CPU);  // an instrument, not the hot path: CUDA gradients are read on the host
    out.push_back(grad_stats(name, g, loss_scale));
    all += out.back();
  }
  if (!out.empty()) out.push_back(all);
  return out;
}

GradStatsCsvWriter::GradStatsCsvWriter(const std::string& path) : path_(path), out_(path) {
  HG_CHECK(out_.good(), "GradStatsCsvWriter: cannot open '" << path << "' for writing");
  out_ << header() << "\n";
  out_.flush();
}

const char* GradStatsCsvWriter::header() {
  return "step,param,numel,loss_scale,max_abs,min_nonzero_abs,zero_frac,fp16_underflow_frac,fp16_subnormal_frac,"
         "scaled_underflow_frac,overflow_count,nonfinite_count";
}

void GradStatsCsvWriter::write(int64_t step, const std::vector<GradStats>& stats) {
  out_.precision(6);
  for (const GradStats& s : stats) {
    out_ << step << "," << s.name << "," << s.numel << "," << s.loss_scale << "," << s.max_abs << ","
         << s.min_nonzero_abs << "," << s.fraction(s.zeros) << "," << s.fraction(s.fp16_underflow) << ","
         << s.fraction(s.fp16_subnormal) << "," << s.fraction(s.scaled_underflow) << "," << s.overflow << ","
         << s.nonfinite << "\n";
  }
  out_.flush();
  HG_CHECK(out_.good(), "GradStatsCsvWriter: writing '" << path_ << "' failed");
}

}  // namespace halfgrad::amp
