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
          {"bottleneck", bottleneck_},   {"norm", norm_kind_name(norm_)},       {"deep_supervision", deep_supervision_}};
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
  // Optional: checkpoints written before deep supervision existed have no such key.
  o.deep_supervision(f.has("deep_supervision") && f["deep_supervision"].as_bool());
  return o;
}

std::string UNet3dOptions::describe() const {
  std::ostringstream os;
  os << "channels {";
  for (size_t i = 0; i < channels_.size(); ++i) os << (i ? ", " : "") << channels_[i];
  os << "}, bottleneck " << bottleneck_ << ", norm " << norm_kind_name(norm_) << ", in " << in_channels_
     << ", classes " << num_classes_;
  if (deep_supervision_) os << ", deep supervision";
  return os.str();
}

UNet3dOptions UNet3dOptions::infer_from_shapes(const std::map<std::string, Shape>& shapes, const std::string& where) {
  auto shape_of = [&](const std::string& name, size_t dims) -> const Shape& {
    auto it = shapes.find(name);
    HG_CHECK(it != shapes.end(), where << ": no tensor '" << name << "'; expected a UNet3d state_dict");
    HG_CHECK(it->second.size() == dims, where << ": tensor '" << name << "' has shape " << shape_str(it->second)
                                              << "; a UNet3d's has " << dims << " dimensions");
    return it->second;
  };
  UNet3dOptions o;
  std::vector<int64_t> channels;
  for (size_t l = 0; shapes.count("enc." + std::to_string(l) + ".0.weight"); ++l)
    channels.push_back(shape_of("enc." + std::to_string(l) + ".0.weight", 5)[0]);
  HG_CHECK(!channels.empty(), where << ": no tensor 'enc.0.0.weight'; expected a UNet3d state_dict");
  o.channels(channels);
  o.in_channels(shape_of("enc.0.0.weight", 5)[1]);
  o.bottleneck(shape_of("bott.0.weight", 5)[0]);
  o.num_classes(shape_of("head.weight", 5)[0]);
  o.norm(shapes.count("enc.0.1.running_mean") ? NormKind::Batch
         : shapes.count("enc.0.0.bias")        ? NormKind::None
                                               : NormKind::Instance);
  // ds_heads.{i} for i = 0 .. levels - 2 (deepest first), all or none.
  size_t ds = 0;
  while (shapes.count("ds_heads." + std::to_string(ds) + ".weight")) ++ds;
  HG_CHECK(ds == 0 || ds + 1 == channels.size(),
           where << ": the file has " << ds << " deep-supervision heads (ds_heads.0 .. ds_heads." << ds - 1
                 << "); a UNet3d of " << channels.size() << " levels has " << channels.size() - 1);
  o.deep_supervision(ds > 0);
  // The kernels UNet3d builds: 3x3x3 block convs, 2x2x2 up-convolutions, a 1x1x1 head. A state_dict
  // with per-axis kernels (nnU-Net's (1, 3, 3) for anisotropic plans) is another architecture, which
  // UNet3dOptions cannot describe: say so here rather than as a shape mismatch when loading.
  for (const auto& [name, shape] : shapes) {
    if (shape.size() != 5) continue;
    const bool is_head = name.rfind("head.", 0) == 0 || name.rfind("ds_heads.", 0) == 0;
    const int64_t k = name.rfind("up.", 0) == 0 ? 2 : is_head ? 1 : 3;
    HG_CHECK(shape[2] == k && shape[3] == k && shape[4] == k,
             where << ": tensor '" << name << "' has shape " << shape_str(shape) << "; halfgrad's UNet3d has " << k
                   << "x" << k << "x" << k << " kernels there (per-axis kernels are not a UNet3dOptions choice)");
  }
  return o;
}

void UNet3dOptions::check_matches_shapes(const std::map<std::string, Shape>& shapes, const std::string& where) const {
  const UNet3dOptions found = infer_from_shapes(shapes, where);
  HG_CHECK(found == *this, where << ": the metadata describes a UNet3d with " << describe()
                                 << ", but the file's tensors are those of " << found.describe()
                                 << "; expected them to agree (a corrupt or edited file)");
}

}  // namespace halfgrad::nn
