// msd.h - datasets in the Medical Segmentation Decathlon (MSD) layout.
//
//   <root>/dataset.json    {"labels": {"0": "background", "1": ..., ...},
//                           "training": [{"image": "./imagesTr/x.nii.gz", "label": "./labelsTr/x.nii.gz"}, ...]}
//   <root>/imagesTr/*.nii.gz, <root>/labelsTr/*.nii.gz
//
// Paths in dataset.json are relative to <root>. The class count is the size of the `labels` map,
// whose keys must be "0" .. "n-1". Pairs are sorted by their `image` entry, and the validation split
// is every fifth pair in that order (index % 5 == 4), as ../shared/reference/torch_hippo_train.py
// does: for the 200-pair hippocampus set, 160 training and 40 validation pairs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/nifti.h"

namespace halfgrad::io {

/// One training case: full paths (root joined with the dataset.json entry).
struct MsdPair {
  std::string image;
  std::string label;
};

struct MsdDataset {
  std::string root;
  std::string name;                      // dataset.json "name" ("" when absent)
  int64_t num_classes = 0;               // size of the "labels" map, background included
  std::vector<std::string> class_names;  // class_names[c] = labels["c"]
  // The image channels' names: "channel_names" (nnU-Net v2) or else "modality" (MSD), e.g. {"MRI"},
  // in key order "0" .. "n-1"; empty when dataset.json has neither. nnU-Net picks each channel's
  // normalisation by this name ("CT" is clipped and z-scored globally; others per volume).
  std::vector<std::string> channel_names;
  std::vector<MsdPair> pairs;            // sorted by the image entry of dataset.json
};

/// Parses <root>/dataset.json and checks every listed file exists (nothing is read yet).
/// dataset.json is untrusted: it must be at most 64 MiB and nest at most 32 levels (both checked
/// before parsing), and every field is type-checked (core/json_checked.h). Entries must be paths
/// relative to <root> that stay inside it; each file may be listed once, compared after lexical
/// normalisation ("./imagesTr/x.nii.gz" == "imagesTr/x.nii.gz") and by device and inode (a link or
/// a second spelling of the same file). Throws halfgrad::Error naming dataset.json and the field
/// ("field 'training[3].image' must be a string, got integer") when the file is missing, too large,
/// too deep or not valid JSON, when `labels` or `training` is missing or malformed (keys not
/// "0".."n-1", an entry without image/label), when `channel_names` / `modality`, if present, is not
/// an object of names keyed "0".."n-1", when an entry is absolute or leaves <root>, names a
/// file that does not exist, or names a file already listed.
MsdDataset load_msd(const std::string& root);

struct MsdSplit {
  std::vector<MsdPair> train;
  std::vector<MsdPair> val;
};

/// Cross-validation folds: fold k of `folds` validates on pairs[i] with i % folds == k and trains on
/// the others (pairs sorted by image name, as load_msd returns them; order kept). Interleaved rather
/// than nnU-Net's shuffled KFold, so that a fold is a function of the file names alone. Throws
/// halfgrad::Error unless 2 <= folds and 0 <= k < folds.
MsdSplit split_fold(const std::vector<MsdPair>& pairs, int64_t fold, int64_t folds = 5);

/// The reference's split: pairs[i] goes to validation when i % 5 == 4, else to training; order kept
/// (split_fold(pairs, 4)).
/// `pairs` should be in load_msd's order (sorted by image file name).
MsdSplit split_every_fifth(const std::vector<MsdPair>& pairs);

/// One loaded case: image float32 (D, H, W) and label map int64 (D, H, W) with values in
/// [0, num_classes), both with the geometry of their files.
struct MsdCase {
  Volume image;
  Volume label;
};

/// Reads pair.image (read_nifti) and pair.label (read_label_nifti with num_classes: every label an
/// integer in [0, num_classes)) and checks that they share one grid: shape, spacing and affine
/// (check_same_geometry, as nnU-Net's dataset check). Throws halfgrad::Error naming the file(s), the
/// shapes, spacings and affines or the offending value and voxel (i, j, k), and what was expected;
/// read errors as read_nifti.
MsdCase load_msd_case(const MsdPair& pair, int64_t num_classes);

}  // namespace halfgrad::io
