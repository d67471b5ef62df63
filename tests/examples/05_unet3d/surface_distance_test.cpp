// examples/05_unet3d/surface_distance.h: HD95 and the normalised surface Dice of eval.
//  - against an independent implementation (tools/golden/make_surface_metrics_golden.py: MONAI's
//    definitions with numpy and scipy.ndimage) on synthetic shapes: concentric spheres, shifted boxes
//    with anisotropic spacing, an ellipsoid against a sphere, three classes (one missing from the
//    prediction, one absent from both), masks touching the volume's faces;
//  - with distances known by hand: one voxel against one voxel (HD95 is their distance, the NSD
//    steps from 0 to 1 at it), a mask against itself;
//  - the distance transform against brute force on random features with anisotropic spacing;
//  - the bad inputs (shapes, spacing, tolerance) refused by name.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "examples/05_unet3d/surface_distance.h"

using namespace halfgrad;
using unet3d_app::SurfaceScores;

namespace {

// The golden file's shapes, painted in order (make_surface_metrics_golden.py's paint()).
Tensor paint(const std::array<int64_t, 3>& shape, const nlohmann::json& shapes) {
  Tensor out = Tensor::zeros({shape[0], shape[1], shape[2]}, kInt64);
  int64_t* v = out.data<int64_t>();
  for (const auto& s : shapes) {
    const int64_t label = s["label"];
    for (int64_t z = 0; z < shape[0]; ++z)
      for (int64_t y = 0; y < shape[1]; ++y)
        for (int64_t x = 0; x < shape[2]; ++x) {
          bool in;
          if (s["kind"] == "ellipsoid") {
            const double dz = (z - s["centre"][0].get<double>()) / s["radii"][0].get<double>();
            const double dy = (y - s["centre"][1].get<double>()) / s["radii"][1].get<double>();
            const double dx = (x - s["centre"][2].get<double>()) / s["radii"][2].get<double>();
            in = dz * dz + dy * dy + dx * dx <= 1.0;
          } else {
            in = z >= s["lo"][0].get<int64_t>() && z < s["hi"][0].get<int64_t>() && y >= s["lo"][1].get<int64_t>() &&
                 y < s["hi"][1].get<int64_t>() && x >= s["lo"][2].get<int64_t>() && x < s["hi"][2].get<int64_t>();
          }
          if (in) v[(z * shape[1] + y) * shape[2] + x] = label;
        }
  }
  return out;
}

Tensor single_voxel(const std::array<int64_t, 3>& shape, std::array<int64_t, 3> at) {
  Tensor out = Tensor::zeros({shape[0], shape[1], shape[2]}, kInt64);
  out.data<int64_t>()[(at[0] * shape[1] + at[1]) * shape[2] + at[2]] = 1;
  return out;
}

}  // namespace

TEST_CASE("unet3d surface metrics: HD95 and NSD match MONAI's definitions computed with scipy on synthetic shapes") {
  std::ifstream f(std::string(HALFGRAD_SOURCE_DIR) + "/tests/golden/surface_metrics.json");
  REQUIRE(f.good());
  const nlohmann::json golden = nlohmann::json::parse(f);
  REQUIRE(golden["cases"].size() == 5);
  for (const auto& c : golden["cases"]) {
    const std::string name = c["name"];
    INFO(name);
    const std::array<int64_t, 3> shape{c["shape"][0], c["shape"][1], c["shape"][2]};
    const std::array<double, 3> spacing{c["spacing"][0], c["spacing"][1], c["spacing"][2]};
    const std::vector<SurfaceScores> got = unet3d_app::surface_scores_per_class(
        paint(shape, c["pred"]), paint(shape, c["target"]), c["num_classes"], spacing, c["tolerance"]);
    REQUIRE(got.size() == c["expected"].size());
    for (size_t k = 0; k < got.size(); ++k) {
      const auto& e = c["expected"][k];
      INFO("class " << k + 1);
      CHECK(got[k].hd95_defined == e["hd95_defined"].get<bool>());
      CHECK(got[k].hd95_mm == doctest::Approx(e["hd95_mm"].get<double>()).epsilon(1e-12));
      CHECK(got[k].surface_dice == doctest::Approx(e["surface_dice"].get<double>()).epsilon(1e-12));
    }
  }
}

TEST_CASE("unet3d surface metrics: one voxel against one voxel is their distance, NSD steps at it; a mask against itself is 0 and 1") {
  const std::array<int64_t, 3> shape{6, 7, 8};
  const std::array<double, 3> spacing{2.0, 0.5, 1.5};
  // (1, 2, 3) against (4, 6, 3): (3 * 2, 4 * 0.5, 0) mm apart = sqrt(36 + 4) mm.
  const Tensor a = single_voxel(shape, {1, 2, 3}), b = single_voxel(shape, {4, 6, 3});
  const double d = std::sqrt(40.0);
  const SurfaceScores below = unet3d_app::surface_scores_per_class(a, b, 2, spacing, d - 1e-9)[0];
  const SurfaceScores at = unet3d_app::surface_scores_per_class(a, b, 2, spacing, d)[0];
  CHECK(below.hd95_defined);
  CHECK(below.hd95_mm == doctest::Approx(d).epsilon(1e-15));
  CHECK(below.surface_dice == 0.0);
  CHECK(at.surface_dice == 1.0);
  const Tensor blob = paint(shape, nlohmann::json::parse(
                                       R"([{"kind": "ellipsoid", "label": 1, "centre": [3, 3, 4], "radii": [2, 3, 3]}])"));
  const SurfaceScores same = unet3d_app::surface_scores_per_class(blob, blob, 2, spacing, 0.0)[0];
  CHECK(same.hd95_mm == 0.0);
  CHECK(same.surface_dice == 1.0);
}

