// augment.h - nnU-Net v2's default training augmentation for single-channel 3-D volumes.
//
// Source: nnunetv2/training/nnUNetTrainer/nnUNetTrainer.py, get_training_transforms (nnU-Net v2.0 to
// v2.4), built from batchgenerators' transforms (batchgenerators/augmentations/spatial_transformations.py,
// color_augmentations.py, noise_augmentations.py, resample_augmentations.py). Per training sample, in
// this order:
//
//   spatial      SpatialTransform: a grid of patch coordinates centred at 0, elastically deformed,
//                rotated, scaled, shifted to the patch centre and interpolated from the WHOLE volume
//                (so a rotated patch holds image, not padding, wherever the volume has it)
//   noise        GaussianNoiseTransform          x + N(0, s^2) per voxel
//   blur         GaussianBlurTransform           gaussian_filter(x, sigma)
//   brightness   BrightnessMultiplicativeTransform   x * f
//   contrast     ContrastAugmentationTransform   (x - mean) * f + mean, clipped to [min, max]
//   low res      SimulateLowResolutionTransform  nearest downsample by zoom, linear upsample back
//   gamma        GammaTransform twice: on -x (then negated back), then on x
//
// Mirroring, nnU-Net's last transform, is not here: halfgrad-unet3d flips after this
// (examples/05_unet3d/data.cpp, the recipe's flip axes).
//
// Tensors: image float32 (D, H, W) = (z, y, x), already z-scored; label int64 (D, H, W); inputs are
// never modified. Axis a of batchgenerators' coordinates (its "x", "y", "z" rotations turn about
// axes 0, 1, 2) is our axis a, so angle_x turns the (y, x) plane.
//
// Where we depart from nnU-Net, and why:
//   - The image is interpolated linearly (order 1), nnU-Net uses cubic splines (order_resampling_data
//     3); labels by nearest neighbour (order 0), nnU-Net interpolates each label's mask linearly and
//     keeps >= 0.5 (order_resampling_seg 1). Order 1/0 keep the code small and the labels a label set.
//   - Outside the volume both read 0 as if the volume were zero-padded and the padding interpolated
//     (scipy.ndimage.map_coordinates mode 'grid-constant'); batchgenerators' mode 'constant' gives 0
//     beyond the outer voxels' centres without the blend. Ours is continuous at the border, so a
//     rotation by 90 degrees, whose coordinates land 1e-16 off the grid, still permutes voxels exactly.
//     nnU-Net pads labels with -1 and turns it into 0 (RemoveLabelTransform): background, as here.
//   - SimulateLowResolution upsamples with order 3 (cubic) in nnU-Net; we use order 1 (linear).
//   - Randomness comes from halfgrad::Generator, not numpy's global state: the distributions are
//     nnU-Net's, the stream of numbers is ours (see augment_patch for exactly what is drawn).
//
// What runs where. Two paths give the same distributions from different streams of numbers:
//   CPU   augment_patch: draws and applies in one pass, the per-voxel numbers (elastic noise,
//         Gaussian noise) from the sample's Generator too; train --augment-device cpu, in the
//         loader's worker threads (examples/05_unet3d/loader.h). Its bits are the golden tests'.
//   GPU   draw_augment_plan on the CPU (a few dozen draws: which transforms run and their
//         parameters, plus one 64-bit key), then apply_augment_plan on the device the volume is on:
//         CUDA kernels (augment_cuda.h) for a CUDA volume, the same loops on the CPU for a CPU one
//         (the kernels' reference). Per-voxel numbers come from Philox4x32-10 (core/philox.h) keyed
//         by the plan's key and numbered by voxel, so they do not depend on the launch or on threads.
//         train --augment-device cuda (opt-in: not yet run on a GPU), in the training thread on
//         the step's stream (examples/05_unet3d/gpu_batch.h says why there).
// Every transform below takes a volume on the CPU or on CUDA (float32, contiguous) and returns its
// result on that device. The CUDA kernels evaluate the CPU's formulas (augment_math.h) in the same
// order in float64, one float32 rounding per voxel; they differ from the CPU loops only in float64's
// last place (fused multiply-adds, the order of contrast's and gamma's sums), so a voxel may differ by
// a float32 ulp or so (tests/cuda/augment_cuda_test.cpp states each tolerance).
#pragma once
#include <array>
#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "io/preprocess.h"

