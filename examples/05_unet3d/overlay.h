// overlay.h - a PNG per volume for a quick look: one axial slice of the image, with the reference
// label (eval, or predict --labels) and the prediction in translucent colours, side by side:
//     image | image + label | image + prediction      (without a label: image | image + prediction)
//
// The slice: the axial slice (fixed z, the tensor's first axis D) holding the most foreground voxels
// of the reference label, or of the prediction when there is no label; the middle slice (D / 2)
// when neither has any foreground. Rows are y (H), columns x (W), as stored (no reorientation to
// radiological view). Grey: the image windowed to its 1st..99th percentile over the whole volume
// (nearest-rank), clipped. Colours: class c > 0 gets kPalette[(c - 1) % 6] blended at alpha 0.5. The
// panels are scaled up by the smallest integer factor that makes them at least kMinPanelHeight
// pixels high (nearest neighbour), so a 35 x 51 hippocampus slice is readable.
// The PNG is written with libpng (8-bit RGB), atomically (temp file + rename).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace unet3d_app {

constexpr int64_t kMinPanelHeight = 256;

/// An 8-bit RGB image, rows top to bottom, pixels left to right: rgb.size() == 3 * width * height.
struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

/// The z index overlay() shows: the slice with the most voxels > 0 in `label` when it is defined,
/// else in `pred`; D / 2 when that map has none. label, pred: (D, H, W) int64 (label may be
/// undefined). Ties go to the lowest z.
int64_t overlay_slice(const halfgrad::Tensor& label, const halfgrad::Tensor& pred);

/// The side-by-side picture described in the file comment. image: (D, H, W) float32; label:
/// (D, H, W) int64 or undefined; pred: (D, H, W) int64. Throws halfgrad::Error for other shapes or
/// dtypes.
RgbImage compose_overlay(const halfgrad::Tensor& image, const halfgrad::Tensor& label, const halfgrad::Tensor& pred);

/// Writes `img` as an 8-bit RGB PNG (libpng) at `path`, through a temp file and a rename. Throws
/// halfgrad::Error naming `path` when it cannot be written or `img` is empty or inconsistent.
void write_png(const std::string& path, const RgbImage& img);

}  // namespace unet3d_app
