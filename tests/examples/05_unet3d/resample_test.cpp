// Tests of unet3d/resample.h (the spacing choice, nnU-Net's shape and target-spacing rules, trilinear
// images, one-hot linear labels; hand-computed values) and of the program around it: train --spacing
// resamples an MSD folder, records the grid in the checkpoint, and predict segments an input on that
// grid and writes its label map on the input's own grid and affine.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "examples/05_unet3d/data.h"
#include "nn/checkpoint.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test_case.h"
#include "tests/examples/05_unet3d/toy_msd.h"
#include "tests/temp_dir.h"
#include "unet3d/recipe.h"
#include "unet3d/resample.h"

using namespace halfgrad;
using namespace unet3d_app;
using halfgrad::testing::check_error;
using halfgrad::testing::TempDir;

namespace {

// (D, H, W) float32 with value f(z, y, x).
template <typename F>
Tensor volume_of(int64_t d, int64_t h, int64_t w, F f) {
  std::vector<float> v;
  for (int64_t z = 0; z < d; ++z)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) v.push_back(static_cast<float>(f(z, y, x)));
  return Tensor::from_vector(v, {d, h, w});
}

// An MSD folder of 5 pairs of 8x16x16 voxels at `spacing`: a slab of class 1 in z 2..5 (class 2 in
// its x >= 8 half) in noise, so that labels and images both change under resampling.
void make_spacing_dataset(const std::string& root, const Spacing& spacing) {
  std::filesystem::create_directories(root + "/imagesTr");
  std::filesystem::create_directories(root + "/labelsTr");
  // world (x, y, z) = affine (i, j, k): the spacing on the diagonal, in x, y, z order.
  const std::array<double, 16> affine{spacing[2], 0, 0, 0, 0, spacing[1], 0, 0, 0, 0, spacing[0], 0, 0, 0, 0, 1};
  for (int i = 0; i < 5; ++i) {
    const std::string n = "case_" + std::to_string(i) + ".nii.gz";
    Generator gen(40 + i);
    std::vector<int64_t> lab;
    for (int64_t z = 0; z < 8; ++z)
      for (int64_t y = 0; y < 16; ++y)
        for (int64_t x = 0; x < 16; ++x) lab.push_back(z >= 2 && z < 6 && y >= 3 && y < 13 ? (x < 8 ? 1 : 2) : 0);
    const Tensor label = Tensor::from_labels(lab, {8, 16, 16});
    Tensor image = Tensor::randn({8, 16, 16}, gen);
    for (size_t v = 0; v < lab.size(); ++v) image.data<float>()[v] += 3.0f * static_cast<float>(lab[v]);
    io::write_nifti(root + "/imagesTr/" + n, halfgrad::testing::toy_msd::volume(image, affine, spacing));
    io::write_nifti(root + "/labelsTr/" + n, halfgrad::testing::toy_msd::volume(label, affine, spacing));
  }
  halfgrad::testing::toy_msd::write_dataset_json(root, 5);
}

}  // namespace

TEST_CASE("resample: SpacingChoice reads native, median and Z,Y,X, prints them back, refuses anything else") {
  CHECK(SpacingChoice::parse("native", "t").mode == SpacingChoice::Mode::Native);
  CHECK(SpacingChoice::parse("median", "t").mode == SpacingChoice::Mode::Median);
  const SpacingChoice f = SpacingChoice::parse("3,0.8,0.75", "t");
  CHECK(f.mode == SpacingChoice::Mode::Fixed);
  CHECK(f.mm == Spacing{3.0, 0.8, 0.75});
  CHECK(f.str() == "3,0.8,0.75");
  CHECK(SpacingChoice::parse(f.str(), "t").mm == f.mm);
  CHECK(SpacingChoice::median().str() == "median");
  CHECK(spacing_str({1, 0.5, 2}) == "1x0.5x2 mm");
  CHECK(spacing_str({0.0010000000474974513, 1, 1}) == "0.001x1x1 mm");
  for (const char* bad : {"", "3,0.8", "3,0.8,0.8,", "3,0.8,0.8,1", "a,b,c", "3;0.8;0.8", " 3,1,1", "Median"})
    check_error([&] { SpacingChoice::parse(bad, "--spacing"); }, {"--spacing", "expected native, median or three spacings Z,Y,X"});
  for (const char* bad : {"0,1,1", "1,-1,1", "1,1,1e9", "nan,1,1", "inf,1,1", "1,1,0.0001"})
    check_error([&] { SpacingChoice::parse(bad, "--spacing"); }, {"--spacing", "expected every value in [0.001, 1000] mm"});
  check_error([&] { SpacingChoice::fixed({1, 0, 1}); }, {"SpacingChoice::fixed", "spacing 1x0x1 mm"});
}

