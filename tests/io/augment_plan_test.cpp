// Tests of io/augment.h's plan (the GPU path's split of the draws from the per-voxel work), on the
// CPU: draw_augment_plan draws exactly what augment.h lists; apply_augment_plan is the composition of
// the single transforms with the plan's parameters (the reference of the CUDA kernels,
// tests/cuda/augment_cuda_test.cpp); a plan with nothing drawn copies extract_region's bits; the Philox
// noise has the stated distribution and does not depend on anything but (key, voxel); copy_into_batch
// is io::flip's reversal written into a batch row; and bad arguments are refused by name.
#include <cmath>
#include <cstring>

#include "io/augment.h"
#include "tests/check_error.h"

using namespace halfgrad;
using namespace halfgrad::io;
using halfgrad::testing::check_error;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

Sample test_volume(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor image = Tensor::randn(s, g);
  std::vector<int64_t> lab(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = g.uniform() < 0.6 ? 0 : 3;
  return Sample{image, Tensor::from_labels(lab, s)};
}

// Every transform on, probability 1 (each gate still draws its uniform), a small elastic range.
AugmentOptions all_on() {
  AugmentOptions o;
  o.rotation_p = o.scale_p = o.elastic_p = o.noise_p = o.blur_p = o.blur_p_per_channel = o.brightness_p = 1.0;
  o.contrast_p = o.low_res_p = o.low_res_p_per_channel = o.gamma_inverted_p = o.gamma_p = 1.0;
  o.elastic_alpha = {0.0, 3.0};
  o.elastic_sigma = {1.0, 2.0};
  return o;
}

}  // namespace

TEST_CASE("io augment plan: draw_augment_plan draws the key, then augment.h's steps 1-10 without per-voxel draws") {
  const AugmentOptions o = all_on();
  Generator gen(77), ref(77);
  const AugmentPlan p = draw_augment_plan(o, gen);
  auto u = [&](Range r) { return r.lo + (r.hi - r.lo) * ref.uniform(); };
  auto two_sided = [&](Range r) { return ref.uniform() < 0.5 && r.lo < 1.0 ? u({r.lo, 1.0}) : u({std::max(r.lo, 1.0), r.hi}); };
  CHECK(p.key == ref.engine()());
  ref.uniform();  // elastic gate
  const double alpha = u(o.elastic_alpha), sigma = u(o.elastic_sigma);
  REQUIRE(p.elastic.has_value());
  CHECK(p.elastic->alpha == alpha);
  CHECK(p.elastic->sigma == sigma);
  ref.uniform();  // rotation gate
  for (int a = 0; a < 3; ++a) {
    ref.uniform();  // the axis' gate
    CHECK(p.angles[a] == u(o.rotation_angle));
  }
  ref.uniform();  // scale gate
  CHECK(p.scale == two_sided(o.scale));
  CHECK(p.spatial);
  ref.uniform();
  CHECK(*p.noise_std == u(o.noise_variance));  // no normals follow
  ref.uniform();
  ref.uniform();
  CHECK(*p.blur_sigma == u(o.blur_sigma));
  ref.uniform();
  CHECK(*p.brightness == u(o.brightness));
  ref.uniform();
  CHECK(*p.contrast == two_sided(o.contrast));
  ref.uniform();
  ref.uniform();
  CHECK(*p.low_res_zoom == u(o.low_res_zoom));
  ref.uniform();
  CHECK(*p.gamma_inverted == two_sided(o.gamma));
  ref.uniform();
  CHECK(*p.gamma == two_sided(o.gamma));
  CHECK(gen.uniform() == ref.uniform());  // nothing more was drawn

  // Nothing on: the key alone, and no transform.
  Generator g2(5), r2(5);
  const AugmentPlan none = draw_augment_plan(AugmentOptions::none(), g2);
  CHECK(none.key == r2.engine()());
  CHECK(g2.uniform() == r2.uniform());
  CHECK(!none.spatial);
  CHECK(!none.elastic);
  CHECK(!(none.noise_std || none.blur_sigma || none.brightness || none.contrast || none.low_res_zoom ||
          none.gamma_inverted || none.gamma));
}

