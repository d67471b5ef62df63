// msd.cpp - see msd.h.
#include "io/msd.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_checked.h"

namespace halfgrad::io {
namespace {

namespace fs = std::filesystem;
using json_checked::Field;
using nlohmann::json;

// The limits checked before dataset.json is parsed (msd.h).
constexpr size_t kMaxDatasetJsonBytes = size_t{64} << 20;
constexpr int kMaxDatasetJsonDepth = 32;

// The entry as a path relative to the root, lexically normal ("./imagesTr/x.nii.gz" and
// "imagesTr//x.nii.gz" -> "imagesTr/x.nii.gz"), or an Error when it is absolute or leaves the root.
std::string relative_entry(const Field& f) {
  const std::string entry = f.as_string();
  if (entry.empty()) f.fail("is an empty path; expected a file such as \"./imagesTr/x.nii.gz\"");
  for (unsigned char c : entry)  // a NUL would cut the path short where the OS reads it
    if (c < 0x20) f.fail("is " + json_checked::preview(f.value()) + ", which holds a control character; expected a file path");
  const fs::path rel = fs::path(entry).lexically_normal();
  if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
    f.fail("is the absolute path " + json_checked::preview(f.value()) + "; expected a path relative to the dataset folder");
  if (!rel.empty() && *rel.begin() == "..")
    f.fail("is " + json_checked::preview(f.value()) + ", which leaves the dataset folder; expected a path inside it");
  return rel.string();
}

// The file's identity (device, inode): catches one file listed under two spellings, or through a
// symbolic or hard link, which the lexical comparison cannot see.
bool file_id(const std::string& path, std::pair<dev_t, ino_t>* id) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  *id = {st.st_dev, st.st_ino};
  return true;
}

std::string read_text(const std::string& json_path) {
  return read_regular_file(json_path, kMaxDatasetJsonBytes, "load_msd: " + json_path,
                           "an MSD dataset.json (a few hundred KB)");
}

}  // namespace

