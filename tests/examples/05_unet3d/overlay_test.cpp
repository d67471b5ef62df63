// Tests of examples/05_unet3d/overlay.h: the slice chosen, the grey window and colours of the
// composed picture, and the PNG decoded back with libpng pixel by pixel.
#include "examples/05_unet3d/overlay.h"

#include <doctest/doctest.h>
#include <png.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"

using namespace halfgrad;
using namespace unet3d_app;

namespace {

// A 4 x 2 x 3 (D, H, W) volume: intensities 0..23 in order, so slice z holds 6z..6z+5.
Tensor ramp_image() {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  return Tensor::from_vector(v, {4, 2, 3});
}

}  // namespace

TEST_CASE("unet3d overlay: the slice with most foreground (label first, then prediction, else the middle)") {
  std::vector<int64_t> lab(24, 0), prd(24, 0);
  lab[6 * 1 + 0] = 1;                                // z = 1: one voxel
  lab[6 * 3 + 0] = lab[6 * 3 + 4] = 2;               // z = 3: two voxels
  for (int i = 0; i < 6; ++i) prd[6 * 2 + i] = 1;    // the prediction's best is z = 2
  const Tensor label = Tensor::from_labels(lab, {4, 2, 3}), pred = Tensor::from_labels(prd, {4, 2, 3});
  CHECK(overlay_slice(label, pred) == 3);
  CHECK(overlay_slice(Tensor(), pred) == 2);
  CHECK(overlay_slice(Tensor(), Tensor::from_labels(std::vector<int64_t>(24, 0), {4, 2, 3})) == 2);  // D / 2
}

TEST_CASE("unet3d overlay: compose_overlay's panels, grey window and colours; write_png decodes to the same pixels") {
  std::vector<int64_t> lab(24, 0), prd(24, 0);
  lab[6 * 3 + 1] = 1;  // slice 3, (y, x) = (0, 1): class 1 in the label
  lab[6 * 3 + 2] = 1;
  prd[6 * 3 + 5] = 2;  // (1, 2): class 2 in the prediction
  const Tensor label = Tensor::from_labels(lab, {4, 2, 3}), pred = Tensor::from_labels(prd, {4, 2, 3});
  const RgbImage img = compose_overlay(ramp_image(), label, pred);
  const int64_t scale = kMinPanelHeight / 2;  // H = 2 -> 128x
  REQUIRE(img.height == 2 * scale);
  REQUIRE(img.width == 3 * 3 * scale);
  auto px = [&](int64_t panel, int64_t y, int64_t x, int k) {
    return img.rgb[static_cast<size_t>(3 * ((y * scale) * img.width + (panel * 3 + x) * scale) + k)];
  };
  // The window is [p1, p99] of 0..23 (nearest rank): [0, 23]; slice 3 holds 18..23.
  const auto g = [](float v) { return 255.0 * static_cast<double>(v / 23.0f); };  // as compose_overlay
  const auto grey = [&](float v) { return static_cast<int>(std::lround(g(v))); };
  const auto blend = [&](float v, int colour) { return static_cast<int>(std::lround(0.5 * g(v) + 0.5 * colour)); };
  CHECK(px(0, 0, 0, 0) == grey(18));
  CHECK(px(0, 1, 2, 1) == grey(23));
  CHECK(px(1, 0, 0, 0) == grey(18));                                        // label panel, background
  CHECK(px(1, 0, 1, 0) == blend(19, 255));  // class 1: red (255, 0, 0)
  CHECK(px(1, 0, 1, 2) == blend(19, 0));
  CHECK(px(2, 1, 2, 1) == blend(23, 200));  // class 2: green (0, 200, 0)
  CHECK(px(2, 0, 1, 0) == grey(19));                                        // not predicted

  const std::string path = (std::filesystem::temp_directory_path() / "halfgrad_overlay_test.png").string();
  write_png(path, img);
  png_image pi;
  std::memset(&pi, 0, sizeof pi);
  pi.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&pi, path.c_str()) != 0);
  pi.format = PNG_FORMAT_RGB;
  CHECK(pi.width == img.width);
  CHECK(pi.height == img.height);
  std::vector<uint8_t> back(PNG_IMAGE_SIZE(pi));
  REQUIRE(png_image_finish_read(&pi, nullptr, back.data(), 0, nullptr) != 0);
  CHECK(back == img.rgb);
  std::filesystem::remove(path);

  // Without a label: two panels. Bad shapes are errors.
  CHECK(compose_overlay(ramp_image(), Tensor(), pred).width == 2 * 3 * scale);
  CHECK_THROWS_AS(compose_overlay(ramp_image(), Tensor(), Tensor::from_labels({1}, {1, 1, 1})), Error);
  CHECK_THROWS_AS(write_png("/nonexistent/dir/x.png", img), Error);
}
