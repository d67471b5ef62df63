// pooling.cpp - the pooling layers of pooling.h: argument checks at construction, then the op.
#include "nn/pooling.h"

#include <sstream>

#include "core/error.h"
#include "ops/pool/avg_pool3d.h"
#include "ops/pool/max_pool3d.h"

namespace halfgrad::nn {

namespace {

void check_window(const char* layer, const ExpandingArray<3>& k, const ExpandingArray<3>& s,
                  const ExpandingArray<3>& p) {
  for (size_t a = 0; a < 3; ++a) {
    HG_CHECK(k[a] >= 1, layer << ": kernel_size must be >= 1, got " << k.str());
    HG_CHECK(s[a] >= 1, layer << ": stride must be >= 1, got " << s.str());
    HG_CHECK(p[a] >= 0 && p[a] <= k[a] / 2,
             layer << ": padding must be in [0, kernel_size / 2], got padding " << p.str() << " for kernel_size "
                   << k.str());
  }
}

}  // namespace

MaxPool3d::MaxPool3d(const MaxPool3dOptions& o) : Module("MaxPool3d"), options(o) {
  check_window("MaxPool3d", o.kernel_size_, o.stride_, o.padding_);
}

Tensor MaxPool3d::forward(const Tensor& x) {
  return ops::max_pool3d(x, options.kernel_size_, options.stride_, options.padding_);
}

std::string MaxPool3d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << options.kernel_size_.str() << ", stride=" << options.stride_.str()
     << ", padding=" << options.padding_.str();
  return os.str();
}

AvgPool3d::AvgPool3d(const AvgPool3dOptions& o) : Module("AvgPool3d"), options(o) {
  check_window("AvgPool3d", o.kernel_size_, o.stride_, o.padding_);
  HG_CHECK(!o.divisor_override_ || *o.divisor_override_ > 0,
           "AvgPool3d: divisor_override must be > 0, got " << *o.divisor_override_);
}

Tensor AvgPool3d::forward(const Tensor& x) {
  return ops::avg_pool3d(x, options.kernel_size_, options.stride_, options.padding_, options.ceil_mode_,
                         options.count_include_pad_, options.divisor_override_);
}

std::string AvgPool3d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << options.kernel_size_.str() << ", stride=" << options.stride_.str()
     << ", padding=" << options.padding_.str();
  if (options.ceil_mode_) os << ", ceil_mode=True";
  if (!options.count_include_pad_) os << ", count_include_pad=False";
  if (options.divisor_override_) os << ", divisor_override=" << *options.divisor_override_;
  return os.str();
}

AdaptiveAvgPool3d::AdaptiveAvgPool3d(const AdaptiveAvgPool3dOptions& o) : Module("AdaptiveAvgPool3d"), options(o) {
  for (size_t a = 0; a < 3; ++a)
    HG_CHECK(o.output_size_[a] >= 1, "AdaptiveAvgPool3d: output_size must be >= 1, got " << o.output_size_.str());
}

Tensor AdaptiveAvgPool3d::forward(const Tensor& x) { return ops::adaptive_avg_pool3d(x, options.output_size_); }

std::string AdaptiveAvgPool3d::extra_repr() const { return "output_size=" + options.output_size_.str(); }

}  // namespace halfgrad::nn