TEST_CASE("resample: resampled_shape is round(shape * spacing / target), ties to even, at least 1") {
  CHECK(resampled_shape({10, 20, 30}, {2, 1, 0.5}, {1, 1, 1}) == Extent{20, 20, 15});
  CHECK(resampled_shape({5, 7, 9}, {1.5, 1.5, 1.5}, {3, 3, 3}) == Extent{2, 4, 4});  // 2.5 -> 2, 3.5 -> 4, 4.5 -> 4
  CHECK(resampled_shape({1, 1, 1}, {1, 1, 1}, {100, 100, 100}) == Extent{1, 1, 1});
  CHECK(resampled_shape({48, 64, 48}, {1, 1, 1}, {1, 1, 1}) == Extent{48, 64, 48});
  check_error([&] { resampled_shape({0, 1, 1}, {1, 1, 1}, {1, 1, 1}); }, {"resampled_shape", "expected extents >= 1"});
  check_error([&] { resampled_shape({4, 4, 4}, {1, 0, 1}, {1, 1, 1}); }, {"resampled_shape (its voxel size)", "spacing 1x0x1"});
  check_error([&] { resampled_shape({512, 512, 512}, {1, 1, 1}, {0.25, 0.25, 0.25}, "FILE"); },
              {"FILE: 512x512x512 voxels of 1x1x1 mm resampled to 0.25x0.25x0.25 mm", "expected at most 2^30"});
  check_error([&] { resampled_shape({1 << 30, 1, 1}, {1000, 1, 1}, {0.001, 1, 1}); }, {"resampled_shape", "at most 2^30"});
  CHECK(resampled_shape({1024, 1024, 1024}, {1, 1, 1}, {1, 1, 1}) == Extent{1024, 1024, 1024});  // 2^30 exactly
}

TEST_CASE("resample: target_spacing is the median, with nnU-Net's 10th percentile on a coarse, thin axis") {
  // Isotropic enough: the per-axis median (an even count averages the middle two, as numpy).
  CHECK(target_spacing({{1, 1, 1}, {2, 0.5, 1}, {3, 1, 2}, {1.5, 1, 1}}, {{10, 10, 10}, {10, 10, 10}, {10, 10, 10}, {10, 10, 10}},
                       "t") == Spacing{1.75, 1, 1});
  // z 5 mm against 0.8 (> 3x) and 20 slices against 256 (< 1/3): z takes the 10th percentile of
  // [3, 4, 5, 5, 6]: position 0.4 between 3 and 4, 3.4.
  const std::vector<Spacing> aniso{{5, 0.8, 0.8}, {4, 0.7, 0.7}, {6, 0.9, 0.9}, {5, 0.8, 0.8}, {3, 0.75, 0.75}};
  const std::vector<Extent> thin(5, Extent{20, 256, 256});
  const Spacing t = target_spacing(aniso, thin, "t");
  CHECK(t[0] == doctest::Approx(3.4).epsilon(1e-12));
  CHECK(t[1] == 0.8);
  CHECK(t[2] == 0.8);
  // The same spacings with 200 slices: not thin, so the median stays.
  CHECK(target_spacing(aniso, std::vector<Extent>(5, Extent{200, 256, 256}), "t") == Spacing{5, 0.8, 0.8});
  // A percentile finer than the other axes is raised to their coarsest + 1e-5.
  const std::vector<Spacing> mixed{{1, 2, 2}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}, {10, 2, 2},
                                   {10, 2, 2}, {10, 2, 2}, {10, 2, 2}, {10, 2, 2}};
  CHECK(target_spacing(mixed, std::vector<Extent>(9, Extent{10, 100, 100}), "t")[0] == 2.0 + 1e-5);
  check_error([&] { target_spacing({}, {}, "the training images"); }, {"the training images", "at least one"});
  check_error([&] { target_spacing({{1, 1, 1}}, {}, "t"); }, {"1 spacing(s) and 0 shape(s)"});
  check_error([&] { target_spacing({{1, 1, 0}}, {{4, 4, 4}}, "DIR"); }, {"DIR", "spacing 1x1x0"});
}

