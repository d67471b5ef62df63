#include "nn/unet3d.h"

#include <sstream>

#include "core/error.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/instance_norm.h"
#include "ops/activation/activation.h"
#include "ops/pool/max_pool3d.h"

namespace halfgrad::nn {

const char* norm_kind_name(NormKind n) {
  switch (n) {
    case NormKind::Batch: return "batch";
    case NormKind::Instance: return "instance";
    case NormKind::None: return "none";
  }
  return "?";
}

// (Conv3d 3^3 pad 1 -> norm -> ReLU) x 2. The conv has no bias when a norm follows (the norm's shift
// would cancel it), as in the reference; with no norm it keeps one.
static std::shared_ptr<Sequential> conv_block(int64_t ci, int64_t co, NormKind norm, Generator& gen) {
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
}

Tensor UNet3d::forward(const Tensor& x) {
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
  for (size_t i = 0; i < up.size(); ++i)
    h = (*dec[i])(ops::cat({(*up[i])(h), skips[skips.size() - 1 - i]}, 1));
  return (*head)(h);
}

std::string UNet3d::extra_repr() const { return options.describe(); }

// ---- UNet3dOptions as JSON --------------------------------------------------------------------------

nlohmann::json UNet3dOptions::to_json() const {
  return {{"in_channels", in_channels_}, {"num_classes", num_classes_}, {"channels", channels_},
          {"bottleneck", bottleneck_},   {"norm", norm_kind_name(norm_)}};
}

UNet3dOptions UNet3dOptions::from_json(const nlohmann::json& j) {
  HG_CHECK(j.is_object(), "UNet3dOptions::from_json: expected an object, got " << j.dump());
  auto get_int = [&](const char* key) {
    HG_CHECK(j.contains(key) && j.at(key).is_number_integer(),
             "UNet3dOptions::from_json: key '" << key << "' is missing or not an integer in " << j.dump());
    return j.at(key).get<int64_t>();
  };
  UNet3dOptions o;
  o.in_channels(get_int("in_channels")).num_classes(get_int("num_classes")).bottleneck(get_int("bottleneck"));
  HG_CHECK(j.contains("channels") && j.at("channels").is_array(),
           "UNet3dOptions::from_json: key 'channels' is missing or not an array in " << j.dump());
  std::vector<int64_t> ch;
  for (const auto& c : j.at("channels")) {
    HG_CHECK(c.is_number_integer(), "UNet3dOptions::from_json: 'channels' holds a non-integer in " << j.dump());
    ch.push_back(c.get<int64_t>());
  }
  o.channels(ch);
  HG_CHECK(j.contains("norm") && j.at("norm").is_string(),
           "UNet3dOptions::from_json: key 'norm' is missing or not a string in " << j.dump());
  const std::string norm = j.at("norm").get<std::string>();
  bool found = false;
  for (NormKind n : {NormKind::Batch, NormKind::Instance, NormKind::None})
    if (norm == norm_kind_name(n)) { o.norm(n); found = true; }
  HG_CHECK(found, "UNet3dOptions::from_json: norm '" << norm << "' is not batch, instance or none");
  return o;
}

std::string UNet3dOptions::describe() const {
  std::ostringstream os;
  os << "channels {";
  for (size_t i = 0; i < channels_.size(); ++i) os << (i ? ", " : "") << channels_[i];
  os << "}, bottleneck " << bottleneck_ << ", norm " << norm_kind_name(norm_) << ", in " << in_channels_
     << ", classes " << num_classes_;
  return os.str();
}

}  // namespace halfgrad::nn
