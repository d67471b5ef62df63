#include "nn/activation.h"

#include <sstream>

#include "core/error.h"
#include "ops/activation/activation.h"
#include "ops/activation/smooth.h"

namespace halfgrad::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

Tensor LeakyReLU::forward(const Tensor& x) { return ops::leaky_relu(x, options.negative_slope_); }

std::string LeakyReLU::extra_repr() const {
  std::ostringstream os;
  os << "negative_slope=" << options.negative_slope_;
  return os.str();
}

Tensor Sigmoid::forward(const Tensor& x) { return ops::sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return ops::tanh(x); }
Tensor SiLU::forward(const Tensor& x) { return ops::silu(x); }

GELU::GELU(const GELUOptions& o) : Module("GELU"), options(o) {
  HG_CHECK(o.approximate_ == "none" || o.approximate_ == "tanh",
           "GELU: approximate must be \"none\" or \"tanh\" (as torch.nn.GELU), got \"" << o.approximate_ << "\"");
}

Tensor GELU::forward(const Tensor& x) {
  return ops::gelu(x, options.approximate_ == "tanh" ? ops::GeluApproximate::Tanh : ops::GeluApproximate::None);
}

std::string GELU::extra_repr() const { return "approximate='" + options.approximate_ + "'"; }

}  // namespace halfgrad::nn