TEST_CASE("unet3d surface metrics: the distance transform equals brute force (random features, anisotropic spacing)") {
  std::mt19937 rng(7);
  const std::array<int64_t, 3> shape{7, 9, 11};
  const std::array<double, 3> spacing{1.7, 0.6, 1.1};
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<uint8_t> feature(7 * 9 * 11, 0);
    const int count = trial == 0 ? 1 : 5 * trial;
    for (int i = 0; i < count; ++i) feature[rng() % feature.size()] = 1;
    const std::vector<double> dt = unet3d_app::squared_distance_transform(feature, shape, spacing);
    for (int64_t i = 0; i < static_cast<int64_t>(feature.size()); ++i) {
      double best = std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < static_cast<int64_t>(feature.size()); ++j) {
        if (!feature[j]) continue;
        const double dz = (i / 99 - j / 99) * spacing[0], dy = ((i / 11) % 9 - (j / 11) % 9) * spacing[1],
                     dx = (i % 11 - j % 11) * spacing[2];
        best = std::min(best, dz * dz + dy * dy + dx * dx);
      }
      CHECK(dt[i] == doctest::Approx(best).epsilon(1e-12));
    }
  }
  const std::vector<double> none = unet3d_app::squared_distance_transform(std::vector<uint8_t>(7 * 9 * 11, 0), shape, spacing);
  CHECK(std::isinf(none[0]));
  CHECK(std::isinf(none.back()));
}

TEST_CASE("unet3d surface metrics: own_grid cuts a padded map back to the volume's grid") {
  Tensor padded = Tensor::zeros({4, 5, 6}, kInt64);
  int64_t* p = padded.data<int64_t>();
  for (int64_t i = 0; i < 4 * 5 * 6; ++i) p[i] = i;
  const Tensor own = unet3d_app::own_grid(padded, {2, 3, 4});
  REQUIRE(own.shape() == Shape{2, 3, 4});
  for (int64_t z = 0; z < 2; ++z)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t x = 0; x < 4; ++x) CHECK(own.data<int64_t>()[(z * 3 + y) * 4 + x] == (z * 5 + y) * 6 + x);
  CHECK(unet3d_app::own_grid(padded, {0, 0, 0}).shape() == padded.shape());
  CHECK(unet3d_app::own_grid(padded, {4, 5, 6}).shape() == padded.shape());
  CHECK_THROWS_WITH_AS(unet3d_app::own_grid(padded, {5, 5, 6}), doctest::Contains("does not fit its padded map"), Error);
  // A prediction in the padding adds a surface the volume's own grid has not: HD95 changes.
  Tensor label = Tensor::zeros({8, 8, 8}, kInt64), pred = Tensor::zeros({8, 8, 8}, kInt64);
  label.data<int64_t>()[(2 * 8 + 2) * 8 + 2] = 1;
  pred.data<int64_t>()[(2 * 8 + 2) * 8 + 2] = 1;
  pred.data<int64_t>()[(7 * 8 + 7) * 8 + 7] = 1;  // in the padding beyond a 5^3 grid
  CHECK(unet3d_app::surface_scores_per_class(pred, label, 2, {1, 1, 1}, 1.0)[0].hd95_mm > 0);
  CHECK(unet3d_app::surface_scores_per_class(unet3d_app::own_grid(pred, {5, 5, 5}), unet3d_app::own_grid(label, {5, 5, 5}),
                                             2, {1, 1, 1}, 1.0)[0].hd95_mm == 0.0);
}

TEST_CASE("unet3d surface metrics: numpy's linear percentile") {
  CHECK(unet3d_app::linear_percentile({3.0}, 95) == 3.0);
  CHECK(unet3d_app::linear_percentile({4.0, 1.0, 3.0, 2.0}, 95) == doctest::Approx(3.85));  // rank 2.85
  CHECK(unet3d_app::linear_percentile({1.0, 2.0}, 0) == 1.0);
  CHECK(unet3d_app::linear_percentile({1.0, 2.0}, 100) == 2.0);
}

TEST_CASE("unet3d surface metrics: shapes, spacing and tolerance are checked, naming what was expected") {
  const Tensor a = Tensor::zeros({4, 4, 4}, kInt64), b = Tensor::zeros({4, 4, 5}, kInt64);
  CHECK_THROWS_WITH_AS(unet3d_app::surface_scores_per_class(a, b, 2, {1, 1, 1}, 1.0),
                       doctest::Contains("expected two (D, H, W) maps of one shape"), Error);
  CHECK_THROWS_WITH_AS(unet3d_app::surface_scores_per_class(a, a, 2, {1, 0, 1}, 1.0),
                       doctest::Contains("expected finite values > 0"), Error);
  CHECK_THROWS_WITH_AS(unet3d_app::surface_scores_per_class(a, a, 2, {1, 1, 1}, -1.0),
                       doctest::Contains("expected a finite value >= 0"), Error);
  CHECK_THROWS_WITH_AS(unet3d_app::surface_scores_per_class(a, a, 2, {1, 1, 1}, std::nan("")),
                       doctest::Contains("expected a finite value >= 0"), Error);
}
