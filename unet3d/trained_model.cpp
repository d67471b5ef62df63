// trained_model.cpp - see trained_model.h.
#include "unet3d/trained_model.h"

#include "autocast/autocast.h"
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

namespace {

std::map<std::string, Shape> shapes_of(const safetensors::Header& h) {
  std::map<std::string, Shape> shapes;
  for (const auto& e : h.entries) shapes[e.name] = e.shape;
  return shapes;
}

std::string unverified_note(const safetensors::Header& h, const std::string& path) {
  return h.has_checksums ? std::string()
                         : path + " carries no halfgrad checksum (written by PyTorch, or by halfgrad before "
                                  "2026-12-04): its tensors are checked for NaN/inf but their bytes are not verified";
}

}  // namespace

TrainedModel load_trained_model(const std::string& path_or_dir, const Placement& where, const char* cmd) {
  const std::string path = std::filesystem::is_directory(path_or_dir) ? path_or_dir + "/model.safetensors" : path_or_dir;
  const std::string fn = std::string("halfgrad-unet3d ") + cmd + ": " + path;
  const safetensors::Header header = safetensors::read_header(path);
  TrainedModel t;
  t.unverified = unverified_note(header, path);
  if (!header.metadata.count(nn::kMetadataKey)) {
    t.recipe = recipe_by_name("reference");
    t.recipe.model = nn::UNet3dOptions::infer_from_shapes(
        shapes_of(header), fn + ": no halfgrad metadata (expected halfgrad's model.safetensors or a PyTorch UNet3D state_dict)");
    for (const auto& e : header.entries)
      HG_CHECK(e.dtype == kFloat32 || e.name.find("num_batches_tracked") != std::string::npos,
               fn << ": tensor '" << e.name << "' is " << dtype_name(e.dtype)
                  << "; a state_dict without halfgrad metadata is read as an FP32 (O0) model");
    t.inferred = "no halfgrad metadata (a PyTorch state_dict?): inferred UNet3d " + t.recipe.model.describe() +
                 ", recipe 'reference', volume 48x64x48, O0 (FP32 weights)";
    t.recipe.volume_shape = {48, 64, 48};
  } else {
    nlohmann::json meta = nn::read_checkpoint_metadata(path, header.metadata);
    for (const char* key : {"recipe", "model", "volume_shape"})
      HG_CHECK(meta.is_object() && meta.contains(key),
               fn << " has no \"" << key << "\" in its metadata; expected a checkpoint written by halfgrad-unet3d train");
    // The metadata is untrusted: every field is type-checked, and an error names the file and field.
    const json_checked::Field m(meta, fn);
    t.recipe = recipe_by_name(m["recipe"].as_string(), fn + ": field 'recipe'");
    t.recipe.model = nn::UNet3dOptions::from_json(m["model"]);
    t.recipe.model.check_matches_shapes(shapes_of(header), fn);  // before anything is allocated
    const json_checked::Field shape = m["volume_shape"];
    shape.require_array("an array [D, H, W]");
    if (shape.size() != 3) shape.fail("has " + std::to_string(shape.size()) + " elements; expected [D, H, W]");
    for (size_t d = 0; d < 3; ++d) t.recipe.volume_shape[d] = shape[d].as_int(1, 4096);
    if (m.has("class_names")) {
      t.class_names = m["class_names"].as_string_list();
      if (static_cast<int64_t>(t.class_names.size()) != t.recipe.model.num_classes())
        m["class_names"].fail("has " + std::to_string(t.class_names.size()) + " names but the model has " +
                              std::to_string(t.recipe.model.num_classes()) + " classes; expected one name per class");
    }
    if (m.has("spacing_mm")) {
      const json_checked::Field sp = m["spacing_mm"];
      sp.require_array("an array [Z, Y, X] of millimetres");
      if (sp.size() != 3) sp.fail("has " + std::to_string(sp.size()) + " elements; expected [Z, Y, X] in mm");
      Spacing mm{};
      for (size_t d = 0; d < 3; ++d) mm[d] = sp[d].as_number();
      check_spacing(mm, fn + ": field 'spacing_mm'");
      t.spacing_mm = mm;
    }
    t.plan = amp::PrecisionPlan::from_json(m);  // the parameters' dtypes, which the file must match
  }
  t.model = std::make_shared<nn::UNet3d>(t.recipe.model);
  t.mp = t.plan.apply_to_model(*t.model);
  nn::load_checkpoint(path, *t.model);
  t.model->to(where.device);
  t.model->eval();
  return t;
}

}  // namespace unet3d_app
