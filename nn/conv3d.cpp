#include "nn/conv3d.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "nn/init.h"
#include "ops/conv/conv3d.h"

namespace halfgrad::nn {

// The layer's own checks (ops::conv3d checks the same again at forward, naming the op).
static void check_axes(const char* layer, const char* what, const ExpandingArray<3>& v, int64_t min) {
  for (size_t a = 0; a < 3; ++a)
    HG_CHECK(v[a] >= min, layer << ": " << what << " must be >= " << min << " on every axis, got " << v.str());
}

template <class Options>
static void check_options(const char* layer, const Options& o) {
  HG_CHECK(o.in_channels_ >= 1 && o.out_channels_ >= 1,
           layer << ": channels must be >= 1, got in " << o.in_channels_ << ", out " << o.out_channels_);
  check_axes(layer, "kernel_size", o.kernel_size_, 1);
  check_axes(layer, "stride", o.stride_, 1);
  check_axes(layer, "padding", o.padding_, 0);
  check_axes(layer, "dilation", o.dilation_, 1);
}

static Shape weight_shape(int64_t a0, int64_t a1, const ExpandingArray<3>& k) { return {a0, a1, k[0], k[1], k[2]}; }

// PyTorch's _ConvNd.reset_parameters: kaiming_uniform_(a=sqrt(5)) for the weight, then the bias from
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in.
static void reset_conv(const Tensor& weight, const Tensor& bias, Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fan_in_and_fan_out(weight.shape()).first));
    init::uniform_(bias, -bound, bound, gen);
  }
}

// As PyTorch's _ConvNd.extra_repr, but a uniform value prints as one integer ("kernel_size=3",
// PyTorch: "kernel_size=(3, 3, 3)"); dilation and output_padding only when not their defaults.
template <class Options>
static std::string conv_repr(const Options& o, const ExpandingArray<3>& output_padding) {
  std::ostringstream os;
  os << o.in_channels_ << ", " << o.out_channels_ << ", kernel_size=" << o.kernel_size_.str()
     << ", stride=" << o.stride_.str() << ", padding=" << o.padding_.str();
  if (o.dilation_ != ExpandingArray<3>(1)) os << ", dilation=" << o.dilation_.str();
  if (output_padding != ExpandingArray<3>(0)) os << ", output_padding=" << output_padding.str();
  os << ", bias=" << (o.bias_ ? "true" : "false");
  return os.str();
}

// ---- Conv3d -------------------------------------------------------------------------------------------

Conv3d::Conv3d(const Conv3dOptions& o, Generator& gen) : Module("Conv3d"), options(o) {
  check_options("Conv3d", o);
  weight = register_parameter("weight", Tensor::empty(weight_shape(o.out_channels_, o.in_channels_, o.kernel_size_)));
  if (o.bias_) bias = register_parameter("bias", Tensor::empty({o.out_channels_}));
  reset_parameters(gen);
}

void Conv3d::reset_parameters(Generator& gen) { reset_conv(weight, bias, gen); }

Tensor Conv3d::forward(const Tensor& x) {
  return ops::conv3d(x, weight, bias,
                     ops::Conv3dParams().stride(options.stride_).padding(options.padding_).dilation(options.dilation_));
}

std::string Conv3d::extra_repr() const { return conv_repr(options, 0); }

// ---- ConvTranspose3d ----------------------------------------------------------------------------------

ConvTranspose3d::ConvTranspose3d(const ConvTranspose3dOptions& o, Generator& gen)
    : Module("ConvTranspose3d"), options(o) {
  check_options("ConvTranspose3d", o);
  check_axes("ConvTranspose3d", "output_padding", o.output_padding_, 0);
  for (size_t a = 0; a < 3; ++a)
    HG_CHECK(o.output_padding_[a] < o.stride_[a] || o.output_padding_[a] < o.dilation_[a],
             "ConvTranspose3d: output_padding " << o.output_padding_.str() << " must be smaller than the stride "
                                                << o.stride_.str() << " or the dilation " << o.dilation_.str()
                                                << " on every axis");
  weight = register_parameter("weight", Tensor::empty(weight_shape(o.in_channels_, o.out_channels_, o.kernel_size_)));
  if (o.bias_) bias = register_parameter("bias", Tensor::empty({o.out_channels_}));
  reset_parameters(gen);
}

void ConvTranspose3d::reset_parameters(Generator& gen) { reset_conv(weight, bias, gen); }

Tensor ConvTranspose3d::forward(const Tensor& x) {
  return ops::conv_transpose3d(x, weight, bias,
                               ops::Conv3dParams()
                                   .stride(options.stride_)
                                   .padding(options.padding_)
                                   .dilation(options.dilation_)
                                   .output_padding(options.output_padding_));
}

std::string ConvTranspose3d::extra_repr() const { return conv_repr(options, options.output_padding_); }

}  // namespace halfgrad::nn