namespace halfgrad::io {

/// A closed range [lo, hi] a parameter is drawn from, uniformly (lo == hi: always lo).
struct Range {
  double lo = 0.0;
  double hi = 0.0;
};

/// What augment_patch may do, with nnU-Net v2's defaults (get_training_transforms; p_* are the
/// probability per sample that the transform runs, batchgenerators' p_per_sample).
struct AugmentOptions {
  static constexpr double kPi = 3.14159265358979323846;

  // SpatialTransform(do_rotation=True, angle_x/y/z = rotation_for_DA, p_rot_per_sample=0.2,
  // p_rot_per_axis=1): nnU-Net's rotation_for_DA for a 3-D patch that is not anisotropic is
  // (-30, 30) degrees about each axis (configure_rotation_dummyDA_mirroring_and_inital_patch_size).
  double rotation_p = 0.2;
  Range rotation_angle{-30.0 / 180.0 * kPi, 30.0 / 180.0 * kPi};  // radians, drawn per axis
  double rotation_p_per_axis = 1.0;  // each axis turns with this probability (else its angle is 0)
  // do_scale=True, scale=(0.7, 1.4), p_scale_per_sample=0.2, independent_scale_for_each_axis=False:
  // one factor for all axes; it multiplies the patch's coordinates (> 1 shows more of the volume).
  double scale_p = 0.2;
  Range scale{0.7, 1.4};
  // do_elastic_deform=False in nnU-Net v2 (p_el_per_sample=0); nnU-Net v1 deformed with p 0.2,
  // alpha (0, 900), sigma (9, 13) (default_3D_augmentation_params), kept here to switch it on.
  double elastic_p = 0.0;
  Range elastic_alpha{0.0, 900.0};  // displacement scale, voxels per unit of smoothed noise
  Range elastic_sigma{9.0, 13.0};   // the noise's Gaussian smoothing, voxels
  // GaussianNoiseTransform(p_per_sample=0.1), noise_variance (0, 0.1). batchgenerators passes the
  // drawn "variance" to np.random.normal as its scale, i.e. as the standard deviation; so do we.
  double noise_p = 0.1;
  Range noise_variance{0.0, 0.1};
  // GaussianBlurTransform((0.5, 1.), different_sigma_per_channel=True, p_per_sample=0.2,
  // p_per_channel=0.5): with one channel the image is blurred with probability 0.2 * 0.5.
  double blur_p = 0.2;
  double blur_p_per_channel = 0.5;
  Range blur_sigma{0.5, 1.0};
  // BrightnessMultiplicativeTransform(multiplier_range=(0.75, 1.25), p_per_sample=0.15).
  double brightness_p = 0.15;
  Range brightness{0.75, 1.25};
  // ContrastAugmentationTransform(p_per_sample=0.15): its defaults contrast_range (0.75, 1.25),
  // preserve_range True.
  double contrast_p = 0.15;
  Range contrast{0.75, 1.25};
  bool contrast_preserve_range = true;
  // SimulateLowResolutionTransform(zoom_range=(0.5, 1), per_channel=True, p_per_channel=0.5,
  // order_downsample=0, order_upsample=3, p_per_sample=0.25); we upsample with order 1.
  double low_res_p = 0.25;
  double low_res_p_per_channel = 0.5;
  Range low_res_zoom{0.5, 1.0};
  // GammaTransform((0.7, 1.5), invert_image=True, per_channel=True, retain_stats=True,
  // p_per_sample=0.1), then GammaTransform((0.7, 1.5), invert_image=False, ..., p_per_sample=0.3).
  double gamma_inverted_p = 0.1;
  double gamma_p = 0.3;
  Range gamma{0.7, 1.5};
  bool gamma_retain_stats = true;

