// conv3d.h - Conv3d and ConvTranspose3d layers (torch.nn.Conv3d / torch.nn.ConvTranspose3d) over
// ops::conv3d / ops::conv_transpose3d (see ops/conv/conv3d.h for the math and autocast behaviour).
//
//   Conv3d           x (N, Cin, D, H, W) -> y (N, Cout, Do, Ho, Wo),  Do = (D + 2p - k) / s + 1
//                    weight (Cout, Cin, k, k, k), bias (Cout)
//   ConvTranspose3d  x (N, Cin, D, H, W) -> y (N, Cout, Do, Ho, Wo),  Do = (D - 1) s - 2p + k
//                    weight (Cin, Cout, k, k, k), bias (Cout)
// Parameters are Float32 (the master weights; autocast makes the FP16 copies per op).
// Init (reset_parameters, as PyTorch): weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), with
// fan_in = weight.size(1) * k^3: Cin k^3 for Conv3d, Cout k^3 for ConvTranspose3d (nn/init.h).
// Not supported (unlike PyTorch): non-cubic kernels, per-axis stride/padding, dilation, groups,
// output_padding, padding modes other than zeros.
#pragma once
#include <cstdint>

#include "nn/module.h"

namespace halfgrad::nn {

/// Conv3dOptions(in, out, kernel).stride(s).padding(p).bias(b); each setter has a getter of the same
/// name (options.stride()), as libtorch's TORCH_ARG. Used by both conv layers.
struct Conv3dOptions {
  Conv3dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  Conv3dOptions& stride(int64_t s) { stride_ = s; return *this; }
  Conv3dOptions& padding(int64_t p) { padding_ = p; return *this; }
  Conv3dOptions& bias(bool b) { bias_ = b; return *this; }
  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  int64_t kernel_size() const { return kernel_size_; }
  int64_t stride() const { return stride_; }
  int64_t padding() const { return padding_; }
  bool bias() const { return bias_; }

  int64_t in_channels_;
  int64_t out_channels_;
  int64_t kernel_size_;
  int64_t stride_ = 1;
  int64_t padding_ = 0;
  bool bias_ = true;
};
using ConvTranspose3dOptions = Conv3dOptions;

/// 3-D convolution layer. Parameters: "weight" (Cout, Cin, k, k, k), "bias" (Cout) when options.bias.
/// Throws halfgrad::Error from the constructor for channels or kernel < 1, stride < 1, padding < 0.
class Conv3d : public Module {
 public:
  explicit Conv3d(const Conv3dOptions& options, Generator& gen = default_generator());
  /// x (N, Cin, D, H, W) -> (N, Cout, Do, Ho, Wo); errors as ops::conv3d.
  Tensor forward(const Tensor& x) override;
  /// Redraws weight and bias from the PyTorch init distribution.
  void reset_parameters(Generator& gen = default_generator());
  std::string extra_repr() const override;

  Conv3dOptions options;
  Tensor weight;
  Tensor bias;  // undefined when options.bias_ is false
};

/// 3-D transposed convolution layer (the adjoint of Conv3d w.r.t. its input; the U-Net's upsampler).
/// Parameters: "weight" (Cin, Cout, k, k, k), "bias" (Cout) when options.bias.
class ConvTranspose3d : public Module {
 public:
  explicit ConvTranspose3d(const ConvTranspose3dOptions& options, Generator& gen = default_generator());
  /// x (N, Cin, D, H, W) -> (N, Cout, (D-1)s-2p+k, ...); errors as ops::conv_transpose3d.
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator& gen = default_generator());
  std::string extra_repr() const override;

  ConvTranspose3dOptions options;
  Tensor weight;
  Tensor bias;
};

}  // namespace halfgrad::nn
