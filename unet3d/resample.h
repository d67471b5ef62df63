// resample.h - volumes to a common voxel spacing and back: what nnU-Net's preprocessing does before
// training (every case to the dataset's target spacing) and after prediction (the network's output
// back to the input's own grid, so that the label map lies on the scan it came from).
//
// Spacings and shapes are (z, y, x) = (D, H, W), the order of the tensors: a NIfTI file's pixdim[3],
// pixdim[2], pixdim[1], in millimetres.
//
//   resampled_shape   out_d = round(in_d * spacing_d / target_d), at least 1 (np.round, ties to
//                     even: nnU-Net's compute_new_shape).
//   resample_image    trilinear, align_corners = false (ops::upsample_trilinear3d with no scale):
//                     output voxel o of axis d samples input coordinate (o + 0.5) * in_d / out_d - 0.5,
//                     clamped to the edge; the voxel centres of both grids cover the same box.
//                     nnU-Net uses third-order splines in-plane (skimage.transform.resize, order 3);
//                     we use order 1 (no overshoot at edges, the op already on CPU and GPU).
//   resample_label    one-hot linear: each class's indicator resampled as an image, then the argmax
//                     over classes (ties to the lower class). nnU-Net's resize_segmentation with
//                     order 1 thresholds each class's map at 0.5 instead; the two agree wherever one
//                     class holds more than half the weight, and argmax never leaves a voxel
//                     unlabelled.
//   target_spacing    nnU-Net v2's ExperimentPlanner.determine_fullres_target_spacing: the median
//                     spacing per axis over the training cases; when the coarsest axis is more than
//                     3 times coarser than the others and has under a third of their median voxels,
//                     that axis takes the 10th percentile of its spacings instead (numpy's linear
//                     percentile), but never finer than the other axes' coarsest (+1e-5).
//
// A shape equal to the input's returns the input itself (the same bits: a volume already at the target
// spacing is untouched).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace unet3d_app {

using Spacing = std::array<double, 3>;  // (z, y, x) millimetres
using Extent = std::array<int64_t, 3>;  // (z, y, x) voxels

/// How `train --spacing` chooses the grid a run trains on.
struct SpacingChoice {
  enum class Mode : uint8_t {
    Native,  // each volume on its own grid, whatever its spacing (halfgrad before 2026-12-06)
    Median,  // target_spacing() of the training cases (the default, nnU-Net's)
    Fixed,   // `mm`
  };
  Mode mode = Mode::Median;
  Spacing mm{0, 0, 0};
  static SpacingChoice native() { return {Mode::Native, {0, 0, 0}}; }
  static SpacingChoice median() { return {Mode::Median, {0, 0, 0}}; }
  /// Throws halfgrad::Error (check_spacing) for a spacing outside [kMinMm, kMaxMm].
  static SpacingChoice fixed(const Spacing& mm);
  /// "native", "median" or "Z,Y,X" (three numbers in mm, e.g. "3,0.8,0.8"). Throws halfgrad::Error
  /// "<where>: '<text>' ..." naming what was expected for anything else, or a spacing outside
  /// [kMinMm, kMaxMm] or not finite.
  static SpacingChoice parse(const std::string& text, const std::string& where);
  /// The text parse() reads back: "native", "median" or "Z,Y,X" with the numbers printed exactly.
  std::string str() const;
  static constexpr double kMinMm = 1e-3;
  static constexpr double kMaxMm = 1e3;
};

/// "1x1x1 mm", "3x0.8x0.8 mm": a spacing for messages.
std::string spacing_str(const Spacing& s);

/// Throws halfgrad::Error "<where>: ..." unless every element of `s` is finite and in
/// [SpacingChoice::kMinMm, kMaxMm] (a header's pixdim, a checkpoint's field).
void check_spacing(const Spacing& s, const std::string& where);

/// The most voxels resampled_shape allows one volume (4 GiB of float32): a fine --spacing on a
/// large scan is refused before anything is allocated.
constexpr int64_t kMaxResampledVoxels = int64_t{1} << 30;

/// round(shape * spacing / target) per axis, at least 1 (see the top of this file). Throws
/// halfgrad::Error starting "<where>: " when an extent is < 1, a spacing fails check_spacing, or the
/// result has more than kMaxResampledVoxels voxels.
Extent resampled_shape(const Extent& shape, const Spacing& spacing, const Spacing& target,
                       const std::string& where = "resampled_shape");

/// nnU-Net's target spacing of cases with these spacings and shapes (same length, at least one).
/// Throws halfgrad::Error naming `where` for empty or unequal lists or a spacing check_spacing refuses.
Spacing target_spacing(const std::vector<Spacing>& spacings, const std::vector<Extent>& shapes,
                       const std::string& where);

/// `image` float32 (D, H, W) or (C, D, H, W), on the CPU or a GPU, resampled trilinearly to `shape`;
/// same rank, dtype and device. Throws halfgrad::Error (naming "resample_image") for another rank or
/// dtype, or an extent < 1.
halfgrad::Tensor resample_image(const halfgrad::Tensor& image, const Extent& shape);

/// `label` int64 (D, H, W) on the CPU, classes in [0, num_classes), resampled one-hot linearly to
/// `shape`: int64 (shape), CPU. Throws halfgrad::Error (naming "resample_label") for another rank,
/// dtype or device, num_classes < 1, or a label outside [0, num_classes).
halfgrad::Tensor resample_label(const halfgrad::Tensor& label, int64_t num_classes, const Extent& shape);

}  // namespace unet3d_app
