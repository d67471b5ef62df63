// Tests of examples/05_unet3d/sliding_window.h: nnU-Net's Gaussian map and tile steps against
// values from sliding_window_reference.py (numpy re-implementation of nnunetv2's
// compute_gaussian / compute_steps_for_sliding_window), tiles covering every voxel, blending that
// reproduces a pointwise network exactly on odd shapes, one tile = the network's own logits (a real
// U-Net, bit for bit), and mirroring TTA that flips each output back.
#include "examples/05_unet3d/sliding_window.h"

#include <doctest/doctest.h>

#include <cmath>

#include "autograd/node.h"
#include "core/error.h"
#include "nn/unet3d.h"

using namespace halfgrad;
using namespace unet3d_app;

namespace {

// /usr/bin/python3 tests/examples/05_unet3d/sliding_window_reference.py: compute_gaussian((3, 4, 5)).
const float kGaussian345[60] = {
    5.726618468e-08f, 2.664336307e-06f, 9.582658095e-06f, 2.664336307e-06f, 5.726618468e-08f, 2.310282798e-05f,
    1.074870001e-03f, 3.865920240e-03f, 1.074870001e-03f, 2.310282798e-05f, 1.707080810e-04f, 7.942275144e-03f,
    2.856549993e-02f, 7.942275144e-03f, 1.707080810e-04f, 2.310282798e-05f, 1.074870001e-03f, 3.865920240e-03f,
    1.074870001e-03f, 2.310282798e-05f, 2.004732323e-06f, 9.327112639e-05f, 3.354626242e-04f, 9.327112639e-05f,
    2.004732323e-06f, 8.087667520e-04f, 3.762825578e-02f, 1.353352815e-01f, 3.762825578e-02f, 8.087667520e-04f,
    5.976022687e-03f, 2.780373096e-01f, 1.000000000e+00f, 2.780373096e-01f, 5.976022687e-03f, 8.087667520e-04f,
    3.762825578e-02f, 1.353352815e-01f, 3.762825578e-02f, 8.087667520e-04f, 5.726618468e-08f, 2.664336307e-06f,
    9.582658095e-06f, 2.664336307e-06f, 5.726618468e-08f, 2.310282798e-05f, 1.074870001e-03f, 3.865920240e-03f,
    1.074870001e-03f, 2.310282798e-05f, 1.707080810e-04f, 7.942275144e-03f, 2.856549993e-02f, 7.942275144e-03f,
    1.707080810e-04f, 2.310282798e-05f, 1.074870001e-03f, 3.865920240e-03f, 1.074870001e-03f, 2.310282798e-05f};

// A pointwise "network": logit k of voxel v = (k + 1) * x_v - k, whatever the tile; blending any
// tiling of it must give the same values everywhere.
Tensor pointwise(const Tensor& x, int64_t K) {
  const Shape& s = x.shape();
  const int64_t n = s[2] * s[3] * s[4];
  Tensor y = Tensor::empty({1, K, s[2], s[3], s[4]}, kFloat32);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < n; ++i) y.data<float>()[k * n + i] = static_cast<float>(k + 1) * x.data<float>()[i] - static_cast<float>(k);
  return y;
}

}  // namespace

TEST_CASE("unet3d sliding window: gaussian_importance_map matches nnU-Net's compute_gaussian (float32)") {
  SUBCASE("3x4x5, every value") {
    const Tensor g = gaussian_importance_map({3, 4, 5});
    REQUIRE(g.shape() == Shape{3, 4, 5});
    for (int i = 0; i < 60; ++i) CHECK(g.data<float>()[i] == doctest::Approx(kGaussian345[i]).epsilon(1e-6));
  }
  SUBCASE("48x64x48 (the CPU recipe's window): sum, min, corner, centre") {
    const Tensor g = gaussian_importance_map({48, 64, 48});
    const float* v = g.data<float>();
    double sum = 0;
    float lo = 1;
    for (int64_t i = 0; i < g.numel(); ++i) { sum += v[i]; lo = std::min(lo, v[i]); }
    CHECK(sum == doctest::Approx(4.534997130e+03).epsilon(1e-6));
    CHECK(lo == doctest::Approx(3.775134372e-11).epsilon(1e-6));
    CHECK(v[0] == doctest::Approx(3.775134372e-11).epsilon(1e-6));
    CHECK(v[(24 * 64 + 32) * 48 + 24] == 1.0f);
    CHECK(v[(10 * 64 + 50) * 48 + 3] == doctest::Approx(1.143911140e-05).epsilon(1e-6));
  }
  CHECK_THROWS_AS(gaussian_importance_map({0, 4, 4}), Error);
  CHECK_THROWS_AS(gaussian_importance_map({4, 4, 4}, 0.0), Error);
}

