#include "nn/conv3d.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "nn/init.h"
#include "ops/conv/conv3d.h"

namespace halfgrad::nn {

static void check_options(const char* layer, const Conv3dOptions& o) {
  HG_CHECK(o.in_channels_ >= 1 && o.out_channels_ >= 1,
           layer << ": channels must be >= 1, got in " << o.in_channels_ << ", out " << o.out_channels_);
  HG_CHECK(o.kernel_size_ >= 1, layer << ": kernel_size must be >= 1, got " << o.kernel_size_);
  HG_CHECK(o.stride_ >= 1, layer << ": stride must be >= 1, got " << o.stride_);
  HG_CHECK(o.padding_ >= 0, layer << ": padding must be >= 0, got " << o.padding_);
}

// PyTorch's _ConvNd.reset_parameters: kaiming_uniform_(a=sqrt(5)) for the weight, then the bias from
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in.
static void reset_conv(const Tensor& weight, const Tensor& bias, Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fan_in_and_fan_out(weight.shape()).first));
    init::uniform_(bias, -bound, bound, gen);
  }
}

static std::string conv_repr(const Conv3dOptions& o) {
  std::ostringstream os;
  os << o.in_channels_ << ", " << o.out_channels_ << ", kernel_size=" << o.kernel_size_ << ", stride=" << o.stride_
     << ", padding=" << o.padding_ << ", bias=" << (o.bias_ ? "true" : "false");
  return os.str();
}

// ---- Conv3d -------------------------------------------------------------------------------------------

Conv3d::Conv3d(const Conv3dOptions& o, Generator& gen) : Module("Conv3d"), options(o) {
  check_options("Conv3d", o);
  const int64_t k = o.kernel_size_;
  weight = register_parameter("weight", Tensor::empty({o.out_channels_, o.in_channels_, k, k, k}));
  if (o.bias_) bias = register_parameter("bias", Tensor::empty({o.out_channels_}));
  reset_parameters(gen);
}

void Conv3d::reset_parameters(Generator& gen) { reset_conv(weight, bias, gen); }

Tensor Conv3d::forward(const Tensor& x) {
  return ops::conv3d(x, weight, bias, ops::Conv3dParams().stride(options.stride_).padding(options.padding_));
}

std::string Conv3d::extra_repr() const { return conv_repr(options); }

// ---- ConvTranspose3d ----------------------------------------------------------------------------------

ConvTranspose3d::ConvTranspose3d(const ConvTranspose3dOptions& o, Generator& gen)
    : Module("ConvTranspose3d"), options(o) {
  check_options("ConvTranspose3d", o);
  const int64_t k = o.kernel_size_;
  weight = register_parameter("weight", Tensor::empty({o.in_channels_, o.out_channels_, k, k, k}));
  if (o.bias_) bias = register_parameter("bias", Tensor::empty({o.out_channels_}));
  reset_parameters(gen);
}

void ConvTranspose3d::reset_parameters(Generator& gen) { reset_conv(weight, bias, gen); }

Tensor ConvTranspose3d::forward(const Tensor& x) {
  return ops::conv_transpose3d(x, weight, bias,
                               ops::Conv3dParams().stride(options.stride_).padding(options.padding_));
}

std::string ConvTranspose3d::extra_repr() const { return conv_repr(options); }

}  // namespace halfgrad::nn
