#include "nn/normalization.h"

#include <sstream>

#include "core/error.h"
#include "ops/norm/layer_norm.h"
#include "ops/norm/norm.h"

namespace halfgrad::nn {

GroupNorm::GroupNorm(const GroupNormOptions& o) : Module("GroupNorm"), options(o) {
  HG_CHECK(o.num_groups_ >= 1, "GroupNorm: num_groups must be >= 1, got " << o.num_groups_);
  HG_CHECK(o.num_channels_ >= 1 && o.num_channels_ % o.num_groups_ == 0,
           "GroupNorm: num_channels must be divisible by num_groups, got num_channels=" << o.num_channels_
                                                                                       << ", num_groups=" << o.num_groups_);
  HG_CHECK(o.eps_ > 0, "GroupNorm: eps must be > 0, got " << o.eps_);
  if (o.affine_) {
    weight = register_parameter("weight", Tensor::empty({o.num_channels_}));
    bias = register_parameter("bias", Tensor::empty({o.num_channels_}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (!options.affine_) return;
  weight.fill_(1.0);
  bias.fill_(0.0);
}

Tensor GroupNorm::forward(const Tensor& x) {
  HG_CHECK(x.defined(), "GroupNorm: input is undefined");
  HG_CHECK(x.dim() >= 2 && x.size(1) == options.num_channels_,
           "GroupNorm: input " << shape_str(x.shape()) << " must be (N, " << options.num_channels_ << ", *)");
  return ops::group_norm(x, options.num_groups_, weight, bias, options.eps_);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << options.num_groups_ << ", " << options.num_channels_ << ", eps=" << options.eps_
     << ", affine=" << (options.affine_ ? "true" : "false");
  return os.str();
}

LayerNorm::LayerNorm(const LayerNormOptions& o) : Module("LayerNorm"), options(o) {
  HG_CHECK(!o.normalized_shape_.empty(), "LayerNorm: normalized_shape must name at least one dim");
  for (int64_t d : o.normalized_shape_)
    HG_CHECK(d >= 1, "LayerNorm: normalized_shape " << shape_str(o.normalized_shape_) << " has a dim < 1");
  HG_CHECK(o.eps_ > 0, "LayerNorm: eps must be > 0, got " << o.eps_);
  if (o.elementwise_affine_) {
    weight = register_parameter("weight", Tensor::empty(o.normalized_shape_));
    bias = register_parameter("bias", Tensor::empty(o.normalized_shape_));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (!options.elementwise_affine_) return;
  weight.fill_(1.0);
  bias.fill_(0.0);
}

Tensor LayerNorm::forward(const Tensor& x) {
  return ops::layer_norm(x, options.normalized_shape_, weight, bias, options.eps_);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << shape_str(options.normalized_shape_) << ", eps=" << options.eps_
     << ", elementwise_affine=" << (options.elementwise_affine_ ? "true" : "false");
  return os.str();
}

}  // namespace halfgrad::nn