TEST_CASE("unet3d sliding window: tile_starts matches nnU-Net's compute_steps_for_sliding_window") {
  // sliding_window_reference.py; tile_step_size = 1 - overlap.
  CHECK(tile_starts(64, 48, 0.5) == std::vector<int64_t>{0, 16});
  CHECK(tile_starts(160, 48, 0.5) == std::vector<int64_t>{0, 22, 45, 67, 90, 112});
  CHECK(tile_starts(49, 48, 0.5) == std::vector<int64_t>{0, 1});
  CHECK(tile_starts(96, 32, 0.5) == std::vector<int64_t>{0, 16, 32, 48, 64});
  CHECK(tile_starts(100, 32, 0.5) == std::vector<int64_t>{0, 14, 27, 41, 54, 68});
  CHECK(tile_starts(48, 48, 0.5) == std::vector<int64_t>{0});
  CHECK(tile_starts(200, 64, 0.75) == std::vector<int64_t>{0, 15, 30, 45, 60, 76, 91, 106, 121, 136});
  CHECK(tile_starts(17, 16, 0.75) == std::vector<int64_t>{0, 1});
  CHECK(tile_starts(33, 16, 0.75) == std::vector<int64_t>{0, 3, 7, 10, 14, 17});
  CHECK_THROWS_AS(tile_starts(10, 11, 0.5), Error);
  CHECK_THROWS_AS(tile_starts(10, 5, 1.0), Error);
}

TEST_CASE("unet3d sliding window: the tiles cover every voxel of the padded volume") {
  for (const Shape& s : {Shape{37, 51, 29}, Shape{1, 1, 1}, Shape{160, 17, 64}, Shape{48, 64, 48}})
    for (double overlap : {0.0, 0.5, 0.9}) {
      CAPTURE(shape_str(s));
      CAPTURE(overlap);
      SlidingWindowOptions o;
      o.window = {32, 16, 48};
      o.overlap = overlap;
      const TilePlan p = plan_tiles(s, o);
      for (size_t a = 0; a < 3; ++a) {
        CHECK(p.padded[a] % 16 == 0);
        CHECK(p.padded[a] >= s[a]);
        CHECK(p.window[a] <= p.padded[a]);
        std::vector<int> covered(static_cast<size_t>(p.padded[a]), 0);
        for (int64_t st : p.starts[a]) {
          CHECK(st >= 0);
          CHECK(st + p.window[a] <= p.padded[a]);
          for (int64_t i = st; i < st + p.window[a]; ++i) covered[static_cast<size_t>(i)] = 1;
        }
        for (size_t i = 0; i < covered.size(); ++i) CHECK_MESSAGE(covered[i] == 1, "axis " << a << " voxel " << i);
      }
    }
}

TEST_CASE("unet3d sliding window: a pointwise network is reproduced on an odd 37x51x29 volume, 2 channels, 3 classes") {
  Generator gen(7);
  const Tensor image = Tensor::randn({2, 37, 51, 29}, gen);
  SlidingWindowOptions o;
  o.window = {16, 32, 16};
  o.divisor = 16;
  int64_t calls = 0, last_total = 0;
  const Network net = [&](const Tensor& x) {
    CHECK(x.shape() == Shape{1, 2, 16, 32, 16});
    Tensor y = pointwise(x, 3);  // uses channel 0 only
    return y;
  };
  const TilePlan plan = plan_tiles({37, 51, 29}, o);
  const Tensor out = sliding_window_logits(net, image, o, [&](int64_t done, int64_t total) { calls = done; last_total = total; });
  REQUIRE(out.shape() == Shape{3, 37, 51, 29});
  CHECK(calls == plan.num_tiles());
  CHECK(last_total == plan.num_tiles());
  CHECK(plan.num_tiles() > 8);
  const int64_t n = 37 * 51 * 29;
  double worst = 0;
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t i = 0; i < n; ++i) {
      const double want = (k + 1) * static_cast<double>(image.data<float>()[i]) - k;
      worst = std::max(worst, std::fabs(out.data<float>()[k * n + i] - want) / (1 + std::fabs(want)));
    }
  CHECK(worst < 1e-5);  // float32 sums of a few Gaussian-weighted copies of the same value
}

TEST_CASE("unet3d sliding window: one tile is whole-volume inference, bit for bit (UNet3d, 2 levels, float32)") {
  manual_seed(3);
  nn::UNet3d model(nn::UNet3dOptions().channels({4, 8}).bottleneck(8).num_classes(3));
  model.eval();
  NoGradGuard no_grad;
  Generator gen(11);
  const Tensor image = Tensor::randn({1, 13, 10, 7}, gen);  // pads to 16 x 12 x 8 (divisor 4)
  SlidingWindowOptions o;
  o.window = {48, 64, 48};
  o.divisor = 4;
  const Tensor out = sliding_window_logits([&](const Tensor& x) { return model(x); }, image, o);
  REQUIRE(out.shape() == Shape{3, 13, 10, 7});
  // The reference: zero padding at the end, one forward, the padding cut off.
  Tensor padded = Tensor::zeros({1, 1, 16, 12, 8}, kFloat32);
  for (int64_t z = 0; z < 13; ++z)
    for (int64_t y = 0; y < 10; ++y)
      for (int64_t x = 0; x < 7; ++x)
        padded.data<float>()[(z * 12 + y) * 8 + x] = image.data<float>()[(z * 10 + y) * 7 + x];
  const Tensor ref = model(padded).contiguous();
  int64_t mismatches = 0;
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t z = 0; z < 13; ++z)
      for (int64_t y = 0; y < 10; ++y)
        for (int64_t x = 0; x < 7; ++x)
          mismatches += out.data<float>()[((k * 13 + z) * 10 + y) * 7 + x] != ref.data<float>()[((k * 16 + z) * 12 + y) * 8 + x];
  CHECK(mismatches == 0);
}

