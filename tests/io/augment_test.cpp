// Tests of io/augment.h: every transform against an independent numpy/scipy implementation of
// batchgenerators' (tests/golden/augment.json, written by `/usr/bin/python3
// tools/golden/make_augment_golden.py`), the identity when nothing is drawn, rotations by 90 degrees
// as exact permutations, labels that stay labels, the documented draws, nnU-Net's defaults, and the
// errors.
#include "io/augment.h"

#include <cmath>
#include <cstring>
#include <set>

#include "tests/check_error.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::io;
using halfgrad::testing::check_close;
using halfgrad::testing::check_error;
using halfgrad::testing::tolerance_for;

namespace {

constexpr double kPi = AugmentOptions::kPi;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// A z-scored-looking image (no voxel exactly 0) and labels {0, 2, 5} in blobs.
Sample test_volume(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor image = Tensor::randn(s, g);
  std::vector<int64_t> lab(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < lab.size(); ++i) {
    const double u = g.uniform();
    lab[i] = u < 0.5 ? 0 : u < 0.8 ? 2 : 5;
  }
  return Sample{image, Tensor::from_labels(lab, s)};
}

std::array<int64_t, 3> to_start(const nlohmann::json& j) { return {j[0].get<int64_t>(), j[1].get<int64_t>(), j[2].get<int64_t>()}; }

// Every transform on, probability 1 (each gate still draws its uniform).
AugmentOptions all_on() {
  AugmentOptions o;
  o.rotation_p = o.scale_p = o.elastic_p = o.noise_p = o.blur_p = o.blur_p_per_channel = o.brightness_p = 1.0;
  o.contrast_p = o.low_res_p = o.low_res_p_per_channel = o.gamma_inverted_p = o.gamma_p = 1.0;
  o.elastic_alpha = {0.0, 3.0};
  o.elastic_sigma = {1.0, 2.0};
  return o;
}

}  // namespace

TEST_CASE("io augment: every transform float32/int64 (D,H,W) matches numpy/scipy (tests/golden/augment.json)") {
  const testing::GoldenFile file = testing::load_golden("augment.json");
  CHECK(file.generator() == "/usr/bin/python3 tools/golden/make_augment_golden.py");
  const auto tol = tolerance_for(kFloat32);
  for (const std::string& name : file.case_names()) {
    CAPTURE(name);
    const testing::GoldenCase c = file.at(name);
    const std::string op = c.op();
    if (op == "spatial_transform") {
      const Sample volume{c.input("image"), c.input("label")};
      SpatialParams p;
      p.scale = c.param<double>("scale");
      const std::vector<double> angles = c.param<std::vector<double>>("angles");
      for (int a = 0; a < 3; ++a) p.angles[a] = angles[a];
      if (c.has_input("noise0"))
        for (int a = 0; a < 3; ++a) {
          const std::string k = std::to_string(a);
          const Tensor d = elastic_displacement(c.input("noise" + k), c.param<double>("alpha"), c.param<double>("sigma"));
          check_close(d, c.output("displacement" + k), tol, name + " displacement " + k);
          p.displacement[a] = c.output("displacement" + k);  // the reference's, so the two checks stay apart
        }
      const Sample out = spatial_transform(volume, to_start(c.params().at("start")), c.param<Shape>("size"), p);
      check_close(out.image, c.output("image"), tol, name + " image");
      CHECK(same_bits(out.label, c.output("label")));
    } else if (op == "gaussian_blur") {
      check_close(gaussian_blur(c.input("image"), c.param<double>("sigma")), c.output("image"), tol, name);
    } else if (op == "multiply_brightness") {
      check_close(multiply_brightness(c.input("image"), c.param<double>("factor")), c.output("image"), tol, name);
    } else if (op == "adjust_contrast") {
      check_close(adjust_contrast(c.input("image"), c.param<double>("factor"), c.param<bool>("preserve_range")),
                  c.output("image"), tol, name);
    } else if (op == "simulate_low_resolution") {
      check_close(simulate_low_resolution(c.input("image"), c.param<double>("zoom")), c.output("image"), tol, name);
    } else if (op == "adjust_gamma") {
      check_close(adjust_gamma(c.input("image"), c.param<double>("gamma"), c.param<bool>("invert"),
                               c.param<bool>("retain_stats")),
                  c.output("image"), tol, name);
    } else {
      FAIL_CHECK("unknown op " << op);
    }
  }
}

