#include "nn/activation.h"

#include <sstream>

#include "ops/activation/activation.h"

namespace halfgrad::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

Tensor LeakyReLU::forward(const Tensor& x) { return ops::leaky_relu(x, options.negative_slope_); }

std::string LeakyReLU::extra_repr() const {
  std::ostringstream os;
  os << "negative_slope=" << options.negative_slope_;
  return os.str();
}

}  // namespace halfgrad::nn