TEST_CASE("unet3d sliding window: mirroring TTA flips each output back (a symmetric and an asymmetric network)") {
  Generator gen(5);
  const Tensor image = Tensor::randn({1, 8, 12, 4}, gen);
  SlidingWindowOptions o;
  o.window = {8, 12, 4};
  o.divisor = 4;
  o.mirror_axes = {0, 1, 2};
  SUBCASE("pointwise (commutes with every flip): TTA changes nothing") {
    int64_t calls = 0;
    const Tensor out = sliding_window_logits([&](const Tensor& x) { ++calls; return pointwise(x, 2); }, image, o);
    CHECK(calls == 8);
    for (int64_t i = 0; i < image.numel(); ++i) {
      CHECK(out.data<float>()[i] == doctest::Approx(image.data<float>()[i]).epsilon(1e-6));
      CHECK(out.data<float>()[image.numel() + i] == doctest::Approx(2 * image.data<float>()[i] - 1).epsilon(1e-6));
    }
  }
  SUBCASE("logit a = the voxel's coordinate along axis a: half the mirrorings reverse it, the mean is the centre") {
    const Network coords = [](const Tensor& x) {
      const Shape& s = x.shape();
      Tensor y = Tensor::empty({1, 3, s[2], s[3], s[4]}, kFloat32);
      const int64_t n = s[2] * s[3] * s[4];
      for (int64_t z = 0; z < s[2]; ++z)
        for (int64_t yy = 0; yy < s[3]; ++yy)
          for (int64_t xx = 0; xx < s[4]; ++xx) {
            const int64_t i = (z * s[3] + yy) * s[4] + xx;
            y.data<float>()[i] = static_cast<float>(z);
            y.data<float>()[n + i] = static_cast<float>(yy);
            y.data<float>()[2 * n + i] = static_cast<float>(xx);
          }
      return y;
    };
    const Tensor out = sliding_window_logits(coords, image, o);
    const int64_t n = image.numel();
    for (int64_t i = 0; i < n; ++i) {
      CHECK(out.data<float>()[i] == doctest::Approx(3.5));          // (8 - 1) / 2
      CHECK(out.data<float>()[n + i] == doctest::Approx(5.5));      // (12 - 1) / 2
      CHECK(out.data<float>()[2 * n + i] == doctest::Approx(1.5));  // (4 - 1) / 2
    }
    // Mirroring x only (the cpu recipe's flip axes): 2 passes; z and y stay the voxel's own.
    o.mirror_axes = {2};
    CHECK(mirror_passes(o) == 2);
    int64_t calls = 0;
    const Tensor xonly = sliding_window_logits([&](const Tensor& x) { ++calls; return coords(x); }, image, o);
    CHECK(calls == 2);
    const int64_t v = (7 * 12 + 3) * 4 + 1;  // z 7, y 3, x 1
    CHECK(xonly.data<float>()[v] == 7.0f);
    CHECK(xonly.data<float>()[n + v] == 3.0f);
    CHECK(xonly.data<float>()[2 * n + v] == doctest::Approx(1.5));
    o.mirror_axes.clear();
    CHECK(mirror_passes(o) == 1);
    const Tensor plain = sliding_window_logits(coords, image, o);
    CHECK(plain.data<float>()[(7 * 12 + 0) * 4 + 0] == 7.0f);  // z = 7 without TTA
    o.mirror_axes = {3};
    CHECK_THROWS_AS(mirror_passes(o), Error);
  }
}

TEST_CASE("unet3d sliding window: bad inputs are errors naming what was expected") {
  SlidingWindowOptions o;
  const Network net = [](const Tensor& x) { return pointwise(x, 2); };
  CHECK_THROWS_AS(sliding_window_logits(net, Tensor::zeros({4, 4, 4}), o), Error);  // not (C, D, H, W)
  const Network wrong = [](const Tensor&) { return Tensor::zeros({1, 2, 3, 3, 3}); };
  try {
    sliding_window_logits(wrong, Tensor::zeros({1, 4, 4, 4}), o);
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("expected (1, K, 16, 16, 16)") != std::string::npos);
  }
  o.overlap = 1.0;
  CHECK_THROWS_AS(plan_tiles({4, 4, 4}, o), Error);
}
