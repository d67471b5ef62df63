// augment_cuda_test.cpp - io/augment.h's transforms on CUDA (io/augment_cuda.cu) against the CPU loops on
// the same inputs and the same draws, transform by transform and for the whole plan; the Philox noise's
// statistics; the same bits on every run; and the batch of train --augment-device cuda
// (examples/05_unet3d/gpu_batch.h) against the same plans built on the CPU.
//
// Tolerances, from what each kernel computes (io/augment_math.h: the CPU's float64 formulas in its
// order, one float32 rounding per voxel; the .cu is built with -fmad=false, the CPU build fuses some
// multiply-adds, so float64's last place may differ):
//   exact (0)        the crop, brightness (one product), the uniform noise (exact arithmetic), the
//                    labels (nearest neighbour: a coordinate would have to lie within float64's last
//                    place of a voxel boundary), the batch copy with flips
//   1e-6 rel + abs   spatial interpolation, blur, low resolution, the elastic displacement (a fused
//                    multiply-add, at most a float32 ulp on a rare voxel), contrast and gamma (their
//                    float64 sums reduced in another order; pow within 2 ulp of double), Gaussian noise
//                    (CUDA's log / cos within 2 ulp of double)
//   1e-5 rel + abs   the whole plan: those differences carried through the later transforms (gamma's
//                    power amplifies a last-place difference near the image's minimum); its labels
//                    exactly, except with elastic offsets made on each device (a float32 ulp moves a
//                    coordinate): there at most 1 voxel in 1000
#include <cmath>
#include <cstring>
#include <string>

#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/gpu_batch.h"
#include "io/augment.h"
#include "tests/cuda/cuda_test.h"
#include "tests/examples/05_unet3d/synthetic_seg_data.h"

using namespace halfgrad;
using namespace halfgrad::io;
using namespace halfgrad::testing;

