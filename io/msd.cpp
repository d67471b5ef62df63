// msd.cpp - see msd.h.
#include "io/msd.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace halfgrad::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// "./imagesTr/x.nii.gz" -> "<root>/imagesTr/x.nii.gz"
std::string resolve(const std::string& root, const std::string& entry) {
  return (fs::path(root) / fs::path(entry)).lexically_normal().string();
}

// The string member `key` of training entry `index`, or an Error naming dataset.json.
std::string entry_path(const json& entry, const char* key, size_t index, const std::string& json_path) {
  HG_CHECK(entry.is_object() && entry.contains(key) && entry[key].is_string(),
           "load_msd: " << json_path << ": training[" << index << "] has no string \"" << key
                        << "\"; expected {\"image\": \"./imagesTr/...\", \"label\": \"./labelsTr/...\"}");
  return entry[key].get<std::string>();
}

}  // namespace

MsdDataset load_msd(const std::string& root) {
  const std::string json_path = (fs::path(root) / "dataset.json").string();
  std::error_code ec;
  HG_CHECK(fs::is_regular_file(json_path, ec),
           "load_msd: " << json_path << " not found; expected an MSD dataset root holding dataset.json, imagesTr/ and labelsTr/");
  std::ifstream in(json_path);
  HG_CHECK(in.good(), "load_msd: " << json_path << ": cannot open for reading");
  json ds;
  try {
    in >> ds;
  } catch (const json::exception& e) {
    HG_FAIL("load_msd: " << json_path << ": not valid JSON (" << e.what() << "); expected an MSD dataset.json");
  }
  HG_CHECK(ds.is_object(), "load_msd: " << json_path << ": top level is not a JSON object; expected an MSD dataset.json");

  MsdDataset out;
  out.root = root;
  if (ds.contains("name") && ds["name"].is_string()) out.name = ds["name"].get<std::string>();

  HG_CHECK(ds.contains("labels") && ds["labels"].is_object() && !ds["labels"].empty(),
           "load_msd: " << json_path << ": no \"labels\" map; expected {\"labels\": {\"0\": \"background\", ...}}");
  const json& labels = ds["labels"];
  out.num_classes = static_cast<int64_t>(labels.size());
  for (int64_t c = 0; c < out.num_classes; ++c) {
    const std::string key = std::to_string(c);
    HG_CHECK(labels.contains(key) && labels[key].is_string(),
             "load_msd: " << json_path << ": \"labels\" has " << out.num_classes << " entries but no string entry \""
                          << key << "\"; expected keys \"0\" .. \"" << out.num_classes - 1 << "\"");
    out.class_names.push_back(labels[key].get<std::string>());
  }

  HG_CHECK(ds.contains("training") && ds["training"].is_array(),
           "load_msd: " << json_path << ": no \"training\" list; expected {\"training\": [{\"image\": ..., \"label\": ...}, ...]}");
  std::vector<std::pair<std::string, MsdPair>> keyed;  // (image entry as written, resolved pair)
  const json& training = ds["training"];
  for (size_t i = 0; i < training.size(); ++i) {
    const std::string image = entry_path(training[i], "image", i, json_path);
    const std::string label = entry_path(training[i], "label", i, json_path);
    keyed.push_back({image, MsdPair{resolve(root, image), resolve(root, label)}});
  }
  // The reference sorts by the image entry string (all entries share "./imagesTr/", so this is the
  // file-name order).
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < keyed.size(); ++i)
    HG_CHECK(keyed[i].second.image != keyed[i - 1].second.image,
             "load_msd: " << json_path << ": image " << keyed[i].first
                          << " is listed twice in \"training\"; expected each pair once (a duplicate could land in "
                             "both the training and the validation split)");
  for (auto& [entry, pair] : keyed) {
    for (const std::string* p : {&pair.image, &pair.label})
      HG_CHECK(fs::is_regular_file(*p, ec), "load_msd: " << *p << " (listed in " << json_path
                                                         << ") not found; expected every listed file to exist");
    out.pairs.push_back(std::move(pair));
  }
  return out;
}

MsdSplit split_every_fifth(const std::vector<MsdPair>& pairs) {
  MsdSplit split;
  for (size_t i = 0; i < pairs.size(); ++i) (i % 5 == 4 ? split.val : split.train).push_back(pairs[i]);
  return split;
}

MsdCase load_msd_case(const MsdPair& pair, int64_t num_classes) {
  MsdCase c{read_nifti(pair.image), read_label_nifti(pair.label)};
  const Shape& is = c.image.data.shape();
  const Shape& ls = c.label.data.shape();
  HG_CHECK(is == ls, "load_msd_case: label " << pair.label << " has shape (z, y, x) " << shape_str(ls) << " but image "
                                             << pair.image << " has " << shape_str(is) << "; expected equal shapes");
  const int64_t* lab = c.label.data.data<int64_t>();
  for (int64_t i = 0; i < c.label.data.numel(); ++i) {
    if (lab[i] >= 0 && lab[i] < num_classes) continue;
    const int64_t x = i % ls[2], y = (i / ls[2]) % ls[1], z = i / (ls[2] * ls[1]);
    HG_FAIL("load_msd_case: label " << pair.label << " holds value " << lab[i] << " at voxel (z, y, x) = (" << z << ", "
                                    << y << ", " << x << "); expected classes in [0, " << num_classes << ")");
  }
  return c;
}

}  // namespace halfgrad::io
