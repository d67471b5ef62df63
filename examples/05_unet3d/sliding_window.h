// sliding_window.h - a segmentation network applied to a volume of any size: overlapping tiles
// blended by a Gaussian importance map, as nnU-Net v2 (nnunetv2/inference/sliding_window_prediction.py
// and predict_from_raw_data.py) and MONAI (`sliding_window_inference(mode="gaussian",
// sigma_scale=0.125)`) do.
//
//   1. The image (C, D, H, W) is padded with zeros at the end of each axis to a multiple of the
//      network's size divisor (2^levels), as training pads its volumes (io::pad_or_crop).
//   2. The window is the requested one clipped to the padded volume; tile starts per axis follow
//      nnU-Net's compute_steps_for_sliding_window: n = ceil((size - window) / (window * (1 - overlap)))
//      + 1 tiles, evenly spread from 0 to size - window (rounded half to even, as Python's round).
//      A volume that fits in the window is one tile: whole-volume inference.
//   3. Each tile's logits (K, d, h, w), in float32, are multiplied by the Gaussian map and summed;
//      the map itself is summed alongside, and the sum of logits is divided by it (nnU-Net v2 blends
//      logits this way: `predicted_logits += prediction * gaussian; n_predictions += gaussian`, then
//      divides; MONAI blends whatever the network returns). Logits rather than softmax, as nnU-Net
//      v2; softmax/argmax come after. A single tile is weighted 1 instead, so that whole-volume
//      inference returns the network's logits bit for bit.
//   4. Mirroring test-time augmentation (nnU-Net's `_internal_maybe_mirror_and_predict`): each tile is
//      also run flipped along every non-empty subset of the mirror axes, each output flipped back, and
//      the 2^k logits averaged, before the Gaussian weighting. The mirror axes are those the model
//      was trained with flips along (nnU-Net's `allowed_mirroring_axes`: the recipe's flip_axes), since
//      a model never shown a flip along an axis is not equivariant to it (the cpu recipe flips x only:
//      mirroring z or y as well takes its held-out Dice from 0.867 to 0.025).
//
// The network runs on its own device (CPU or CUDA, any memory format and dtype); tiles are cut,
// flipped and blended on the host in float32, which costs a tile's copy to and from the device.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace unet3d_app {

/// nnU-Net's compute_gaussian(tile_size, sigma_scale): exp(-(p - c)^2 / (2 sigma^2)) multiplied
/// over the axes, c = size // 2 and sigma = size * sigma_scale per axis, divided by its maximum (1
/// at the centre), then every 0 replaced by the smallest non-zero value (so that no voxel is
/// weighted 0). (nnU-Net filters a delta with scipy's gaussian_filter, whose kernel is truncated at 4
/// sigma: with sigma = size / 8 no offset reaches the truncation, so the product is the same
/// values.) Returns float32 (d, h, w) on the CPU. Throws halfgrad::Error for a non-positive extent or
/// sigma_scale.
halfgrad::Tensor gaussian_importance_map(const std::array<int64_t, 3>& window, double sigma_scale = 0.125);

/// nnU-Net's compute_steps_for_sliding_window for one axis: the tile starts along an axis of
/// `size` voxels for a window of `window` (<= size) and a step of window * (1 - overlap).
/// Throws halfgrad::Error unless 1 <= window <= size and 0 <= overlap < 1.
std::vector<int64_t> tile_starts(int64_t size, int64_t window, double overlap);

struct SlidingWindowOptions {
  std::array<int64_t, 3> window{48, 64, 48};  // tile extent (z, y, x) before clipping to the volume
  double overlap = 0.5;                       // fraction of the window shared by neighbouring tiles
  int64_t divisor = 16;                       // every padded extent is a multiple of this (2^levels)
  std::vector<int64_t> mirror_axes;           // TTA: mirror along these of (z, y, x) = (0, 1, 2); empty = off
  double sigma_scale = 0.125;                 // the Gaussian's sigma as a fraction of the window
};

/// How many forward passes a tile costs: 2^(number of distinct mirror axes) (1 without TTA). Throws
/// halfgrad::Error for a mirror axis outside 0..2.
int64_t mirror_passes(const SlidingWindowOptions& o);

/// The network: x (1, C, d, h, w) float32 on the host -> logits (1, K, d, h, w) (any dtype, device
/// and memory format; the caller moves x to its device).
using Network = std::function<halfgrad::Tensor(const halfgrad::Tensor&)>;

/// What sliding_window_logits will do for a volume of `shape` (D, H, W): the padded shape, the
/// clipped window and the tile starts per axis.
struct TilePlan {
  std::array<int64_t, 3> padded{}, window{};
  std::array<std::vector<int64_t>, 3> starts;
  int64_t num_tiles() const { return static_cast<int64_t>(starts[0].size() * starts[1].size() * starts[2].size()); }
};
/// Throws halfgrad::Error for a non-positive extent, window or divisor, or overlap outside [0, 1).
TilePlan plan_tiles(const halfgrad::Shape& shape, const SlidingWindowOptions& options);

/// Blended logits of `net` over `image` (C, D, H, W) float32 on the CPU: returns (K, D, H, W) float32
/// on the CPU (the padding cut off). `on_tile(done, total)` is called after each tile (progress).
/// Throws halfgrad::Error for a bad image or options, or when the network returns a shape other than
/// (1, K, d, h, w) for a tile of (d, h, w).
halfgrad::Tensor sliding_window_logits(const Network& net, const halfgrad::Tensor& image,
                                       const SlidingWindowOptions& options,
                                       const std::function<void(int64_t, int64_t)>& on_tile = {});

}  // namespace unet3d_app
