// surface_distance.h - the boundary metrics of eval beside Dice: the 95th-percentile Hausdorff
// distance (HD95) and the normalised surface Dice (NSD), per class, from a prediction and a label map
// on one voxel grid with its spacing. The definitions are MONAI's (monai.metrics, 1.x), so that
// figures compare with what a MONAI or nnU-Net user reports:
//   surface S(X)  the voxels of mask X with a 6-neighbour outside X or outside the volume
//                 (get_mask_edges: X xor binary_erosion(X), scipy's default cross and border 0);
//   d(x, Y)       Euclidean distance in mm from voxel centre x to the nearest voxel of S(Y), the voxel
//                 grid scaled by the spacing (get_surface_distance: distance_transform_edt of not S(Y)
//                 with sampling = spacing);
//   HD95          max(P95 {d(a, B) : a in S(A)}, P95 {d(b, A) : b in S(B)}), P95 numpy's default
//                 (linear) percentile (compute_hausdorff_distance, percentile 95, directed False);
//   NSD at tau    (|{a in S(A) : d(a, B) <= tau}| + |{b in S(B) : d(b, A) <= tau}|) / (|S(A)| + |S(B)|)
//                 (compute_surface_dice, use_subvoxels False; Nikolov et al. 2018, arXiv:1809.04430,
//                 counted in boundary voxels rather than surfel areas).
// Empty masks, where MONAI returns NaN or inf: a class absent from both gives HD95 0 and NSD 1 (as
// Dice 1: nothing to find, nothing found); absent from exactly one gives NSD 0 and HD95 undefined
// (SurfaceScores::hd95_defined false; reported as null and left out of means).
// Distances come from an exact squared Euclidean distance transform, separable over the three axes
// (Felzenszwalb and Huttenlocher, "Distance Transforms of Sampled Functions", Theory of Computing 8,
// 2012), in O(voxels) per class: volumes of any size, not only the hippocampus's.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace unet3d_app {

/// One class's boundary metrics on one volume.
struct SurfaceScores {
  double hd95_mm = 0;        // meaningful only where hd95_defined
  bool hd95_defined = true;  // false when exactly one of the two masks is empty
  double surface_dice = 1;   // NSD at the tolerance asked for, in [0, 1]
};

/// HD95 and NSD at tolerance_mm for classes 1..num_classes-1. pred, target: (D, H, W) int64 label
/// maps of one grid, labels in [0, num_classes); spacing_mm: the grid's (z, y, x) spacing, each
/// finite and > 0; tolerance_mm finite and >= 0. Throws halfgrad::Error naming the shapes, the
/// spacing or the tolerance when they are not that.
std::vector<SurfaceScores> surface_scores_per_class(const halfgrad::Tensor& pred, const halfgrad::Tensor& target,
                                                    int64_t num_classes, const std::array<double, 3>& spacing_mm,
                                                    double tolerance_mm);

/// The squared Euclidean distance (mm^2) from every voxel of a (d, h, w) grid with spacing (z, y, x)
/// to the nearest voxel where feature is nonzero; +inf everywhere when there is none. Exposed for
/// its tests (an exact transform: brute force gives the same values).
std::vector<double> squared_distance_transform(const std::vector<uint8_t>& feature, const std::array<int64_t, 3>& shape,
                                               const std::array<double, 3>& spacing_mm);

/// The (D, H, W) int64 map's block [0, extent) on every axis: a volume's own grid inside the map it
/// was zero-padded (at the end) into. The map itself when extent is {0, 0, 0} or its shape. Throws
/// halfgrad::Error when extent exceeds the map's shape.
halfgrad::Tensor own_grid(const halfgrad::Tensor& map, const std::array<int64_t, 3>& extent);

/// numpy.percentile(values, q) with its default linear interpolation; values non-empty, q in [0, 100].
double linear_percentile(std::vector<double> values, double q);

}  // namespace unet3d_app
