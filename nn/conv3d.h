// conv3d.h - Conv3d and ConvTranspose3d layers (torch.nn.Conv3d / torch.nn.ConvTranspose3d) over
// ops::conv3d / ops::conv_transpose3d (see ops/conv/conv3d.h for the math and autocast behaviour).
//
//   Conv3d           x (N, Cin, D, H, W) -> y (N, Cout, Do, Ho, Wo),  Xo = (X + 2p - d (k - 1) - 1) / s + 1
//                    weight (Cout, Cin, kd, kh, kw), bias (Cout)
//   ConvTranspose3d  x (N, Cin, D, H, W) -> y (N, Cout, Do, Ho, Wo),
//                    Xo = (X - 1) s - 2p + d (k - 1) + output_padding + 1
//                    weight (Cin, Cout, kd, kh, kw), bias (Cout)
// per axis X of (D, H, W), with that axis's kernel k, stride s, padding p and dilation d. Kernel,
// stride, padding, dilation and output_padding are ExpandingArray<3> (core/expanding_array.h): a single
// integer means all three axes, a list {kd, kh, kw} one value per axis, e.g. nnU-Net's in-plane-only
// Conv3dOptions(32, 64, {1, 3, 3}).stride({1, 2, 2}).padding({0, 1, 1}) for anisotropic scans.
// Parameters are Float32 (the master weights; autocast makes the FP16 copies per op).
// Init (reset_parameters, as PyTorch): weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), with
// fan_in = weight.size(1) * kd kh kw: Cin kd kh kw for Conv3d, Cout kd kh kw for ConvTranspose3d
// (nn/init.h).
// extra_repr as PyTorch's, except that a value equal on every axis prints as one integer
// ("kernel_size=3", PyTorch "kernel_size=(3, 3, 3)"); dilation and output_padding only when not default.
// Not supported (unlike PyTorch): groups, padding modes other than zeros, padding="same"/"valid".
#pragma once
#include <cstdint>

#include "core/arg.h"
#include "core/expanding_array.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// Conv3dOptions(in, out, kernel).stride(s).padding(p).dilation(d).bias(b); each option is an HG_ARG
/// (core/arg.h, libtorch's TORCH_ARG): a chaining setter and a getter of the same name (options.stride()).
struct Conv3dOptions {
  Conv3dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<3> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  HG_ARG(int64_t, in_channels);
  HG_ARG(int64_t, out_channels);
  HG_ARG(ExpandingArray<3>, kernel_size);
  HG_ARG(ExpandingArray<3>, stride) = 1;
  HG_ARG(ExpandingArray<3>, padding) = 0;
  HG_ARG(ExpandingArray<3>, dilation) = 1;
  HG_ARG(bool, bias) = true;
};

/// ConvTranspose3dOptions(in, out, kernel).stride(s).padding(p).output_padding(op).dilation(d).bias(b),
/// as libtorch's ConvTranspose3dOptions. output_padding must be < stride or < dilation per axis.
struct ConvTranspose3dOptions {
  ConvTranspose3dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<3> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  HG_ARG(int64_t, in_channels);
  HG_ARG(int64_t, out_channels);
  HG_ARG(ExpandingArray<3>, kernel_size);
  HG_ARG(ExpandingArray<3>, stride) = 1;
  HG_ARG(ExpandingArray<3>, padding) = 0;
  HG_ARG(ExpandingArray<3>, output_padding) = 0;
  HG_ARG(ExpandingArray<3>, dilation) = 1;
  HG_ARG(bool, bias) = true;
};

/// 3-D convolution layer. Parameters: "weight" (Cout, Cin, kd, kh, kw), "bias" (Cout) when options.bias.
/// Throws halfgrad::Error from the constructor, naming the layer, for channels or a kernel extent < 1,
/// stride < 1, padding < 0 or dilation < 1 on any axis.
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
/// Parameters: "weight" (Cin, Cout, kd, kh, kw), "bias" (Cout) when options.bias. Constructor errors as
/// Conv3d's, and output_padding < 0 or not below the stride or the dilation on its axis.
class ConvTranspose3d : public Module {
 public:
  explicit ConvTranspose3d(const ConvTranspose3dOptions& options, Generator& gen = default_generator());
  /// x (N, Cin, D, H, W) -> (N, Cout, (D-1)s-2p+d(k-1)+op+1, ...); errors as ops::conv_transpose3d.
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator& gen = default_generator());
  std::string extra_repr() const override;

  ConvTranspose3dOptions options;
  Tensor weight;
  Tensor bias;
};

}  // namespace halfgrad::nn
