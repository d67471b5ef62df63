// preprocess.h - turning loaded volumes into training batches.
//
// Every function takes 3-D tensors (D, H, W) = (z, y, x): images float32, label maps int64, and
// returns new tensors (inputs are never modified). Randomness always comes from a caller's seeded
// halfgrad::Generator, so the same seed gives the same patches and flips.
//
// The fixed-shape path reproduces ../shared/reference/torch_hippo_train.py's prep():
//     image <- (image - mean) / (std + 1e-8)           (population std, over the whole volume)
//     image, label <- pad_or_crop to SHAPE              (zeros appended at the end, crop keeps the start)
// The patch path (random_patch, random_flip) is for volumes larger than the network's input.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::io {

/// An image and its label map: image float32 (D, H, W), label int64 (D, H, W), same shape.
struct Sample {
  Tensor image;
  Tensor label;
};

/// A batch ready for a 3-D network: image float32 (B, 1, D, H, W), label int64 (B, D, H, W).
struct Batch {
  Tensor image;
  Tensor label;
};

/// (x - mean) / (std + 1e-8) over all voxels, std the population one (numpy's default); float32 in,
/// float32 out, same shape (any rank). Statistics are accumulated in float64. A constant volume
/// becomes all zeros. Throws halfgrad::Error if `image` is undefined, empty or not float32.
Tensor zscore(const Tensor& image);

/// The box of extent `size` = (d, h, w) whose first voxel is at `start` = (z, y, x) in `vol`;
/// voxels of the box outside `vol` (start may be negative or run past the end) are 0.
/// vol: float32 or int64 (D, H, W); returns the same dtype, shape `size`.
/// Throws halfgrad::Error if vol is not 3-D float32/int64 or size is not 3 positive extents.
Tensor extract_region(const Tensor& vol, const std::array<int64_t, 3>& start, const Shape& size);

/// The reference's fixed-shape step: copies vol[:s0, :s1, :s2] with s = min(vol.shape, shape) into a
/// zero tensor of `shape`: pads with zeros at the end of each axis, crops from the start.
/// vol: float32 or int64 (D, H, W); returns the same dtype. Errors as extract_region.
Tensor pad_or_crop(const Tensor& vol, const Shape& shape);

/// The reference's prep(): zscore(image), then pad_or_crop of image and label to `shape`.
/// Throws halfgrad::Error if image/label are not float32/int64 3-D volumes of equal shape.
Sample prepare_fixed_shape(const Tensor& image, const Tensor& label, const Shape& shape);

struct PatchOptions {
  Shape size{64, 64, 64};        // patch extent (d, h, w) in voxels
  double foreground_prob = 0.0;  // chance the patch is centred on a random voxel with label > 0
  PatchOptions& with_size(const Shape& s) { size = s; return *this; }
  PatchOptions& with_foreground_prob(double p) { foreground_prob = p; return *this; }
};

/// A random patch of image and label at the same position. With probability foreground_prob (and
/// when the label has any voxel > 0) the patch is centred on a uniformly chosen foreground voxel,
/// its start clamped so it stays inside the volume; otherwise the start is uniform over all
/// positions that keep the patch inside. On an axis where the volume is smaller than the patch
/// the patch starts at 0 and is zero-padded at the end (image 0, label 0 = background).
/// Throws halfgrad::Error if the sample is malformed (see Sample), size is not 3 positive
/// extents, or foreground_prob is outside [0, 1].
Sample random_patch(const Sample& sample, const PatchOptions& options, Generator& gen);
/// The start corner (z, y, x) random_patch crops at, drawing exactly what random_patch draws from
/// `gen` (random_patch is random_patch_start, then the crop): a caller that skips a sample without
/// building it keeps the generator in step (examples/05_unet3d: each rank builds its slice of the
/// global batch). Same checks and errors as random_patch.
std::array<int64_t, 3> random_patch_start(const Sample& sample, const PatchOptions& options, Generator& gen);

/// vol reversed along `axis` (0 = z, 1 = y, 2 = x); float32 or int64 (D, H, W).
/// Throws halfgrad::Error if vol is not such a volume or axis is not 0, 1 or 2.
Tensor flip(const Tensor& vol, int64_t axis);

/// Flips image and label together along each axis z, y, x independently with probability `prob`
/// (one gen.uniform() per axis, in that order, as the reference does per batch).
/// Throws halfgrad::Error if the sample is malformed or prob is outside [0, 1].
Sample random_flip(const Sample& sample, Generator& gen, double prob = 0.5);

/// Keeps every factor-th voxel, starting at 0: out[k, j, i] = vol[f*k, f*j, f*i]; out extents are
/// ceil(n / f). For images or labels (float32 or int64). Throws if factor < 1 or vol malformed.
Tensor downsample_stride(const Tensor& vol, int64_t factor);

/// Mean of each f x f x f block (blocks cut short at the far edges average what they hold);
/// out extents ceil(n / f). float32 (D, H, W) in and out. Throws if factor < 1 or image malformed.
Tensor downsample_mean(const Tensor& image, int64_t factor);

/// Most frequent label of each f x f x f block (ties go to the smaller label); out extents
/// ceil(n / f). int64 (D, H, W) in and out. Throws if factor < 1 or labels malformed.
Tensor downsample_majority(const Tensor& labels, int64_t factor);

/// Stacks B >= 1 samples of equal shape (D, H, W) into image float32 (B, 1, D, H, W) and label
/// int64 (B, D, H, W). Throws halfgrad::Error naming the sample index whose dtype or shape differs.
Batch make_batch(const std::vector<Sample>& samples);

}  // namespace halfgrad::io