  /// Every transform off: augment_patch is then extract_region of image and label, and draws nothing.
  static AugmentOptions none();

  AugmentOptions& with_rotation(double p, Range angle_radians) { rotation_p = p; rotation_angle = angle_radians; return *this; }
  AugmentOptions& with_rotation_p_per_axis(double p) { rotation_p_per_axis = p; return *this; }
  AugmentOptions& with_scale(double p, Range factor) { scale_p = p; scale = factor; return *this; }
  AugmentOptions& with_elastic(double p, Range alpha, Range sigma) { elastic_p = p; elastic_alpha = alpha; elastic_sigma = sigma; return *this; }
  AugmentOptions& with_noise(double p, Range variance) { noise_p = p; noise_variance = variance; return *this; }
  AugmentOptions& with_blur(double p, Range sigma) { blur_p = p; blur_sigma = sigma; return *this; }
  AugmentOptions& with_blur_p_per_channel(double p) { blur_p_per_channel = p; return *this; }
  AugmentOptions& with_brightness(double p, Range factor) { brightness_p = p; brightness = factor; return *this; }
  AugmentOptions& with_contrast(double p, Range factor) { contrast_p = p; contrast = factor; return *this; }
  AugmentOptions& with_contrast_preserve_range(bool on) { contrast_preserve_range = on; return *this; }
  AugmentOptions& with_low_resolution(double p, Range zoom) { low_res_p = p; low_res_zoom = zoom; return *this; }
  AugmentOptions& with_low_resolution_p_per_channel(double p) { low_res_p_per_channel = p; return *this; }
  AugmentOptions& with_gamma(double p_inverted, double p, Range g) { gamma_inverted_p = p_inverted; gamma_p = p; gamma = g; return *this; }
  AugmentOptions& with_gamma_retain_stats(bool on) { gamma_retain_stats = on; return *this; }