TEST_CASE("io augment plan: apply_augment_plan float32/int64 (D,H,W) on the CPU is the single transforms composed") {
  const Sample vol = test_volume({9, 11, 10}, 3);
  const std::array<int64_t, 3> start{1, -2, 2};
  const Shape size{7, 8, 9};
  for (uint64_t seed : {1ull, 2ull, 3ull}) {
    CAPTURE(seed);
    Generator gen(seed);
    const AugmentPlan p = draw_augment_plan(all_on(), gen);
    const Sample got = apply_augment_plan(vol, start, size, p);
    SpatialParams sp;
    sp.angles = p.angles;
    sp.scale = p.scale;
    for (int a = 0; a < 3; ++a)
      sp.displacement[a] = elastic_displacement(philox_uniform_noise(size, p.key, 1 + a, Device::CPU), p.elastic->alpha,
                                                p.elastic->sigma);
    Sample want = spatial_transform(vol, start, size, sp);
    Tensor x = gaussian_noise_philox(want.image, *p.noise_std, p.key);
    x = gaussian_blur(x, *p.blur_sigma);
    x = multiply_brightness(x, *p.brightness);
    x = adjust_contrast(x, *p.contrast, true);
    x = simulate_low_resolution(x, *p.low_res_zoom);
    x = adjust_gamma(x, *p.gamma_inverted, true, true);
    x = adjust_gamma(x, *p.gamma, false, true);
    CHECK(same_bits(got.image, x));
    CHECK(same_bits(got.label, want.label));
    CHECK(same_bits(apply_augment_plan(vol, start, size, p).image, got.image));  // the same bits again
  }
  // Nothing drawn: extract_region's bits, also reaching outside the volume.
  Generator g(4);
  const AugmentPlan none = draw_augment_plan(AugmentOptions::none(), g);
  const Sample crop = apply_augment_plan(vol, {-1, 5, 3}, {6, 8, 9}, none);
  CHECK(same_bits(crop.image, extract_region(vol.image, {-1, 5, 3}, {6, 8, 9})));
  CHECK(same_bits(crop.label, extract_region(vol.label, {-1, 5, 3}, {6, 8, 9})));
}

TEST_CASE("io augment plan: Philox noise float32 (40,50,60): N(0, std^2) and U[-1, 1) by (key, voxel) alone") {
  const Shape s{40, 50, 60};
  const Tensor zero = Tensor::zeros(s);
  const std::vector<float> n = gaussian_noise_philox(zero, 0.3, 99).to_float_vector();
  double sum = 0, sq = 0;
  for (float v : n) sum += v;
  const double mean = sum / static_cast<double>(n.size());
  for (float v : n) sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / static_cast<double>(n.size()));
  CHECK(std::fabs(mean) < 5 * 0.3 / std::sqrt(static_cast<double>(n.size())));
  CHECK(std::fabs(sd - 0.3) < 0.003);
  const std::vector<float> u = philox_uniform_noise(s, 99, 2, Device::CPU).to_float_vector();
  double umean = 0;
  float lo = 1, hi = -1;
  for (float v : u) {
    umean += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  umean /= static_cast<double>(u.size());
  CHECK(std::fabs(umean) < 0.01);
  CHECK(lo >= -1.0f);
  CHECK(hi < 1.0f);
  // Voxel i's numbers are the same in a volume of another shape (they depend on (key, stream, i) only).
  const std::vector<float> u2 = philox_uniform_noise({1, 1, 1000}, 99, 2, Device::CPU).to_float_vector();
  for (size_t i = 0; i < u2.size(); ++i) CHECK(u2[i] == u[i]);
  // Other keys and streams, other numbers.
  CHECK(philox_uniform_noise(s, 98, 2, Device::CPU).to_float_vector() != u);
  CHECK(philox_uniform_noise(s, 99, 3, Device::CPU).to_float_vector() != u);
}

TEST_CASE("io augment plan: copy_into_batch writes io::flip's reversal into batch row b, float32 and int64") {
  const Sample s = test_volume({3, 4, 5}, 8);
  Tensor x = Tensor::zeros({3, 1, 3, 4, 5}), y = Tensor::zeros({3, 3, 4, 5}, kInt64);
  const std::array<bool, 3> flip{true, false, true};
  copy_into_batch(s, flip, x, y, 1);
  const Tensor want_x = io::flip(io::flip(s.image, 0), 2), want_y = io::flip(io::flip(s.label, 0), 2);
  const int64_t n = s.image.numel();
  CHECK(std::memcmp(x.data<float>() + n, want_x.data<float>(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(y.data<int64_t>() + n, want_y.data<int64_t>(), n * sizeof(int64_t)) == 0);
  for (int64_t i = 0; i < n; ++i) CHECK(x.data<float>()[i] == 0.0f);  // the other rows untouched
  check_error([&] { copy_into_batch(s, flip, x, y, 3); }, {"copy_into_batch: row 3"});
  Tensor bad = Tensor::zeros({3, 1, 3, 4, 6});
  check_error([&] { copy_into_batch(s, flip, bad, y, 0); }, {"copy_into_batch: batch x [3, 1, 3, 4, 6]"});
}

TEST_CASE("io augment plan: bad options, samples and sizes are refused, naming the function") {
  Generator g(1);
  AugmentOptions bad;
  bad.noise_p = 2.0;
  check_error([&] { draw_augment_plan(bad, g); }, {"draw_augment_plan: AugmentOptions.noise_p 2"});
  const Sample vol = test_volume({4, 4, 4}, 1);
  const AugmentPlan p = draw_augment_plan(AugmentOptions::none(), g);
  check_error([&] { apply_augment_plan(vol, {0, 0, 0}, {4, 0, 4}, p); }, {"apply_augment_plan: size"});
  check_error([&] { apply_augment_plan(Sample{vol.image, Tensor()}, {0, 0, 0}, {4, 4, 4}, p); }, {"apply_augment_plan: label"});
  check_error([&] { gaussian_noise_philox(vol.image, -1.0, 1); }, {"gaussian_noise_philox: std -1"});
  check_error([&] { philox_uniform_noise({2, 2}, 1, 0, Device::CPU); }, {"philox_uniform_noise: size"});
}