TEST_CASE("io augment: gaussian_noise float32 (D,H,W) adds std * one gen.normal() per voxel, in storage order") {
  const Sample s = test_volume({3, 4, 5}, 1);
  Generator gen(9), replay(9);
  const Tensor out = gaussian_noise(s.image, 0.07, gen);
  const float* x = s.image.data<float>();
  std::vector<float> want(60);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(x[i] + 0.07 * replay.normal());
  CHECK(out.to_float_vector() == want);
  CHECK(gen.uniform() == replay.uniform());  // nothing more was drawn
}

TEST_CASE("io augment: nothing drawn gives extract_region's bits, inside and reaching outside the volume") {
  const Sample v = test_volume({9, 10, 11}, 2);
  for (const std::array<int64_t, 3>& start : {std::array<int64_t, 3>{1, 2, 3}, {-2, 4, 8}, {0, 0, 0}}) {
    CAPTURE(start[0]);
    const Shape size{5, 6, 7};
    Generator gen(3), untouched(3);
    const Sample none = augment_patch(v, start, size, AugmentOptions::none(), gen);
    CHECK(same_bits(none.image, extract_region(v.image, start, size)));
    CHECK(same_bits(none.label, extract_region(v.label, start, size)));
    CHECK(gen.uniform() == untouched.uniform());  // none() draws nothing
    // The spatial transform with the identity reads the same voxels.
    const Sample identity = spatial_transform(v, start, size, SpatialParams{});
    CHECK(same_bits(identity.image, none.image));
    CHECK(same_bits(identity.label, none.label));
  }
  // The whole-volume path (a recipe without patches): start 0, size the volume's.
  Generator gen(4);
  const Sample whole = augment_patch(v, {0, 0, 0}, v.image.shape(), AugmentOptions::none(), gen);
  CHECK(same_bits(whole.image, v.image));
  CHECK(same_bits(whole.label, v.label));
}

TEST_CASE("io augment: rotation by 90 degrees about each axis is an exact permutation of image and label") {
  // A 6^3 patch at (1, 2, 3) of an 8x10x12 volume; with c' = c Rx/Ry/Rz(90 deg) (rotate_coords_3d) the
  // patch voxel (i, j, k) reads start + (i, k, 5-j), (5-k, j, i) and (j, 5-i, k).
  const Sample v = test_volume({8, 10, 12}, 5);
  const std::array<int64_t, 3> start{1, 2, 3};
  const int64_t n = 6;
  for (int axis = 0; axis < 3; ++axis) {
    CAPTURE(axis);
    SpatialParams p;
    p.angles[axis] = kPi / 2;
    const Sample out = spatial_transform(v, start, {n, n, n}, p);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < n; ++k) {
          std::array<int64_t, 3> q = axis == 0   ? std::array<int64_t, 3>{i, k, n - 1 - j}
                                     : axis == 1 ? std::array<int64_t, 3>{n - 1 - k, j, i}
                                                 : std::array<int64_t, 3>{j, n - 1 - i, k};
          const int64_t src = ((start[0] + q[0]) * 10 + start[1] + q[1]) * 12 + start[2] + q[2];
          const int64_t dst = (i * n + j) * n + k;
          mismatches += out.image.data<float>()[dst] != v.image.data<float>()[src];
          mismatches += out.label.data<int64_t>()[dst] != v.label.data<int64_t>()[src];
        }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("io augment: labels stay in the volume's label set (plus background outside), every transform on") {
  const Sample v = test_volume({10, 12, 9}, 6);
  std::set<int64_t> seen;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Generator gen(seed);
    const Sample out = augment_patch(v, {-1, 2, 1}, {6, 8, 8}, all_on(), gen);
    for (double l : out.label.to_double_vector()) seen.insert(static_cast<int64_t>(l));
    CHECK(out.image.shape() == Shape{6, 8, 8});
    CHECK(out.label.shape() == Shape{6, 8, 8});
  }
  for (int64_t l : seen) CHECK((l == 0 || l == 2 || l == 5));
  CHECK(seen.size() == 3);
}

