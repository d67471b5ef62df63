#include "nn/init.h"

#include <cmath>

#include "core/error.h"

namespace halfgrad::nn::init {

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Shape& w) {
  HG_CHECK(w.size() >= 2, "calculate_fan_in_and_fan_out: weight " << shape_str(w)
                                                                  << " has fewer than 2 dimensions");
  int64_t receptive = 1;
  for (size_t i = 2; i < w.size(); ++i) receptive *= w[i];
  return {w[1] * receptive, w[0] * receptive};
}

void uniform_(const Tensor& t, double lo, double hi, Generator& gen) {
  Tensor(t).copy_from(Tensor::uniform(t.shape(), lo, hi, gen, kFloat64));
}

void kaiming_uniform_(const Tensor& t, double a, Generator& gen) {
  const int64_t fan_in = calculate_fan_in_and_fan_out(t.shape()).first;
  HG_CHECK(fan_in > 0, "kaiming_uniform_: weight " << shape_str(t.shape()) << " has fan_in 0");
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in));
  uniform_(t, -bound, bound, gen);
}

}  // namespace halfgrad::nn::init
