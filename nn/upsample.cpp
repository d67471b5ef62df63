// upsample.cpp - the Upsample layer of upsample.h: checks at construction, then the op with
// F.interpolate's output size.
#include "nn/upsample.h"

#include <sstream>

#include "core/error.h"
#include "ops/pool/upsample.h"

namespace halfgrad::nn {

Upsample::Upsample(const UpsampleOptions& o) : Module("Upsample"), options(o) {
  HG_CHECK(o.size_.has_value() != o.scale_factor_.has_value(),
           "Upsample: set exactly one of size and scale_factor (as torch.nn.Upsample), got "
               << (o.size_ ? "both" : "neither"));
  if (o.size_) {
    HG_CHECK(o.size_->size() == 3, "Upsample: size must hold 3 values (D, H, W), got " << o.size_->size());
    for (int64_t s : *o.size_) HG_CHECK(s >= 1, "Upsample: size must be >= 1 on every axis, got " << s);
  } else {
    HG_CHECK(o.scale_factor_->size() == 3,
             "Upsample: scale_factor must hold 3 values (D, H, W), got " << o.scale_factor_->size());
    for (double f : *o.scale_factor_) HG_CHECK(f > 0, "Upsample: scale_factor must be > 0, got " << f);
  }
  HG_CHECK(!(o.mode_ == kNearest && o.align_corners_.has_value()),
           "Upsample: align_corners option can only be set with the interpolating modes (trilinear), as PyTorch");
}

Tensor Upsample::forward(const Tensor& x) {
  const std::vector<double> scales = options.scale_factor_ ? *options.scale_factor_ : std::vector<double>{};
  const char* op = options.mode_ == kNearest ? "upsample_nearest3d" : "upsample_trilinear3d";
  const ExpandingArray<3> size = options.size_ ? ExpandingArray<3>(*options.size_)
                                               : ExpandingArray<3>(ops::upsample_output_size(op, x.shape(), scales));
  if (options.mode_ == kNearest) return ops::upsample_nearest3d(x, size, scales);
  return ops::upsample_trilinear3d(x, size, options.align_corners_.value_or(false), scales);
}

std::string Upsample::extra_repr() const {
  std::ostringstream os;
  if (options.size_) {
    os << "size=(" << (*options.size_)[0] << ", " << (*options.size_)[1] << ", " << (*options.size_)[2] << ")";
  } else {
    os << "scale_factor=(" << (*options.scale_factor_)[0] << ", " << (*options.scale_factor_)[1] << ", "
       << (*options.scale_factor_)[2] << ")";
  }
  os << ", mode='" << (options.mode_ == kNearest ? "nearest" : "trilinear") << "'";
  if (options.align_corners_) os << ", align_corners=" << (*options.align_corners_ ? "True" : "False");
  return os.str();
}

}  // namespace halfgrad::nn
