// augment_cuda.h - the CUDA launchers of io/augment.h's transforms (kernels in augment_cuda.cu; built
// with HALFGRAD_CUDA only). io/augment.cpp calls them for CUDA volumes after its own argument checks;
// each launcher checks what its kernel relies on (device, dtype, contiguity, shape) and every CUDA
// return code, and queues its work on the one stream (core/cuda/runtime.h) without waiting for it.
// Volumes are (D, H, W) = (z, y, x), contiguous, x fastest.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "io/augment_math.h"
#include "io/preprocess.h"

namespace halfgrad::cuda {

/// The patch of extent `size` read from the CUDA `volume` (image float32, label int64): with `map`,
/// each voxel reads augment_math::spatial_source (displaced by `disp`, three float32 tensors of shape
/// `size` on CUDA, when given) linearly (image) and by nearest neighbour (label); without `map`,
/// voxel start + i exactly (0 outside the volume: extract_region's bits).
io::Sample augment_spatial(const io::Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                           const io::augment_math::SpatialMap* map, const std::array<Tensor, 3>* disp);

/// The separable filter of io/augment.cpp's gaussian_filter: `weights` (odd count, centred) along z,
/// then y, then x, each pass in float64 rounded to float32; the border mirrored (scipy 'reflect') or
/// read as 0 (zero_border). Returns a new float32 CUDA volume.
Tensor augment_gaussian_filter(const Tensor& vol, const std::vector<double>& weights, bool zero_border);

/// float32(image[i] * factor): brightness, and the elastic displacement's alpha.
Tensor augment_scale(const Tensor& image, double factor);

/// Philox noise (core/philox.h): float32(uniform_signed) of shape `size` (stream `stream`), and
/// float32(image[i] + std * normal) (stream 0).
Tensor augment_uniform_noise(const Shape& size, uint64_t key, uint32_t stream);
Tensor augment_gaussian_noise(const Tensor& image, double std, uint64_t key);

/// adjust_contrast's and adjust_gamma's maps; their statistics (sums in float64, min, max) are reduced
/// on the device by one block in a fixed order, so the bits do not change between runs.
Tensor augment_contrast(const Tensor& image, double factor, bool preserve_range);
Tensor augment_gamma(const Tensor& image, double gamma, bool invert, bool retain_stats);

/// simulate_low_resolution's nearest downsample to `low` (3 extents) and linear upsample back.
Tensor augment_low_resolution(const Tensor& image, const Shape& low);

/// io::copy_into_batch on CUDA (the caller has checked shapes and dtypes).
void augment_copy_into_batch(const io::Sample& s, const std::array<bool, 3>& flip, Tensor& x, Tensor& y, int64_t row);

}  // namespace halfgrad::cuda