TEST_CASE("resample: resample_image is trilinear with align_corners false, float32 3-D or 4-D, CPU") {
  // x ramp 0..3 (4 voxels) to 8: source (o + 0.5) / 2 - 0.5 clamped to [0, 3].
  const Tensor ramp = volume_of(2, 3, 4, [](int64_t, int64_t, int64_t x) { return x; });
  const Tensor up = resample_image(ramp, {2, 3, 8});
  REQUIRE(up.shape() == Shape{2, 3, 8});
  const std::vector<float> want{0, 0.25f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3};
  for (int64_t z = 0; z < 2; ++z)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t x = 0; x < 8; ++x) CHECK(up.data<float>()[(z * 3 + y) * 8 + x] == want[static_cast<size_t>(x)]);
  // z ramp 0..7 to 4: source 2 o + 0.5.
  const Tensor zr = volume_of(8, 2, 2, [](int64_t z, int64_t, int64_t) { return z; });
  const Tensor down = resample_image(zr, {4, 2, 2});
  for (int64_t z = 0; z < 4; ++z) CHECK(down.data<float>()[z * 4 + 3] == doctest::Approx(2.0 * z + 0.5).epsilon(1e-6));
  // (C, D, H, W): each channel on its own; the y ramp of channel 1 is 10x channel 0's.
  std::vector<float> two;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 1 * 4 * 1; ++i) two.push_back(static_cast<float>((c ? 10 : 1) * i));
  const Tensor ch = resample_image(Tensor::from_vector(two, {2, 1, 4, 1}), {1, 2, 1});  // y 4 -> 2: 2 o + 0.5
  REQUIRE(ch.shape() == Shape{2, 1, 2, 1});
  CHECK(ch.to_float_vector() == std::vector<float>{0.5f, 2.5f, 5.0f, 25.0f});
  // The same shape is the input itself: a volume at the target spacing keeps its bits.
  CHECK(resample_image(ramp, {2, 3, 4}).is_same(ramp));
  check_error([&] { resample_image(Tensor::zeros({2, 2}), {1, 1, 1}); }, {"resample_image", "[2, 2] float32", "expected float32 (D, H, W)"});
  check_error([&] { resample_image(Tensor::zeros({2, 2, 2}, kFloat64), {1, 1, 1}); }, {"resample_image", "float64"});
  check_error([&] { resample_image(ramp, {2, 0, 4}); }, {"resample_image", "expected extents >= 1"});
}

TEST_CASE("resample: resample_label is the argmax of each class resampled linearly, ties to the lower class") {
  // Along x, [0 0 1 1] to 8 voxels: output 3 reads 1.25 (weights 0.75 on class 0), output 4 reads 1.75.
  const Tensor l4 = Tensor::from_labels({0, 0, 1, 1}, {1, 1, 4});
  const Tensor l8 = resample_label(l4, 2, {1, 1, 8});
  CHECK(l8.dtype() == kInt64);
  CHECK(l8.to_double_vector() == std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1});
  // Two voxels to one: an even split between two classes goes to the lower one, whichever comes first.
  CHECK(resample_label(Tensor::from_labels({1, 0}, {1, 1, 2}), 2, {1, 1, 1}).item_at(0) == 0);
  CHECK(resample_label(Tensor::from_labels({2, 1}, {1, 1, 2}), 3, {1, 1, 1}).item_at(0) == 1);
  // Three classes in a 2x2x2 cube to one voxel: class 2 holds 4 of 8 corners, 1 holds 3, 0 one.
  CHECK(resample_label(Tensor::from_labels({2, 2, 2, 2, 1, 1, 1, 0}, {2, 2, 2}), 3, {1, 1, 1}).item_at(0) == 2);
  // A label never leaves the set, and the same shape is the input itself.
  const Tensor big = Tensor::from_labels(std::vector<int64_t>(27, 1), {3, 3, 3});
  CHECK(resample_label(big, 2, {3, 3, 3}).is_same(big));
  for (double v : resample_label(big, 2, {5, 4, 7}).to_double_vector()) CHECK(v == 1);
  check_error([&] { resample_label(Tensor::from_labels({0, 3}, {1, 1, 2}), 3, {1, 1, 1}); },
              {"resample_label", "label 3 at flat index 1", "[0, 3)"});
  check_error([&] { resample_label(Tensor::zeros({1, 1, 2}), 3, {1, 1, 1}); }, {"resample_label", "float32", "int64"});
  check_error([&] { resample_label(l4, 0, {1, 1, 1}); }, {"resample_label", "num_classes 0"});
}