  /// Throws halfgrad::Error "<op>: AugmentOptions.<field> <value>; expected ..." for a probability
  /// outside [0, 1], a range with lo > hi or a bound that is not finite, a non-positive lower bound
  /// of scale, elastic sigma, blur sigma, brightness, contrast, gamma or zoom, a zoom above 1, or a
  /// negative elastic alpha or noise variance.
  void check(const char* op) const;
};

/// The parameters of one spatial transform, as batchgenerators' augment_spatial applies them to the
/// zero-centred coordinate c of a patch voxel: c + displacement (elastic), then rotated (row vector
/// times Rx(angles[0]) Ry(angles[1]) Rz(angles[2]), rotate_coords_3d), then times `scale`.
struct SpatialParams {
  std::array<double, 3> angles{0.0, 0.0, 0.0};  // radians about axes 0, 1, 2 (batchgenerators' angle_x, _y, _z)
  double scale = 1.0;
  std::array<Tensor, 3> displacement;  // elastic offsets (voxels) along axes 0, 1, 2, float32 patch-shaped; undefined: none
};

/// The patch of extent `size` at `start` of `volume`, through `params`: output voxel i (a (z, y, x)
/// index) reads the volume at p = T(i - (size - 1) / 2) + start + (size - 1) / 2, T as SpatialParams
/// says; so the identity T gives exactly voxel start + i, and the patch turns about its own centre.
/// The image is read by trilinear interpolation, the label by nearest neighbour (p rounded half up),
/// both 0 outside the volume (scipy.ndimage.map_coordinates order 1 / 0, mode 'grid-constant').
/// Returns image float32 and label int64 of shape `size`.
/// Throws halfgrad::Error if the sample is malformed, size is not 3 positive extents, scale is not
/// finite and > 0, an angle is not finite, or a displacement is not float32 of shape `size`.
Sample spatial_transform(const Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                         const SpatialParams& params);

/// Elastic offsets from uniform noise in [-1, 1): gaussian_filter(noise, sigma, mode 'constant', cval
/// 0, truncate 4) * alpha (batchgenerators' elastic_deform_coordinates). float32 (D, H, W) in and out.
/// Throws if noise is not such a volume, sigma <= 0 or alpha is not finite.
Tensor elastic_displacement(const Tensor& noise, double alpha, double sigma);

/// image + std * n, n one gen.normal() per voxel in storage order (augment_gaussian_noise).
/// Throws if image is not a float32 (D, H, W) volume or std is negative or not finite.
Tensor gaussian_noise(const Tensor& image, double std, Generator& gen);

/// scipy.ndimage.gaussian_filter(image, sigma) (mode 'reflect', truncate 4.0; augment_gaussian_blur):
/// a normalised kernel of radius int(4 sigma + 0.5), along z, then y, then x, each pass rounded to float32.
/// Throws if image is not a float32 (D, H, W) volume or sigma is not finite and > 0.
Tensor gaussian_blur(const Tensor& image, double sigma);

/// image * factor (augment_brightness_multiplicative). Throws if image is malformed or factor not finite.
Tensor multiply_brightness(const Tensor& image, double factor);

/// (image - mean) * factor + mean, then, with preserve_range, clipped to the image's [min, max]
/// (augment_contrast); mean over all voxels, in float64. Throws if image is malformed or factor not finite.
Tensor adjust_contrast(const Tensor& image, double factor, bool preserve_range);

/// The image at a lower resolution (augment_linear_downsampling_scipy): each extent n becomes
/// max(1, round(n * zoom)) (half to even, as np.round) by nearest neighbour, and is brought back to n
/// by linear interpolation, both with skimage's resize mapping (output o reads input (o + 0.5) * in /
/// out - 0.5, clamped to the edge; scipy.ndimage.zoom with grid_mode True, mode 'nearest').
/// Throws if image is malformed or zoom is not finite and > 0.
Tensor simulate_low_resolution(const Tensor& image, double zoom);

/// augment_gamma: with `invert` the image is negated first and at the end; x -> ((x - min) / (range +
/// 1e-7))^gamma * range + min; with retain_stats the result is shifted and scaled back to the mean and
/// population std it had before (dividing by std + 1e-8). Statistics in float64.
/// Throws if image is malformed or gamma is not finite and > 0.
Tensor adjust_gamma(const Tensor& image, double gamma, bool invert, bool retain_stats);

/// nnU-Net's training transforms on one sample: the patch of extent `size` at `start` (any start: the
/// patch may reach outside the volume, which reads as 0 / background) sampled from the whole
/// `volume`, then the intensity transforms on its image. Returns image float32 and label int64 of shape
/// `size`; when no spatial transform is drawn, the bits of extract_region(volume.image / .label, start, size).
///
/// Draws from `gen`, in this order; a probability p is tested as gen.uniform() < p, and a probability
/// of 0 draws nothing (so AugmentOptions::none() draws nothing at all). U(r) is r.lo + (r.hi - r.lo) *
/// gen.uniform(); a "two-sided" draw of r (batchgenerators' scale, contrast and gamma) is: if
/// gen.uniform() < 0.5 and r.lo < 1, U([r.lo, 1]), else U([max(r.lo, 1), r.hi]).
///   1. elastic_p; then alpha = U(elastic_alpha), sigma = U(elastic_sigma), then 3 noise volumes of
///      shape `size` (axis 0's, 1's, 2's), each voxel 2 gen.uniform() - 1 in storage order
///   2. rotation_p; then for each axis 0, 1, 2: rotation_p_per_axis, then its angle U(rotation_angle)
///   3. scale_p; then the factor, two-sided from `scale`
///   4. noise_p; then std = U(noise_variance), then gaussian_noise's normals
///   5. blur_p; then blur_p_per_channel; then sigma = U(blur_sigma)
///   6. brightness_p; then U(brightness)
///   7. contrast_p; then two-sided from `contrast`
///   8. low_res_p; then low_res_p_per_channel; then zoom = U(low_res_zoom)
///   9. gamma_inverted_p; then gamma two-sided from `gamma`
///  10. gamma_p; then gamma two-sided from `gamma`
/// Throws halfgrad::Error naming augment_patch if the sample is malformed, size is not 3 positive
/// extents, or the options are bad (AugmentOptions::check).
Sample augment_patch(const Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                     const AugmentOptions& options, Generator& gen);

// ---- The plan: the draws of one sample apart from the per-voxel work (the GPU path) ---------------

/// What draw_augment_plan drew for one sample: each transform that runs with its parameter (an
/// empty optional: the transform does not run), and the Philox key of its per-voxel numbers.
struct AugmentPlan {
  struct Elastic {
    double alpha = 0.0, sigma = 0.0;  // elastic_displacement's
  };
  uint64_t key = 0;  // Philox4x32-10 key: elastic noise streams 1, 2, 3 (axes 0, 1, 2), Gaussian noise stream 0
  std::optional<Elastic> elastic;
  std::array<double, 3> angles{0.0, 0.0, 0.0};  // radians about axes 0, 1, 2
  double scale = 1.0;
  bool spatial = false;  // elastic, rotation or scale drawn: the patch is interpolated, else copied
  std::optional<double> noise_std, blur_sigma, brightness, contrast, low_res_zoom, gamma_inverted, gamma;
  bool contrast_preserve_range = true;  // AugmentOptions' switches, copied
  bool gamma_retain_stats = true;
};

/// The draws of augment_patch without the per-voxel ones: first key = one 64-bit word of
/// gen.engine(), then steps 1-10 of augment_patch's list in its order with the same draws, except
/// that step 1 draws no noise volumes and step 4 no normals (apply_augment_plan makes them from
/// `key`). So from the same generator the parameters equal augment_patch's only until its first
/// per-voxel draw; the distributions are the same. AugmentOptions::none() draws the key alone.
/// Throws halfgrad::Error naming draw_augment_plan for bad options (AugmentOptions::check).
AugmentPlan draw_augment_plan(const AugmentOptions& options, Generator& gen);

/// Uniform noise in [-1, 1) of shape `size` on `device`, float32: voxel i (storage order) is
/// philox::uniform_signed of the first two words of philox::draw(key, stream, i) (core/philox.h).
/// Throws if size is not 3 positive extents.
Tensor philox_uniform_noise(const Shape& size, uint64_t key, uint32_t stream, Device device);

/// image + std * n per voxel, n = philox::normal(philox::draw(key, 0, i)) for voxel i in storage
/// order (Box-Muller in float64): the GPU path's augment_gaussian_noise, on the image's device.
/// Throws if image is not a float32 (D, H, W) volume or std is negative or not finite.
Tensor gaussian_noise_philox(const Tensor& image, double std, uint64_t key);

/// augment_patch's transforms as `plan` says, on the device of `volume` (image float32 and label int64
/// (D, H, W), both on the CPU or both on CUDA): the patch of extent `size` at `start` (spatial_transform
/// when plan.spatial, with displacements elastic_displacement(philox_uniform_noise(size, key, 1 + a))
/// for axis a; else extract_region's bits), then noise (gaussian_noise_philox), blur, brightness,
/// contrast, low resolution, inverted gamma, gamma. Returns image float32 and label int64 of shape
/// `size` on that device. Throws halfgrad::Error naming apply_augment_plan for a malformed sample, a
/// size that is not 3 positive extents, or image and label on different devices.
Sample apply_augment_plan(const Sample& volume, const std::array<int64_t, 3>& start, const Shape& size,
                          const AugmentPlan& plan);

/// Writes sample `s` (image float32, label int64, (D, H, W)), flipped along each axis a with
/// flip[a] (io::flip's reversal), into row `row` of the batch x (B, 1, D, H, W) float32 and y
/// (B, D, H, W) int64, all contiguous and on one device (CPU or CUDA; queued on the stream there).
/// Throws halfgrad::Error naming copy_into_batch for shapes, dtypes or devices that disagree, or a
/// row outside [0, B).
void copy_into_batch(const Sample& s, const std::array<bool, 3>& flip, Tensor& x, Tensor& y, int64_t row);

}  // namespace halfgrad::io