TEST_CASE("io augment: augment_patch draws exactly what augment.h lists, every transform on") {
  const Sample v = test_volume({9, 8, 10}, 7);
  const std::array<int64_t, 3> start{1, 0, 2};
  const Shape size{6, 6, 7};
  const AugmentOptions o = all_on();
  Generator gen(11), r(11);
  const Sample got = augment_patch(v, start, size, o, gen);
  // The replay, with the pure functions: U(range) and the two-sided draw as augment.h defines them.
  auto U = [&](Range range) { return range.lo + (range.hi - range.lo) * r.uniform(); };
  auto two_sided = [&](Range range) { return r.uniform() < 0.5 && range.lo < 1 ? U({range.lo, 1}) : U({std::max(range.lo, 1.0), range.hi}); };
  SpatialParams p;
  r.uniform();  // 1. elastic_p
  const double alpha = U(o.elastic_alpha), sigma = U(o.elastic_sigma);
  for (Tensor& d : p.displacement) {
    std::vector<float> noise(static_cast<size_t>(shape_numel(size)));
    for (float& e : noise) e = static_cast<float>(r.uniform() * 2 - 1);
    d = elastic_displacement(Tensor::from_vector(noise, size), alpha, sigma);
  }
  r.uniform();  // 2. rotation_p
  for (double& a : p.angles) {
    r.uniform();  // rotation_p_per_axis
    a = U(o.rotation_angle);
  }
  r.uniform();  // 3. scale_p
  p.scale = two_sided(o.scale);
  Tensor x = spatial_transform(v, start, size, p).image;
  r.uniform();  // 4. noise_p
  x = gaussian_noise(x, U(o.noise_variance), r);
  r.uniform(), r.uniform();  // 5. blur_p, blur_p_per_channel
  x = gaussian_blur(x, U(o.blur_sigma));
  r.uniform();  // 6.
  x = multiply_brightness(x, U(o.brightness));
  r.uniform();  // 7.
  x = adjust_contrast(x, two_sided(o.contrast), true);
  r.uniform(), r.uniform();  // 8.
  x = simulate_low_resolution(x, U(o.low_res_zoom));
  r.uniform();  // 9.
  x = adjust_gamma(x, two_sided(o.gamma), true, true);
  r.uniform();  // 10.
  x = adjust_gamma(x, two_sided(o.gamma), false, true);
  CHECK(same_bits(got.image, x));
  CHECK(same_bits(got.label, spatial_transform(v, start, size, p).label));
  CHECK(gen.uniform() == r.uniform());
}

TEST_CASE("io augment: the same seed gives the same bits, another seed other draws") {
  const Sample v = test_volume({10, 12, 9}, 8);
  const AugmentOptions o = all_on();
  Generator a(21), b(21), c(22);
  const Sample sa = augment_patch(v, {1, 1, 1}, {6, 8, 8}, o, a);
  const Sample sb = augment_patch(v, {1, 1, 1}, {6, 8, 8}, o, b);
  const Sample sc = augment_patch(v, {1, 1, 1}, {6, 8, 8}, o, c);
  CHECK(same_bits(sa.image, sb.image));
  CHECK(same_bits(sa.label, sb.label));
  CHECK_FALSE(same_bits(sa.image, sc.image));
  // nnU-Net's defaults: over many samples each transform fires about as often as its probability.
  int spatial = 0;
  const Sample plain{extract_region(v.image, {1, 1, 1}, {6, 8, 8}), extract_region(v.label, {1, 1, 1}, {6, 8, 8})};
  const AugmentOptions spatial_only = AugmentOptions().with_noise(0, {0, 0.1}).with_blur(0, {0.5, 1}).with_brightness(0, {1, 1})
                                          .with_contrast(0, {1, 1}).with_low_resolution(0, {1, 1}).with_gamma(0, 0, {1, 1});
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Generator g(seed);
    spatial += !same_bits(augment_patch(v, {1, 1, 1}, {6, 8, 8}, spatial_only, g).image, plain.image);
  }
  // P(rotation or scaling) = 1 - 0.8 * 0.8 = 0.36: 144 of 400 expected, sd 9.6.
  CHECK(spatial > 144 - 40);
  CHECK(spatial < 144 + 40);
}

TEST_CASE("io augment: AugmentOptions' defaults are nnU-Net v2's get_training_transforms") {
  const AugmentOptions o;
  CHECK(o.rotation_p == 0.2);
  CHECK(o.rotation_angle.lo == doctest::Approx(-kPi / 6));
  CHECK(o.rotation_angle.hi == doctest::Approx(kPi / 6));
  CHECK(o.rotation_p_per_axis == 1.0);
  CHECK(o.scale_p == 0.2);
  CHECK((o.scale.lo == 0.7 && o.scale.hi == 1.4));
  CHECK(o.elastic_p == 0.0);  // off in v2; v1's alpha and sigma kept
  CHECK((o.elastic_alpha.lo == 0.0 && o.elastic_alpha.hi == 900.0 && o.elastic_sigma.lo == 9.0 && o.elastic_sigma.hi == 13.0));
  CHECK((o.noise_p == 0.1 && o.noise_variance.lo == 0.0 && o.noise_variance.hi == 0.1));
  CHECK((o.blur_p == 0.2 && o.blur_p_per_channel == 0.5 && o.blur_sigma.lo == 0.5 && o.blur_sigma.hi == 1.0));
  CHECK((o.brightness_p == 0.15 && o.brightness.lo == 0.75 && o.brightness.hi == 1.25));
  CHECK((o.contrast_p == 0.15 && o.contrast.lo == 0.75 && o.contrast.hi == 1.25 && o.contrast_preserve_range));
  CHECK((o.low_res_p == 0.25 && o.low_res_p_per_channel == 0.5 && o.low_res_zoom.lo == 0.5 && o.low_res_zoom.hi == 1.0));
  CHECK((o.gamma_inverted_p == 0.1 && o.gamma_p == 0.3 && o.gamma.lo == 0.7 && o.gamma.hi == 1.5 && o.gamma_retain_stats));
  const AugmentOptions n = AugmentOptions::none();
  for (double p : {n.rotation_p, n.scale_p, n.elastic_p, n.noise_p, n.blur_p, n.brightness_p, n.contrast_p, n.low_res_p,
                   n.gamma_inverted_p, n.gamma_p})
    CHECK(p == 0.0);
}

