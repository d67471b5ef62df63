#include "nn/instance_norm.h"

#include <sstream>

#include "core/error.h"
#include "ops/norm/norm.h"

namespace halfgrad::nn {

InstanceNorm3d::InstanceNorm3d(const InstanceNorm3dOptions& o) : Module("InstanceNorm3d"), options(o) {
  HG_CHECK(o.num_features_ >= 1, "InstanceNorm3d: num_features must be >= 1, got " << o.num_features_);
  HG_CHECK(o.eps_ > 0, "InstanceNorm3d: eps must be > 0, got " << o.eps_);
  if (o.affine_) {
    weight = register_parameter("weight", Tensor::empty({o.num_features_}));
    bias = register_parameter("bias", Tensor::empty({o.num_features_}));
  }
  reset_parameters();
}

void InstanceNorm3d::reset_parameters() {
  if (!options.affine_) return;
  weight.fill_(1.0);
  bias.fill_(0.0);
}

Tensor InstanceNorm3d::forward(const Tensor& x) {
  HG_CHECK(x.defined(), "InstanceNorm3d: input is undefined");
  HG_CHECK(x.dim() == 5, "InstanceNorm3d: expected 5D input (N, C, D, H, W), got " << x.dim() << "D input "
                                                                                 << shape_str(x.shape()));
  HG_CHECK(x.size(1) == options.num_features_, "InstanceNorm3d: input " << shape_str(x.shape()) << " has "
                                                                       << x.size(1) << " channels; expected "
                                                                       << options.num_features_);
  return ops::instance_norm(x, weight, bias, options.eps_);
}

std::string InstanceNorm3d::extra_repr() const {
  std::ostringstream os;
  os << options.num_features_ << ", eps=" << options.eps_ << ", affine=" << (options.affine_ ? "true" : "false");
  return os.str();
}

}  // namespace halfgrad::nn
