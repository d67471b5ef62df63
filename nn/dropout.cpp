#include "nn/dropout.h"

#include <sstream>

#include "core/error.h"
#include "ops/dropout/dropout.h"

namespace halfgrad::nn {

namespace {
void check_p(const char* layer, double p) {
  HG_CHECK(p >= 0.0 && p <= 1.0, layer << ": dropout probability has to be between 0 and 1, but got " << p);
}
std::string p_repr(double p) {
  std::ostringstream os;
  os << "p=" << p;
  return os.str();
}
}  // namespace

Dropout::Dropout(const DropoutOptions& o, Generator& gen) : Module("Dropout"), options(o), gen_(&gen) {
  check_p("Dropout", o.p_);
}
Tensor Dropout::forward(const Tensor& x) { return ops::dropout(x, options.p_, is_training(), *gen_); }
std::string Dropout::extra_repr() const { return p_repr(options.p_); }

Dropout3d::Dropout3d(const Dropout3dOptions& o, Generator& gen) : Module("Dropout3d"), options(o), gen_(&gen) {
  check_p("Dropout3d", o.p_);
}
Tensor Dropout3d::forward(const Tensor& x) { return ops::dropout3d(x, options.p_, is_training(), *gen_); }
std::string Dropout3d::extra_repr() const { return p_repr(options.p_); }

}  // namespace halfgrad::nn
