// unet3d.h - the 3-D U-Net of the project's reference (../shared/reference/torch_unet_step.py, class
// UNet3D), layer for layer, with the same parameter names and order as its PyTorch state_dict.
//
//   block(ci, co) = Sequential(Conv3d(ci, co, 3, padding 1, no bias), Norm(co), ReLU,
//                              Conv3d(co, co, 3, padding 1, no bias), Norm(co), ReLU)
//   encoder   for each level l with width c_l:  x = enc[l](x); skip_l = x; x = max_pool3d(x, 2)
//   bottleneck x = bott(x)                              (c_last -> bottleneck)
//   decoder   for each level from the deepest:  x = dec[i](cat([up[i](x), skip], channels))
//             up[i] = ConvTranspose3d(c_in, c_l, 2, stride 2) (with bias), dec[i] = block(2 c_l, c_l)
//   head      Conv3d(c_0, num_classes, 1) with bias -> logits
//   ds_heads  (deep_supervision only) ds_heads[i] = Conv3d(c_l, num_classes, 1) with bias on dec[i]'s
//             output, for every decoder level but the last (the full-resolution one, whose head is
//             `head`): levels - 1 heads, deepest first as up and dec, so ds_heads.{i} sits on dec.{i}
//             (nnU-Net v2's UNetDecoder.seg_layers, minus its last, with deep_supervision=True).
// Shapes: x (N, in_channels, D, H, W) -> logits (N, num_classes, D, H, W). D, H and W must each be
// divisible by 2^levels (levels = channels.size()), since every level halves them and the decoder
// must meet the skip at the same size.
// Names: enc.{l}.{0,1,3,4}.*, bott.*, up.{i}.{weight,bias}, dec.{i}.*, head.{weight,bias}
// (Sequential indices 0 conv, 1 norm, 2 ReLU, 3 conv, 4 norm, 5 ReLU, as PyTorch), then, with
// deep_supervision only, ds_heads.{i}.{weight,bias} for i = 0 .. levels - 2, registered after head:
// with deep_supervision off the parameters, their names, order and initial values are those of the
// reference, and with it on the others keep theirs (the heads draw from `gen` last).
//
// Parameter counts (in_channels 1, num_classes 3):
//   default  channels {16, 32, 64, 128}, bottleneck 256, Batch:  5,646,419  (= the PyTorch reference)
//   cpu()    channels {8, 16, 32, 64},   bottleneck 128, Batch:  1,412,523
//   deep_supervision adds (c_l + 1) * num_classes per head: +681 for the default widths (5,647,100),
//   +345 for cpu() (1,412,868).
// Norm variants: Instance uses InstanceNorm3d with PyTorch's default affine=false (no parameters;
// default widths: 5,643,475); None drops the norm and gives the block convs a bias, as one would
// in PyTorch (default widths: 5,644,947).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/arg.h"
#include "core/json_checked.h"

#include "nn/containers.h"
#include "nn/conv3d.h"
#include "nn/module.h"

namespace halfgrad::nn {

/// The normalisation after each block conv.
enum class NormKind : uint8_t { Batch, Instance, None };
/// "batch", "instance", "none".
const char* norm_kind_name(NormKind n);

/// UNet3dOptions().in_channels(1).num_classes(3).channels({16, 32, 64, 128}).bottleneck(256).norm(..);
/// each option is an HG_ARG (core/arg.h): a chaining setter and a same-named getter (options.bottleneck()).
struct UNet3dOptions {
  HG_ARG(int64_t, in_channels) = 1;
  HG_ARG(int64_t, num_classes) = 3;
  HG_ARG(std::vector<int64_t>, channels) = {16, 32, 64, 128};
  HG_ARG(int64_t, bottleneck) = 256;
  HG_ARG(NormKind, norm) = NormKind::Batch;
  /// Registers ds_heads and enables UNet3d::forward_deep (nnU-Net's deep supervision). Needs at
  /// least 2 levels. Off: the model is exactly the reference's.
  HG_ARG(bool, deep_supervision) = false;

  /// Half the reference's widths, for training on a CPU: channels {8, 16, 32, 64}, bottleneck 128,
  /// 1,412,523 parameters (about 4x fewer than the default, and about 4x fewer conv FLOPs per voxel).
  static UNet3dOptions cpu() { return UNet3dOptions().channels({8, 16, 32, 64}).bottleneck(128); }

