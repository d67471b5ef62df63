#include "nn/max_pool3d.h"

#include <sstream>

#include "core/error.h"
#include "ops/pool/max_pool3d.h"

namespace halfgrad::nn {

MaxPool3d::MaxPool3d(const MaxPool3dOptions& o) : Module("MaxPool3d"), options(o) {
  HG_CHECK(o.kernel_size_ >= 1, "MaxPool3d: kernel_size must be >= 1, got " << o.kernel_size_);
  HG_CHECK(o.stride_ >= 0, "MaxPool3d: stride must be >= 1 (or 0 for kernel_size), got " << o.stride_);
  if (options.stride_ == 0) options.stride_ = options.kernel_size_;
}

Tensor MaxPool3d::forward(const Tensor& x) { return ops::max_pool3d(x, options.kernel_size_, options.stride_); }

std::string MaxPool3d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << options.kernel_size_ << ", stride=" << options.stride_;
  return os.str();
}

}  // namespace halfgrad::nn