TEST_CASE("io augment: bad samples, sizes, options and parameters are refused, naming the function and the value") {
  const Sample v = test_volume({4, 5, 6}, 9);
  Generator gen(1);
  const AugmentOptions ok;
  auto augment = [&](const Sample& s, const Shape& size, const AugmentOptions& o) { augment_patch(s, {0, 0, 0}, size, o, gen); };
  check_error([&] { augment(Sample{v.image, Tensor::zeros({4, 5, 6}, kFloat32)}, {2, 2, 2}, ok); },
              {"augment_patch", "label", "float32", "expected int64"});
  check_error([&] { augment(Sample{v.image, Tensor::zeros({4, 5, 5}, kInt64)}, {2, 2, 2}, ok); }, {"augment_patch", "[4, 5, 5]"});
  check_error([&] { augment(Sample{Tensor::zeros({4, 5}), v.label}, {2, 2, 2}, ok); }, {"augment_patch", "image", "(D, H, W)"});
  check_error([&] { augment(v, {2, 0, 2}, ok); }, {"augment_patch", "size", "positive"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_rotation(1.5, {0, 1})); },
              {"augment_patch", "rotation_p 1.5", "probability in [0, 1]"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_blur_p_per_channel(-0.1)); }, {"blur_p_per_channel -0.1"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_scale(0.2, {1.4, 0.7})); },
              {"augment_patch", "scale [1.4, 0.7]", "lo <= hi"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_blur(0.2, {0, 1})); }, {"blur_sigma [0, 1]", "lo > 0"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_elastic(0.2, {0, 900}, {-1, 13})); }, {"elastic_sigma [-1, 13]"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_elastic(0.2, {-5, 900}, {9, 13})); }, {"elastic_alpha [-5, 900]", "lo >= 0"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_low_resolution(0.25, {0.5, 2})); }, {"low_res_zoom [0.5, 2]", "hi <= 1"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_gamma(0.1, 0.3, {0.7, NAN})); }, {"gamma [0.7, nan]", "finite"});
  check_error([&] { augment(v, {2, 2, 2}, AugmentOptions().with_noise(0.1, {-0.1, 0.1})); }, {"noise_variance [-0.1, 0.1]"});
  // The pure functions name themselves and the parameter.
  check_error([&] { gaussian_blur(v.image, 0.0); }, {"gaussian_blur", "sigma 0", "> 0"});
  check_error([&] { gaussian_blur(v.label, 1.0); }, {"gaussian_blur", "int64", "float32"});
  check_error([&] { simulate_low_resolution(v.image, -0.5); }, {"simulate_low_resolution", "zoom -0.5"});
  check_error([&] { adjust_gamma(v.image, 0.0, false, true); }, {"adjust_gamma", "gamma 0"});
  check_error([&] { adjust_contrast(v.image, INFINITY, true); }, {"adjust_contrast", "factor inf"});
  check_error([&] { multiply_brightness(v.image, NAN); }, {"multiply_brightness", "factor nan"});
  check_error([&] { gaussian_noise(v.image, -1.0, gen); }, {"gaussian_noise", "std -1"});
  check_error([&] { elastic_displacement(v.image, 1.0, 0.0); }, {"elastic_displacement", "sigma 0"});
  SpatialParams bad;
  bad.scale = 0.0;
  check_error([&] { spatial_transform(v, {0, 0, 0}, {2, 2, 2}, bad); }, {"spatial_transform", "scale 0"});
  SpatialParams wrong_disp;
  wrong_disp.displacement[0] = Tensor::zeros({2, 2, 2});
  check_error([&] { spatial_transform(v, {0, 0, 0}, {2, 2, 2}, wrong_disp); },
              {"spatial_transform", "displacement 1", "undefined", "[2, 2, 2]"});
}