namespace {

Sample test_volume(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor image = Tensor::randn(s, g);
  std::vector<int64_t> lab(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = g.uniform() < 0.6 ? 0 : 1 + static_cast<int64_t>(i % 3);
  return Sample{image, Tensor::from_labels(lab, s)};
}

Sample to_cuda(const Sample& s) { return Sample{s.image.copy_to(Device::CUDA), s.label.copy_to(Device::CUDA)}; }

// Voxels where the GPU's labels differ from the CPU's.
int64_t label_mismatches(const Tensor& gpu, const Tensor& cpu) {
  const std::vector<double> g = gpu.to_double_vector(), c = cpu.to_double_vector();
  int64_t n = 0;
  for (size_t i = 0; i < g.size(); ++i) n += g[i] != c[i];
  return n;
}

bool same_bits(const Tensor& gpu, const Tensor& cpu) {
  const Tensor g = gpu.copy_to(Device::CPU);
  return g.dtype() == cpu.dtype() && g.shape() == cpu.shape() && std::memcmp(g.raw_data(), cpu.raw_data(), cpu.nbytes()) == 0;
}

AugmentOptions all_on() {
  AugmentOptions o;
  o.rotation_p = o.scale_p = o.elastic_p = o.noise_p = o.blur_p = o.blur_p_per_channel = o.brightness_p = 1.0;
  o.contrast_p = o.low_res_p = o.low_res_p_per_channel = o.gamma_inverted_p = o.gamma_p = 1.0;
  o.elastic_alpha = {0.0, 3.0};
  o.elastic_sigma = {1.0, 2.0};
  return o;
}

}  // namespace

CUDA_TEST_CASE("augment cuda spatial float32/int64 (D,H,W): rotation, scale, elastic within 1e-6, labels and the crop exact") {
  const Sample vol = test_volume({13, 17, 15}, 1);
  const Sample dvol = to_cuda(vol);
  const Shape size{9, 12, 11};
  for (const std::array<int64_t, 3> start : {std::array<int64_t, 3>{2, 3, 2}, std::array<int64_t, 3>{-3, 8, 6}}) {
    SpatialParams sp;
    sp.angles = {0.31, -0.42, 0.17};
    sp.scale = 1.23;
    Sample cpu = spatial_transform(vol, start, size, sp), gpu = spatial_transform(dvol, start, size, sp);
    CHECK(gpu.image.is_cuda());
    check_close(gpu.image, cpu.image, 1e-6, 1e-6, "rotated and scaled image");
    CHECK(same_bits(gpu.label, cpu.label));
    // Elastic offsets: made on each device from the same Philox key (the noise exact, the filtered
    // offsets within 1e-6); the interpolation then reads the CPU's offsets on both.
    SpatialParams el = sp, del = sp;
    for (int a = 0; a < 3; ++a) {
      CHECK(same_bits(philox_uniform_noise(size, 5, 1 + a, Device::CUDA), philox_uniform_noise(size, 5, 1 + a, Device::CPU)));
      el.displacement[a] = elastic_displacement(philox_uniform_noise(size, 5, 1 + a, Device::CPU), 2.5, 1.5);
      const Tensor d = elastic_displacement(philox_uniform_noise(size, 5, 1 + a, Device::CUDA), 2.5, 1.5);
      check_close(d, el.displacement[a], 1e-6, 1e-6, "elastic displacement");
      del.displacement[a] = el.displacement[a].copy_to(Device::CUDA);
    }
    cpu = spatial_transform(vol, start, size, el);
    gpu = spatial_transform(dvol, start, size, del);
    check_close(gpu.image, cpu.image, 1e-6, 1e-6, "elastic image");
    CHECK(same_bits(gpu.label, cpu.label));
    // Nothing drawn: the crop (extract_region's bits), inside and reaching outside the volume.
    Generator g(3);
    const AugmentPlan none = draw_augment_plan(AugmentOptions::none(), g);
    const Sample crop = apply_augment_plan(dvol, start, size, none);
    CHECK(same_bits(crop.image, extract_region(vol.image, start, size)));
    CHECK(same_bits(crop.label, extract_region(vol.label, start, size)));
  }
}

CUDA_TEST_CASE("augment cuda intensity float32 (D,H,W) (11,14,13): brightness exact; blur, low res, contrast, gamma 1e-6") {
  const Tensor x = test_volume({11, 14, 13}, 2).image, dx = x.copy_to(Device::CUDA);
  for (double sigma : {0.5, 0.8, 1.0}) check_close(gaussian_blur(dx, sigma), gaussian_blur(x, sigma), 1e-6, 1e-6, "blur");
  CHECK(same_bits(multiply_brightness(dx, 0.83), multiply_brightness(x, 0.83)));
  for (double zoom : {0.5, 0.61, 0.77, 1.0})
    check_close(simulate_low_resolution(dx, zoom), simulate_low_resolution(x, zoom), 1e-6, 1e-6, "low resolution");
  for (bool preserve : {true, false})
    for (double f : {0.8, 1.2}) check_close(adjust_contrast(dx, f, preserve), adjust_contrast(x, f, preserve), 1e-6, 1e-6, "contrast");
  for (bool invert : {true, false})
    for (bool retain : {true, false})
      for (double gamma : {0.7, 1.0, 1.45}) {
        const std::string what = "gamma " + std::to_string(gamma) + (invert ? " inverted" : "") + (retain ? " retain" : "");
        check_close(adjust_gamma(dx, gamma, invert, retain), adjust_gamma(x, gamma, invert, retain), 1e-6, 1e-6, what);
      }
}

CUDA_TEST_CASE("augment cuda Philox noise float32 (48,64,48): the CPU's numbers, N(0, std^2) and U[-1, 1) statistics") {
  const Shape s{48, 64, 48};
  const Tensor zero = Tensor::zeros(s), dzero = zero.copy_to(Device::CUDA);
  const Tensor g = gaussian_noise_philox(dzero, 0.1, 1234);
  check_close(g, gaussian_noise_philox(zero, 0.1, 1234), 1e-6, 1e-6, "gaussian noise");
  const std::vector<double> v = g.to_double_vector();
  double sum = 0, sq = 0;
  for (double e : v) sum += e;
  const double mean = sum / static_cast<double>(v.size());
  for (double e : v) sq += (e - mean) * (e - mean);
  const double sd = std::sqrt(sq / static_cast<double>(v.size()));
  CHECK(std::fabs(mean) < 5 * 0.1 / std::sqrt(static_cast<double>(v.size())));  // 5 standard errors
  CHECK(std::fabs(sd - 0.1) < 0.001);
  const Tensor u = philox_uniform_noise(s, 1234, 2, Device::CUDA);
  CHECK(same_bits(u, philox_uniform_noise(s, 1234, 2, Device::CPU)));
  const std::vector<double> uv = u.to_double_vector();
  double umean = 0, usq = 0;
  for (double e : uv) umean += e;
  umean /= static_cast<double>(uv.size());
  for (double e : uv) usq += (e - umean) * (e - umean);
  CHECK(std::fabs(umean) < 0.01);
  CHECK(std::fabs(std::sqrt(usq / static_cast<double>(uv.size())) - 1.0 / std::sqrt(3.0)) < 0.005);
}

CUDA_TEST_CASE("augment cuda apply_augment_plan (D,H,W): the CPU's output within 1e-5, every transform and nnU-Net's defaults") {
  const Sample vol = test_volume({20, 24, 22}, 4);
  const Sample dvol = to_cuda(vol);
  const Shape size{16, 20, 18};
  for (const bool every : {true, false})
    for (uint64_t seed = 0; seed < (every ? 4u : 24u); ++seed) {
      CAPTURE(every);
      CAPTURE(seed);
      Generator gen(seed);
      const AugmentPlan p = draw_augment_plan(every ? all_on() : AugmentOptions(), gen);
      const std::array<int64_t, 3> start{static_cast<int64_t>(seed % 5), 2, 3};
      const Sample cpu = apply_augment_plan(vol, start, size, p), gpu = apply_augment_plan(dvol, start, size, p);
      check_close(gpu.image, cpu.image, 1e-5, 1e-5, "the plan's image");
      if (p.elastic) CHECK(label_mismatches(gpu.label, cpu.label) * 1000 <= shape_numel(size));
      else CHECK(same_bits(gpu.label, cpu.label));
      // The same bits on a second run.
      CHECK(same_bits(apply_augment_plan(dvol, start, size, p).image, gpu.image.copy_to(Device::CPU)));
    }
}

CUDA_TEST_CASE("augment cuda batch: copy_into_batch and train --augment-device cuda's batch are the CPU plan's") {
  const Sample s = test_volume({5, 6, 7}, 9);
  Tensor x = Tensor::zeros({2, 1, 5, 6, 7}), y = Tensor::zeros({2, 5, 6, 7}, kInt64);
  Tensor dx = x.copy_to(Device::CUDA), dy = y.copy_to(Device::CUDA);
  copy_into_batch(s, {true, true, false}, x, y, 1);
  copy_into_batch(to_cuda(s), {true, true, false}, dx, dy, 1);
  CHECK(same_bits(dx, x));
  CHECK(same_bits(dy, y));
  // The batches of a run: plans of (seed, step), built from CUDA volumes and from CPU ones.
  const unet3d_app::SegData data = synthetic_seg_data();
  unet3d_app::Recipe r;
  r.batch = 4;
  r.patch = {8, 8, 8};
  r.foreground_prob = 2.0 / 3.0;
  r.flip_axes = {0, 1, 2};
  r.augment = unet3d_app::Augmentation::NnUnet;
  std::vector<Sample> cpu_volumes;
  for (const unet3d_app::SegVolume& v : data.train) cpu_volumes.push_back({v.image, v.label});
  const unet3d_app::GpuBatchBuilder builder(data, r, 42, unet3d_app::BatchSlice{0, 4});
  CHECK(unet3d_app::GpuBatchBuilder::volume_bytes(data) == 3u * 12 * 10 * 14 * 12);
  for (int64_t step : {0, 1, 7}) {
    CAPTURE(step);
    Tensor gx, gy, cx, cy, gx2, gy2;
    builder.build(step, gx, gy);
    CHECK(gx.is_cuda());
    unet3d_app::build_planned_batch(cpu_volumes, unet3d_app::plan_training_batch_slice(data, r, 42, step, 0, 4), cx, cy);
    check_close(gx, cx, 1e-5, 1e-5, "batch x");
    CHECK(same_bits(gy, cy));  // nnU-Net's defaults: no elastic offsets
    builder.build(step, gx2, gy2);  // a function of (seed, step): the same bits again
    CHECK(same_bits(gx2, gx.copy_to(Device::CPU)));
  }
}
