// predict.h - `halfgrad-unet3d predict`: a trained U-Net segments NIfTI volumes it never saw.
//
//   halfgrad-unet3d predict --checkpoint CK [--checkpoint CK2 ...] --input FILE|DIR --output FILE|DIR [--device cpu|cuda]
//                           [--overlap F] [--tta] [--probabilities FILE|DIR] [--labels DIR] [--overlay DIR]
//                           [--overwrite]
//
// Per volume: read_nifti -> io::zscore over the whole volume (as training: data.cpp) -> sliding-window
// inference (sliding_window.h: zero padding to multiples of 2^levels, the recipe's volume_shape as
// window, Gaussian-blended logits, optional mirroring TTA) -> argmax -> a uint8 label map whose
// header is the input's byte for byte in every geometry field (io::write_label_nifti), so it
// overlays the scan in ITK-SNAP or 3D Slicer. --probabilities adds the float32 softmax per class
// as a 4-D file (dim[4] = classes). --labels DIR reads the reference label map of the same file
// name from DIR (an MSD labelsTr/) and prints each volume's Dice and, at the end, one JSON line
// {"volumes", "dice" (per foreground class, mean over volumes), "mean_dice"}. --overlay DIR writes
// DIR/<name less .nii[.gz]>.png per volume (overlay.h), with the reference label when --labels is given.
//
// Ensembles: --checkpoint given several times (the run folders of the 5 folds of `train --fold K`,
// say) predicts with each model (its own recipe's window and, with --tta, flip axes), averages their
// softmax probabilities voxel by voxel and takes the argmax of the mean, as nnU-Net ensembles its folds;
// --probabilities then writes the mean. The models must take the same input channels and give the same
// classes (names too, where both files have them). With one checkpoint the label map is the argmax of
// the logits, as before.
// Files: a folder in takes every *.nii / *.nii.gz in it (sorted by name; an MSD imagesTs/ works as
// is) and writes the same file names into the --output folder (created). One file in: --output is a
// .nii/.nii.gz path or an existing folder. Every file is written atomically (temp file + rename);
// existing outputs are refused before anything runs, unless --overwrite. A volume that fails (not
// NIfTI, 4-D with more than one volume, a channel count the model cannot take, too large for the
// memory, unwritable output, a network output holding NaN/inf, a --labels map on another grid) is
// reported with its file name and the others go on; the exit status is then 1, after the list of
// failures. A failed volume's outputs are not written (its output is checked finite, and its
// reference label read and checked, before the first file); nothing already written is removed.
#pragma once
#include <string>
#include <vector>

namespace unet3d_app {

/// --overlap's largest value: the tile count grows as 1 / (1 - overlap)^3, so 0.9 is about 1000
/// times the tiles of overlap 0 (nnU-Net's default is 0.5); 0.99 would be a million times (hours).
constexpr double kMaxOverlap = 0.9;

struct PredictArgs {
  std::vector<std::string> checkpoints;  // --checkpoint, one or more (an ensemble): run folders or model.safetensors
  std::string input;          // a .nii/.nii.gz file or a folder of them
  std::string output;         // a file (one input) or a folder
  std::string device = "cpu";
  double overlap = 0.5;       // sliding-window overlap, a fraction in [0, kMaxOverlap]
  bool tta = false;           // average the mirrorings along the recipe's flip axes (sliding_window.h)
  std::string probabilities;  // where the float32 softmax maps go (file or folder, as --output); empty = none
  std::string labels;         // folder of reference label maps (same file names): print Dice
  std::string overlay;        // folder for a PNG per volume (overlay.h): image | [label |] prediction
  bool overwrite = false;     // replace existing output files
  bool progress = true;       // a progress bar per volume (only on a terminal)
  bool memory_check = true;   // refuse a tile or volume whose estimated memory exceeds what is free
};

/// Runs `predict`; returns 0 when every volume was written, 1 when some failed (each named on
/// stderr). Throws halfgrad::Error for what stops the whole run: an unreadable checkpoint, a missing
/// input, an output that exists (without --overwrite) or cannot be created, a folder with no NIfTI
/// file, --output inside the input folder's files, or a tile too large for the device's memory.
int run_predict(const PredictArgs& a);

}  // namespace unet3d_app
