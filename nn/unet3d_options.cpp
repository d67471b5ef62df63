// unet3d_options.cpp - UNet3dOptions as JSON and as text. Apart from nn/unet3d.cpp because it needs
// no ops: the checkpoint fuzzer (fuzz/checkpoint_fuzz.cpp) links it without the kernels.
#include <sstream>

#include "core/error.h"
#include "nn/unet3d.h"

namespace halfgrad::nn {

const char* norm_kind_name(NormKind n) {
  switch (n) {
    case NormKind::Batch: return "batch";
    case NormKind::Instance: return "instance";
    case NormKind::None: return "none";
  }
  return "?";
}

nlohmann::json UNet3dOptions::to_json() const {
  return {{"in_channels", in_channels_}, {"num_classes", num_classes_}, {"channels", channels_},
          {"bottleneck", bottleneck_},   {"norm", norm_kind_name(norm_)}};
}

UNet3dOptions UNet3dOptions::from_json(const nlohmann::json& j) {
  return from_json(json_checked::Field(j, "UNet3dOptions::from_json"));
}

UNet3dOptions UNet3dOptions::from_json(const json_checked::Field& f) {
  f.require_object();
  UNet3dOptions o;
  o.in_channels(f["in_channels"].as_int(1, kMaxJsonWidth))
      .num_classes(f["num_classes"].as_int(1, kMaxJsonWidth))
      .bottleneck(f["bottleneck"].as_int(1, kMaxJsonWidth));
  const json_checked::Field channels = f["channels"];
  channels.require_array("an array of level widths");
  if (channels.size() < 1 || channels.size() > kMaxJsonLevels)
    channels.fail("has " + std::to_string(channels.size()) + " levels; expected 1 to " + std::to_string(kMaxJsonLevels));
  std::vector<int64_t> ch;
  for (size_t i = 0; i < channels.size(); ++i) ch.push_back(channels[i].as_int(1, kMaxJsonWidth));
  o.channels(ch);
  const std::string norm = f["norm"].as_string();
  bool found = false;
  for (NormKind n : {NormKind::Batch, NormKind::Instance, NormKind::None})
    if (norm == norm_kind_name(n)) { o.norm(n); found = true; }
  if (!found) f["norm"].fail("is " + json_checked::preview(f["norm"].value()) + "; expected \"batch\", \"instance\" or \"none\"");
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