  /// {"in_channels": 1, "num_classes": 3, "channels": [16, 32, 64, 128], "bottleneck": 256,
  ///  "norm": "batch", "deep_supervision": false}: what a checkpoint's metadata records to rebuild
  /// the model.
  nlohmann::json to_json() const;
  /// The inverse of to_json, for untrusted input (a checkpoint's metadata). Throws halfgrad::Error
  /// "<where>: field '<path>.<key>' must be an integer, got string" (json_checked::Field) for a
  /// missing key or a wrong type, an unknown norm name, or a value outside the bounds below; the
  /// message never holds a dump of the input. The one optional key is "deep_supervision" (a bool;
  /// absent, as in checkpoints written before it existed, it reads false). The first form names
  /// "UNet3dOptions::from_json" and the top level; the second the file and path that `f` carries
  /// (e.g. model.safetensors, "model").
  static UNet3dOptions from_json(const nlohmann::json& j);
  static UNet3dOptions from_json(const json_checked::Field& f);
  /// from_json's bounds: every width, in_channels, num_classes and bottleneck in [1, 4096], and 1 to
  /// 16 levels. Far above any 3-D U-Net in use, they stop a crafted file from making the
  /// constructor ask for terabytes before the checkpoint's tensors are compared with the model.
  static constexpr int64_t kMaxJsonWidth = 4096;
  static constexpr size_t kMaxJsonLevels = 16;
  /// "channels {16, 32, 64, 128}, bottleneck 256, norm batch, in 1, classes 3", for logs, with
  /// ", deep supervision" appended when it is on.
  std::string describe() const;

  /// The options of the UNet3d whose state_dict has these tensors (name -> shape; a safetensors
  /// header's entries, so nothing is allocated): levels and widths from enc.<l>.0.weight,
  /// in_channels from enc.0.0.weight's dim 1, bottleneck from bott.0.weight, num_classes from
  /// head.weight, the norm from enc.0.1.running_mean (batch) or enc.0.0.bias (none) or neither
  /// (instance), deep_supervision from ds_heads.0.weight (then ds_heads.{0 .. levels-2}.weight must
  /// all be there). Every 5-D tensor must have the kernels UNet3d builds (3^3 block
  /// convs, 2^3 up-convs, 1^3 heads). Throws halfgrad::Error starting "<where>: " naming the
  /// missing or odd tensor.
  static UNet3dOptions infer_from_shapes(const std::map<std::string, Shape>& shapes, const std::string& where);
  /// Throws halfgrad::Error starting "<where>: " unless infer_from_shapes(shapes) equals these
  /// options: a checkpoint whose metadata claims another architecture than its tensors is refused
  /// before the model is built (a 93 KB file claiming channels {4096} would otherwise allocate
  /// gigabytes first).
  void check_matches_shapes(const std::map<std::string, Shape>& shapes, const std::string& where) const;
  bool operator==(const UNet3dOptions& o) const {
    return in_channels_ == o.in_channels_ && num_classes_ == o.num_classes_ && channels_ == o.channels_ &&
           bottleneck_ == o.bottleneck_ && norm_ == o.norm_ && deep_supervision_ == o.deep_supervision_;
  }
};

/// Throws halfgrad::Error from the constructor for an empty `channels` list, any width < 1, or
/// deep_supervision with a single level (it would have no lower-resolution output).
class UNet3d : public Module {
 public:
  explicit UNet3d(const UNet3dOptions& options = UNet3dOptions(), Generator& gen = default_generator());
  /// x (N, in_channels, D, H, W), floating -> logits (N, num_classes, D, H, W), in the dtype the last
  /// conv runs in (FP16 under autocast). Throws halfgrad::Error naming the shape when x is not 5-D,
  /// has the wrong channel count, or D, H or W is not divisible by size_divisor().
  Tensor forward(const Tensor& x) override;
  /// deep_supervision only: the logits of every decoder level, highest resolution first (nnU-Net v2's
  /// order): [0] the full-resolution logits (N, num_classes, D, H, W), bit-identical to forward(x),
  /// then ds_heads' logits (N, num_classes, D/2^k, H/2^k, W/2^k) for k = 1 .. levels - 1, in the
  /// dtype the heads run in. Throws halfgrad::Error when deep_supervision is off, and forward's
  /// errors for x.
  std::vector<Tensor> forward_deep(const Tensor& x);
  /// Number of pooling levels (channels.size()).
  int64_t levels() const { return static_cast<int64_t>(options.channels_.size()); }
  /// 2^levels: what every spatial extent of the input must be a multiple of.
  int64_t size_divisor() const { return int64_t{1} << levels(); }
  std::string extra_repr() const override;

  UNet3dOptions options;
  std::vector<std::shared_ptr<Sequential>> enc;       // registered as ModuleList "enc"
  std::shared_ptr<Sequential> bott;
  std::vector<std::shared_ptr<ConvTranspose3d>> up;   // deepest first; ModuleList "up"
  std::vector<std::shared_ptr<Sequential>> dec;       // deepest first; ModuleList "dec"
  std::shared_ptr<Conv3d> head;
  std::vector<std::shared_ptr<Conv3d>> ds_heads;      // deep_supervision only, deepest first; ModuleList "ds_heads"

 private:
  // The network; with `deep` set, also dec[i]'s outputs for i < levels - 1 (deepest first).
  Tensor run(const Tensor& x, std::vector<Tensor>* deep);
};

}  // namespace halfgrad::nn
