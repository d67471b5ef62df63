#include "nn/unet3d.h"

#include <sstream>

#include "core/error.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/conv_bn_relu.h"
#include "nn/instance_norm.h"
#include "ops/activation/activation.h"
#include "ops/pool/max_pool3d.h"

namespace halfgrad::nn {

// (Conv3d 3^3 pad 1 -> norm -> ReLU) x 2. The conv has no bias when a norm follows (the norm's shift
// would cancel it), as in the reference; with no norm it keeps one.
// With BatchNorm the block is a ConvBnReluPair (nn/conv_bn_relu.h): the same Sequential, which runs the
// fused Conv-BN-ReLU op where it applies (the 16/32-channel levels on CUDA under FP16/BF16 autocast).
static std::shared_ptr<Sequential> conv_block(int64_t ci, int64_t co, NormKind norm, Generator& gen) {
  if (norm == NormKind::Batch) return std::make_shared<ConvBnReluPair>(ci, co, gen);
  auto block = std::make_shared<Sequential>();
  for (int64_t in : {ci, co}) {
    block->push_back(std::make_shared<Conv3d>(Conv3dOptions(in, co, 3).padding(1).bias(norm == NormKind::None), gen));
    if (norm == NormKind::Batch) block->push_back(std::make_shared<BatchNorm3d>(BatchNorm3dOptions(co)));
    if (norm == NormKind::Instance) block->push_back(std::make_shared<InstanceNorm3d>(InstanceNorm3dOptions(co)));
    block->push_back(std::make_shared<ReLU>());
  }
  return block;
}

UNet3d::UNet3d(const UNet3dOptions& o, Generator& gen) : Module("UNet3d"), options(o) {
  HG_CHECK(!o.channels_.empty(), "UNet3d: channels must list at least one level width");
  HG_CHECK(o.in_channels_ >= 1 && o.num_classes_ >= 1 && o.bottleneck_ >= 1,
           "UNet3d: in_channels, num_classes and bottleneck must be >= 1, got " << o.in_channels_ << ", "
                                                                               << o.num_classes_ << ", " << o.bottleneck_);
  for (int64_t c : o.channels_) HG_CHECK(c >= 1, "UNet3d: every level width must be >= 1, got " << c);
  HG_CHECK(o.channels_.size() < 31, "UNet3d: " << o.channels_.size() << " levels is too many");
  HG_CHECK(!o.deep_supervision_ || o.channels_.size() >= 2,
           "UNet3d: deep_supervision needs at least 2 levels (a lower-resolution output), got "
               << o.channels_.size() << " level width");

  // Registration order = the reference's __init__: enc, bott, up, dec, head.
  auto enc_list = register_module("enc", std::make_shared<ModuleList>());
  int64_t c = o.in_channels_;
  for (int64_t co : o.channels_) {
    enc.push_back(enc_list->push_back(conv_block(c, co, o.norm_, gen)));
    c = co;
  }
  bott = register_module("bott", conv_block(c, o.bottleneck_, o.norm_, gen));
  c = o.bottleneck_;
  auto up_list = register_module("up", std::make_shared<ModuleList>());
  auto dec_list = register_module("dec", std::make_shared<ModuleList>());
  for (auto it = o.channels_.rbegin(); it != o.channels_.rend(); ++it) {
    const int64_t co = *it;
    up.push_back(up_list->push_back(std::make_shared<ConvTranspose3d>(ConvTranspose3dOptions(c, co, 2).stride(2), gen)));
    dec.push_back(dec_list->push_back(conv_block(2 * co, co, o.norm_, gen)));
    c = co;
  }
  head = register_module("head", std::make_shared<Conv3d>(Conv3dOptions(c, o.num_classes_, 1), gen));
  // After head, so that with deep_supervision off nothing is registered or drawn from gen.
  if (o.deep_supervision_) {
    auto ds_list = register_module("ds_heads", std::make_shared<ModuleList>());
    for (size_t i = 0; i + 1 < o.channels_.size(); ++i) {
      const int64_t ci = o.channels_[o.channels_.size() - 1 - i];  // dec[i]'s width
      ds_heads.push_back(ds_list->push_back(std::make_shared<Conv3d>(Conv3dOptions(ci, o.num_classes_, 1), gen)));
    }
  }
}

Tensor UNet3d::forward(const Tensor& x) { return run(x, nullptr); }

std::vector<Tensor> UNet3d::forward_deep(const Tensor& x) {
  HG_CHECK(options.deep_supervision_, "UNet3d::forward_deep: the model was built with deep_supervision off "
                                      "(no ds_heads); build it with UNet3dOptions().deep_supervision(true)");
  std::vector<Tensor> deep;
  std::vector<Tensor> out{run(x, &deep)};
  for (size_t i = deep.size(); i-- > 0;) out.push_back((*ds_heads[i])(deep[i]));  // 1/2 first
  return out;
}

Tensor UNet3d::run(const Tensor& x, std::vector<Tensor>* deep) {
  HG_CHECK(x.defined(), "UNet3d: input is undefined");
  HG_CHECK(x.dim() == 5, "UNet3d: input " << shape_str(x.shape()) << " must be 5-D (N, C, D, H, W)");
  HG_CHECK(x.size(1) == options.in_channels_, "UNet3d: input " << shape_str(x.shape()) << " has " << x.size(1)
                                                              << " channels; the model expects " << options.in_channels_);
  const int64_t div = size_divisor();
  static const char* kAxis[3] = {"D", "H", "W"};
  for (int a = 0; a < 3; ++a)
    HG_CHECK(x.size(2 + a) % div == 0,
             "UNet3d: input " << shape_str(x.shape()) << ": " << kAxis[a] << " = " << x.size(2 + a)
                              << " is not divisible by " << div << " = 2^" << levels() << " (one halving per level); "
                              << "crop or pad D, H and W to multiples of " << div);

  // Children are called through Module::operator(), so a submodule marked set_autocast_fp32 (a norm,
  // a decoder block) runs in FP32 under autocast.
  std::vector<Tensor> skips;
  Tensor h = x;
  for (auto& e : enc) {
    h = (*e)(h);
    skips.push_back(h);
    h = ops::max_pool3d(h, 2, 2);
  }
  h = (*bott)(h);
  for (size_t i = 0; i < up.size(); ++i) {
    h = (*dec[i])(ops::cat({(*up[i])(h), skips[skips.size() - 1 - i]}, 1));
    if (deep && i + 1 < up.size()) deep->push_back(h);
  }
  return (*head)(h);
}

std::string UNet3d::extra_repr() const { return options.describe(); }

}  // namespace halfgrad::nn