TEST_CASE("unet3d --spacing: train resamples the folder, records the grid; predict writes on the input's grid") {
  TempDir dir("resample");
  const std::string data = dir.file("msd");
  make_spacing_dataset(data, {2, 1, 1});  // 8x16x16 voxels of 2x1x1 mm
  // load_msd_data: median (2, 1, 1) leaves every volume as it is; a fixed 1 mm doubles z.
  const Recipe r = recipe_by_name("tiny");
  const SegData median = load_msd_data(data, r, false, kReferenceFold, SpacingChoice::median());
  REQUIRE(median.spacing_mm);
  CHECK(*median.spacing_mm == Spacing{2, 1, 1});
  CHECK(median.train[0].extent == std::array<int64_t, 3>{8, 16, 16});
  const SegData native = load_msd_data(data, r, false, kReferenceFold, SpacingChoice::native());
  CHECK(!native.spacing_mm);
  CHECK(native.train[0].image.to_float_vector() == median.train[0].image.to_float_vector());
  const SegData iso = load_msd_data(data, r, false, kReferenceFold, SpacingChoice::fixed({1, 1, 1}));
  CHECK(iso.train[0].extent == std::array<int64_t, 3>{16, 16, 16});
  CHECK(iso.train[0].spacing_mm == std::array<double, 3>{1, 1, 1});
  // The slab z 2..5 of 2 mm covers z 4..11 at 1 mm (voxel centres 4.5 .. 11.5 mm of 1 mm fall in
  // 4 .. 12 mm): class 1 at x < 8, 2 beyond, in the rows y 3..12.
  const Tensor lab = iso.train[0].label;  // padded at the end to the data's volume shape
  const int64_t H = lab.size(1), W = lab.size(2);
  for (int64_t z = 0; z < 16; ++z)
    CHECK(lab.data<int64_t>()[(z * H + 8) * W + 2] == (z >= 4 && z < 12 ? 1 : 0));

  const std::string run = dir.file("run");
  std::vector<std::string> args = halfgrad::testing::toy_msd::tiny_train(data, run);
  args.insert(args.end(), {"--spacing", "1,1,1"});
  REQUIRE(halfgrad::testing::toy_msd::run(args) == 0);
  const nlohmann::json meta = nn::read_checkpoint_metadata(run + "/model.safetensors");
  REQUIRE(meta.contains("spacing_mm"));
  CHECK(meta["spacing_mm"] == nlohmann::json::array({1.0, 1.0, 1.0}));
  const std::string out = dir.file("pred.nii.gz");
  REQUIRE(halfgrad::testing::toy_msd::run({"predict", "--checkpoint", run, "--input", data + "/imagesTr/case_0.nii.gz",
                                           "--output", out, "--no-progress"}) == 0);
  const io::Volume in = io::read_nifti(data + "/imagesTr/case_0.nii.gz");
  const io::Volume pred = io::read_label_nifti(out, 3);
  CHECK(pred.data.shape() == Shape{8, 16, 16});
  CHECK(pred.spacing == in.spacing);
  CHECK(pred.affine == in.affine);
  // eval scores on the model's grid and says which.
  {
    std::ostringstream buf;
    std::streambuf* saved = std::cout.rdbuf(buf.rdbuf());
    const int rc = halfgrad::testing::toy_msd::run({"eval", "--checkpoint", run, "--data", data});
    std::cout.rdbuf(saved);
    REQUIRE(rc == 0);
    std::string text = buf.str();  // eval's JSON is its last line
    while (!text.empty() && text.back() == '\n') text.pop_back();
    const nlohmann::json j = nlohmann::json::parse(text.substr(text.rfind('\n') + 1));
    CHECK(j["spacing_mm"] == nlohmann::json::array({1.0, 1.0, 1.0}));
    CHECK(j["volumes"] == 5);
  }

  // --spacing native records no grid; --spacing needs --data; it is not a --resume option.
  const std::string run2 = dir.file("run_native");
  std::vector<std::string> a2 = halfgrad::testing::toy_msd::tiny_train(data, run2);
  a2.insert(a2.end(), {"--spacing", "native"});
  REQUIRE(halfgrad::testing::toy_msd::run(a2) == 0);
  CHECK(!nn::read_checkpoint_metadata(run2 + "/model.safetensors").contains("spacing_mm"));
  check_error([&] { halfgrad::testing::toy_msd::run({"train", "--config", "tiny", "--out", dir.file("r3"), "--spacing", "1,1,1"}); },
              {"--spacing needs --data"});
  check_error([&] {
    halfgrad::testing::toy_msd::run({"train", "--config", "tiny", "--data", data, "--out", dir.file("r5"),
                                     "--deep-supervision", "--device", "cuda", "--gpus", "2"});
  }, {"--deep-supervision runs on one GPU", "drop --gpus 2"});
  // A spacing that would make a volume of over 2^30 voxels is refused before anything is allocated.
  std::vector<std::string> fine = halfgrad::testing::toy_msd::tiny_train(data, dir.file("r4"));
  fine.insert(fine.end(), {"--spacing", "0.01,0.01,0.01"});
  check_error([&] { halfgrad::testing::toy_msd::run(fine); },
              {"case_0.nii.gz: 8x16x16 voxels of 2x1x1 mm resampled to 0.01x0.01x0.01 mm", "expected at most 2^30"});
  check_error([&] { halfgrad::testing::toy_msd::run({"train", "--resume", run, "--spacing", "2,2,2"}); }, {"--spacing"});
}