MsdDataset load_msd(const std::string& root) {
  const std::string json_path = (fs::path(root) / "dataset.json").string();
  std::error_code ec;
  HG_CHECK(fs::exists(json_path, ec),
           "load_msd: " << json_path << " not found; expected an MSD dataset root holding dataset.json, imagesTr/ and labelsTr/");
  const std::string text = read_text(json_path);
  json_checked::ParseLimits limits;
  limits.max_bytes = kMaxDatasetJsonBytes;
  limits.max_depth = kMaxDatasetJsonDepth;
  const json doc = json_checked::parse(text.data(), text.size(), "load_msd: " + json_path, limits);
  const Field ds(doc, "load_msd: " + json_path);
  ds.require_object("an object (an MSD dataset.json)");

  MsdDataset out;
  out.root = root;
  if (ds.has("name", /*null_is_absent=*/true)) out.name = ds["name"].as_string();

  const Field labels = ds["labels"];
  labels.require_object("an object {\"0\": \"background\", ...}");
  if (labels.size() == 0) labels.fail("is empty; expected {\"0\": \"background\", ...}");
  out.num_classes = static_cast<int64_t>(labels.size());
  for (int64_t c = 0; c < out.num_classes; ++c) {
    const std::string key = std::to_string(c);
    if (!labels.has(key))
      labels.fail("has " + std::to_string(out.num_classes) + " entries but no key \"" + key + "\"; expected keys \"0\" .. \"" +
                  std::to_string(out.num_classes - 1) + "\"");
    const std::string name = labels[key].as_string();
    // Class names become CSV column names (metrics.csv's dice_<name>) and plot titles: a control
    // character, a comma or a double quote would split or end them (a newline in a gnuplot string
    // starts a command). MSD's names are words ("Anterior", "left kidney").
    const auto bad = std::find_if(name.begin(), name.end(), [](char ch) {
      const auto u = static_cast<unsigned char>(ch);
      return u < 0x20 || u == 0x7f || ch == ',' || ch == '"';
    });
    if (name.empty() || name.size() > 64 || bad != name.end())
      labels[key].fail("is not a class name: expected 1 to 64 characters without control characters, ',' or '\"'");
    out.class_names.push_back(name);
  }

  // The channels' names, as the labels' (optional: MSD's "modality", nnU-Net v2's "channel_names").
  const char* channels_key = ds.has("channel_names", true) ? "channel_names" : ds.has("modality", true) ? "modality" : nullptr;
  if (channels_key != nullptr) {
    const Field channels = ds[channels_key];
    channels.require_object("an object {\"0\": \"MRI\", ...}");
    for (size_t c = 0; c < channels.size(); ++c) {
      const std::string key = std::to_string(c);
      if (!channels.has(key))
        channels.fail("has " + std::to_string(channels.size()) + " entries but no key \"" + key + "\"; expected keys \"0\" .. \"" +
                      std::to_string(channels.size() - 1) + "\"");
      const std::string name = channels[key].as_string();
      const auto bad = std::find_if(name.begin(), name.end(), [](char ch) {
        const auto u = static_cast<unsigned char>(ch);
        return u < 0x20 || u == 0x7f || ch == '"';
      });
      if (name.empty() || name.size() > 64 || bad != name.end())
        channels[key].fail("is not a channel name: expected 1 to 64 characters without control characters or '\"'");
      out.channel_names.push_back(name);
    }
  }

  const Field training = ds["training"];
  training.require_array("an array [{\"image\": ..., \"label\": ...}, ...]");
  std::vector<std::pair<std::string, MsdPair>> keyed;  // (image entry as written, resolved pair)
  // Each file once, by normalised relative path and by (device, inode): a pair listed twice, in
  // any spelling, could land in both the training and the validation split.
  std::map<std::string, std::string> seen_path;            // normalised path -> the field that listed it
  std::map<std::pair<dev_t, ino_t>, std::string> seen_id;  // file identity -> the field that listed it
  for (size_t i = 0; i < training.size(); ++i) {
    const Field entry = training[i];
    entry.require_object("an object {\"image\": \"./imagesTr/...\", \"label\": \"./labelsTr/...\"}");
    std::string resolved[2];
    int k = 0;
    for (const char* key : {"image", "label"}) {
      const Field f = entry[key];
      const std::string rel = relative_entry(f);
      const std::string full = (fs::path(root) / rel).lexically_normal().string();
      auto [it, fresh] = seen_path.emplace(rel, f.path());
      if (!fresh)
        f.fail("names " + rel + ", already listed as '" + it->second +
               "'; expected each file once (a duplicate could land in both the training and the validation split)");
      std::pair<dev_t, ino_t> id;
      if (!file_id(full, &id))
        f.fail("names " + full + ", which is not an existing regular file; expected every listed file to exist");
      auto [jt, fresh_id] = seen_id.emplace(id, f.path());
      if (!fresh_id)
        f.fail("names " + full + ", the same file (same device and inode) as '" + jt->second +
               "'; expected each file once (a duplicate could land in both the training and the validation split)");
      resolved[k++] = full;
    }
    keyed.push_back({entry["image"].as_string(), MsdPair{resolved[0], resolved[1]}});
  }
  // The reference sorts by the image entry string (all entries share "./imagesTr/", so this is the
  // file-name order).
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [entry, pair] : keyed) out.pairs.push_back(std::move(pair));
  return out;
}

MsdSplit split_fold(const std::vector<MsdPair>& pairs, int64_t fold, int64_t folds) {
  HG_CHECK(folds >= 2 && fold >= 0 && fold < folds,
           "msd: fold " << fold << " of " << folds << "; expected 0 <= fold < folds and folds >= 2");
  MsdSplit split;
  for (size_t i = 0; i < pairs.size(); ++i)
    (static_cast<int64_t>(i) % folds == fold ? split.val : split.train).push_back(pairs[i]);
  return split;
}

MsdSplit split_every_fifth(const std::vector<MsdPair>& pairs) {
  return split_fold(pairs, 4, 5);
}

MsdCase load_msd_case(const MsdPair& pair, int64_t num_classes) {
  HG_CHECK(num_classes >= 1, "load_msd_case: num_classes is " << num_classes << "; expected >= 1");
  MsdCase c{read_nifti(pair.image), read_label_nifti(pair.label, num_classes)};
  check_same_geometry(c.image, pair.image, c.label, pair.label, "load_msd_case");
  return c;
}

}  // namespace halfgrad::io
