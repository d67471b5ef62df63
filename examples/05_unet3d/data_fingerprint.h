// data_fingerprint.h - what a run was trained on, so that `train --resume` can tell when the data
// under the same name is not the same data any more (another folder of that name, an image
// replaced, pairs added): the data folder's absolute path, and for every file the run read (the
// MSD dataset.json and every image and label it lists; the mricron-data templates) its size and
// XXH3-64 (core/checksum.h).
//
// Stored in training_state.safetensors' train_meta as
//   "data_fingerprint": {"root": "/abs/dir", "files": [{"path": "dataset.json", "bytes": 2310,
//                        "xxh3": "9f0c..."}, ...]}      (paths relative to root, sorted)
// A resume compares the fingerprint of the data it loads with the saved one and refuses any
// difference, naming it, unless --allow-data-change (the run then goes on, says what changed, and
// saves the new fingerprint). A run saved before fingerprints existed has none: the resume says
// so once and goes on unchecked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_checked.h"

namespace unet3d_app {

struct FilePrint {
  std::string path;  // relative to DataFingerprint::root
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

struct DataFingerprint {
  std::string root;              // absolute, lexically normal
  std::vector<FilePrint> files;  // sorted by path

  nlohmann::json to_json() const;
  /// The inverse; throws halfgrad::Error naming the file and field (json_checked::Field).
  static DataFingerprint from_json(const halfgrad::json_checked::Field& f);
};

/// Reads every file of `files` (paths relative to `root`) in full and hashes it. Throws
/// halfgrad::Error naming the file when one cannot be read (core/file_io.h: regular files only).
DataFingerprint fingerprint_data(const std::string& root, const std::vector<std::string>& files);

/// What differs from `saved` to `now`, one line each: the folder ("the data folder was /a/d10, now
/// /b/d10"), files added, removed or changed (with sizes); empty when they agree. The root alone
/// differing (a moved folder with the same files) is listed too but does not count as a change of
/// data: see data_changed.
std::vector<std::string> data_differences(const DataFingerprint& saved, const DataFingerprint& now);
/// Whether any file was added, removed or changed (the root may differ).
bool data_changed(const DataFingerprint& saved, const DataFingerprint& now);

}  // namespace unet3d_app