CUDA_TEST_CASE("resample cuda: resample_image on the GPU matches the CPU's; predict --device cuda writes the CPU's labels") {
  Generator gen(7);
  const Tensor x = Tensor::randn({2, 9, 13, 7}, gen);
  for (const Extent e : {Extent{5, 20, 11}, Extent{18, 6, 7}, Extent{9, 13, 7}}) {
    const Tensor cpu = resample_image(x, e);
    const Tensor gpu = resample_image(x.copy_to(Device::CUDA), e);
    REQUIRE(gpu.is_cuda());
    const std::vector<float> a = cpu.to_float_vector(), b = gpu.copy_to(Device::CPU).to_float_vector();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-5));
  }
  TempDir dir("resample_cuda");
  const std::string data = dir.file("msd");
  make_spacing_dataset(data, {2, 1, 1});
  const std::string run = dir.file("run");
  std::vector<std::string> args = halfgrad::testing::toy_msd::tiny_train(data, run);
  args.insert(args.end(), {"--spacing", "1,1,1"});
  REQUIRE(halfgrad::testing::toy_msd::run(args) == 0);
  for (const char* device : {"cpu", "cuda"})
    REQUIRE(halfgrad::testing::toy_msd::run({"predict", "--checkpoint", run, "--input", data + "/imagesTr/case_1.nii.gz",
                                             "--output", dir.file(std::string(device) + ".nii.gz"), "--device", device,
                                             "--no-progress"}) == 0);
  const io::Volume cpu = io::read_label_nifti(dir.file("cpu.nii.gz"), 3), gpu = io::read_label_nifti(dir.file("cuda.nii.gz"), 3);
  CHECK(gpu.data.shape() == Shape{8, 16, 16});
  CHECK(gpu.affine == cpu.affine);
  const std::vector<double> lc = cpu.data.to_double_vector(), lg = gpu.data.to_double_vector();
  size_t differ = 0;
  for (size_t i = 0; i < lc.size(); ++i) differ += lc[i] != lg[i];
  CHECK_MESSAGE(differ <= lc.size() / 200, differ << " of " << lc.size() << " voxels differ between cpu and cuda");
}
