#include "nn/linear.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "nn/init.h"
#include "ops/matmul/matmul.h"
#include "ops/shape/shape.h"

namespace halfgrad::nn {

Linear::Linear(const LinearOptions& o, Generator& gen) : Module("Linear"), options(o) {
  HG_CHECK(o.in_features_ >= 1 && o.out_features_ >= 1, "Linear: in_features and out_features must be >= 1, got "
                                                            << o.in_features_ << " and " << o.out_features_);
  weight = register_parameter("weight", Tensor::empty({o.out_features_, o.in_features_}));
  if (o.bias_) bias = register_parameter("bias", Tensor::empty({o.out_features_}));
  reset_parameters(gen);
}

// PyTorch's Linear.reset_parameters: kaiming_uniform_(a = sqrt(5)) for the weight, then the bias from
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_features.
void Linear::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(options.in_features_));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  HG_CHECK(x.defined(), "Linear: input is undefined");
  HG_CHECK(x.dim() >= 1 && x.size(-1) == options.in_features_,
           "Linear: input " << shape_str(x.shape()) << " must be (*, " << options.in_features_
                            << "): its last dim must be in_features = " << options.in_features_);
  if (x.dim() == 2) return ops::linear(x, weight, bias);
  Shape out(x.shape().begin(), x.shape().end() - 1);
  out.push_back(options.out_features_);
  const Tensor y = ops::linear(ops::reshape(x, {x.numel() / options.in_features_, options.in_features_}), weight, bias);
  return ops::reshape(y, out);
}

std::string Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << options.in_features_ << ", out_features=" << options.out_features_
     << ", bias=" << (options.bias_ ? "true" : "false");
  return os.str();
}

Flatten::Flatten(const FlattenOptions& o) : Module("Flatten"), options(o) {}

Tensor Flatten::forward(const Tensor& x) { return ops::flatten(x, options.start_dim_, options.end_dim_); }

std::string Flatten::extra_repr() const {
  std::ostringstream os;
  os << "start_dim=" << options.start_dim_ << ", end_dim=" << options.end_dim_;
  return os.str();
}

}  // namespace halfgrad::nn
