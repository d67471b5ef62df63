// trained_model.cpp - see trained_model.h.
#include "examples/05_unet3d/trained_model.h"

#include "amp/autocast.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include <filesystem>
#include <map>

#include "core/json_checked.h"
#include "core/safetensors.h"
#include "nn/checkpoint.h"

namespace unet3d_app {

using namespace halfgrad;

Placement make_placement(const std::string& device, const std::string& format, const char* cmd) {
  Placement p;
  if (device == "cuda") {
    HG_CHECK(cuda::is_available(), "halfgrad-unet3d " << cmd << ": --device cuda, but " << cuda::device_description()
                                                      << "; run with --device cpu");
    p.device = Device::CUDA;
    p.format = format == "ncdhw" ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast3d;  // "" = ndhwc
  } else {
    HG_CHECK(device == "cpu", "halfgrad-unet3d " << cmd << ": --device must be cpu or cuda, got '" << device << "'");
  }
  return p;
}

void apply_fp32_lists(amp::OptLevel level, const std::vector<std::string>& ops_fp32,
                      const std::vector<std::string>& modules_fp32, nn::Module* model) {
  if (ops_fp32.empty() && modules_fp32.empty()) return;
  HG_CHECK(level == amp::OptLevel::O1,
           "halfgrad-unet3d: --fp32-op and --fp32-module choose what autocast keeps in FP32, so they need "
           "--opt-level O1 (or --amp); at " << amp::opt_level_name(level) << " every op runs in its weights' dtype");
  for (const std::string& name : ops_fp32) amp::set_op_fp32(amp::op_kind_from_name(name), true);
  if (model)
    for (const std::string& prefix : modules_fp32) amp::mark_fp32_modules(*model, prefix);
}


namespace {

// UNet3dOptions of a state_dict written by PyTorch's reference UNet3D (see load_trained_model).
nn::UNet3dOptions infer_options(const safetensors::Header& h, const std::string& where, std::string* said) {
  std::map<std::string, const safetensors::Entry*> by_name;
  for (const auto& e : h.entries) by_name[e.name] = &e;
  auto shape_of = [&](const std::string& name, size_t dims) -> const Shape& {
    auto it = by_name.find(name);
    HG_CHECK(it != by_name.end(), where << ": no halfgrad metadata and no tensor '" << name
                                        << "'; expected halfgrad's model.safetensors or a PyTorch UNet3D state_dict");
    HG_CHECK(it->second->shape.size() == dims, where << ": tensor '" << name << "' has shape " << shape_str(it->second->shape)
                                                     << "; a UNet3D's has " << dims << " dimensions");
    return it->second->shape;
  };
  nn::UNet3dOptions o;
  std::vector<int64_t> channels;
  for (size_t l = 0; by_name.count("enc." + std::to_string(l) + ".0.weight"); ++l)
    channels.push_back(shape_of("enc." + std::to_string(l) + ".0.weight", 5)[0]);
  HG_CHECK(!channels.empty(), where << ": no halfgrad metadata and no tensor 'enc.0.0.weight'; expected halfgrad's "
                                       "model.safetensors or a PyTorch UNet3D state_dict");
  o.channels(channels);
  o.in_channels(shape_of("enc.0.0.weight", 5)[1]);
  o.bottleneck(shape_of("bott.0.weight", 5)[0]);
  o.num_classes(shape_of("head.weight", 5)[0]);
  o.norm(by_name.count("enc.0.1.running_mean") ? nn::NormKind::Batch
         : by_name.count("enc.0.0.bias")        ? nn::NormKind::None
                                                : nn::NormKind::Instance);
  // The kernels UNet3d builds: 3x3x3 block convs, 2x2x2 up-convolutions, a 1x1x1 head. A state_dict
  // with per-axis kernels (nnU-Net's (1, 3, 3) for anisotropic plans) is another architecture, which
  // UNet3dOptions cannot describe: say so here rather than as a shape mismatch when loading.
  for (const auto& e : h.entries) {
    if (e.shape.size() != 5) continue;
    const int64_t k = e.name.rfind("up.", 0) == 0 ? 2 : e.name.rfind("head.", 0) == 0 ? 1 : 3;
    HG_CHECK(e.shape[2] == k && e.shape[3] == k && e.shape[4] == k,
             where << ": tensor '" << e.name << "' has shape " << shape_str(e.shape) << "; halfgrad's UNet3d has "
                   << k << "x" << k << "x" << k << " kernels there (per-axis kernels are not a UNet3dOptions choice)");
  }
  for (const auto& e : h.entries)
    HG_CHECK(e.dtype == kFloat32 || e.name.find("num_batches_tracked") != std::string::npos,
             where << ": tensor '" << e.name << "' is " << dtype_name(e.dtype)
                   << "; a state_dict without halfgrad metadata is read as an FP32 (O0) model");
  *said = "no halfgrad metadata (a PyTorch state_dict?): inferred UNet3d " + o.describe() +
          ", recipe 'reference', volume 48x64x48, O0 (FP32 weights)";
  return o;
}

}  // namespace

TrainedModel load_trained_model(const std::string& path_or_dir, const Placement& where, const char* cmd) {
  const std::string path = std::filesystem::is_directory(path_or_dir) ? path_or_dir + "/model.safetensors" : path_or_dir;
  const safetensors::Header header = safetensors::read_header(path);
  if (!header.metadata.count(nn::kMetadataKey)) {
    TrainedModel t;
    t.recipe = recipe_by_name("reference");
    t.recipe.model = infer_options(header, std::string("halfgrad-unet3d ") + cmd + ": " + path, &t.inferred);
    t.recipe.volume_shape = {48, 64, 48};
    t.model = std::make_shared<nn::UNet3d>(t.recipe.model);
    t.level = amp::OptLevel::O0;
    t.mp = amp::apply_opt_level_to_model(t.level, *t.model);
    nn::load_checkpoint(path, *t.model);
    t.model->to(where.device);
    t.model->eval();
    return t;
  }
  nlohmann::json meta = nn::read_checkpoint_metadata(path, header.metadata);
  for (const char* key : {"recipe", "model", "volume_shape"})
    HG_CHECK(meta.is_object() && meta.contains(key),
             "halfgrad-unet3d " << cmd << ": " << path << " has no \"" << key
                                << "\" in its metadata; expected a checkpoint written by halfgrad-unet3d train");
  // The metadata is untrusted: every field is type-checked, and an error names the file and field.
  const json_checked::Field m(meta, std::string("halfgrad-unet3d ") + cmd + ": " + path);
  TrainedModel t;
  t.recipe = recipe_by_name(m["recipe"].as_string());
  t.recipe.model = nn::UNet3dOptions::from_json(m["model"]);
  const json_checked::Field shape = m["volume_shape"];
  shape.require_array("an array [D, H, W]");
  if (shape.size() != 3) shape.fail("has " + std::to_string(shape.size()) + " elements; expected [D, H, W]");
  for (size_t d = 0; d < 3; ++d) t.recipe.volume_shape[d] = shape[d].as_int(1, 4096);
  if (m.has("class_names")) t.class_names = m["class_names"].as_string_list();
  t.model = std::make_shared<nn::UNet3d>(t.recipe.model);
  // The level decides the parameters' dtypes, which the checkpoint must match (older checkpoints
  // have only "amp": O1 or O0).
  t.level = m.has("opt_level") ? amp::opt_level_from_name(m["opt_level"].as_string())
            : (m.has("amp") && m["amp"].as_bool()) ? amp::OptLevel::O1
                                                   : amp::OptLevel::O0;
  t.mp = amp::apply_opt_level_to_model(t.level, *t.model);
  // Autocast's lower dtype (train --amp-dtype; checkpoints from before it are FP16).
  const std::string amp_dtype = m.has("amp_dtype") ? m["amp_dtype"].as_string() : "fp16";
  if (amp_dtype != "fp16" && amp_dtype != "bf16") m["amp_dtype"].fail("is \"" + amp_dtype.substr(0, 24) + "\"; expected \"fp16\" or \"bf16\"");
  if (amp_dtype == "bf16") t.mp.autocast_dtype = kBFloat16;
  nn::load_checkpoint(path, *t.model);
  t.model->to(where.device);
  apply_fp32_lists(t.level, m.has("fp32_ops") ? m["fp32_ops"].as_string_list() : std::vector<std::string>{},
                   m.has("fp32_modules") ? m["fp32_modules"].as_string_list() : std::vector<std::string>{},
                   t.model.get());
  t.model->eval();
  return t;
}

}  // namespace unet3d_app
