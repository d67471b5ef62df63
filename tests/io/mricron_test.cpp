// Tests of io/mricron.h: the lobe grouping, the downsampling and the hemisphere split on a tiny
// synthetic atlas (and every error), then the real mricron-data package when it is installed.
#include "io/mricron.h"

#include <filesystem>
#include <iostream>

#include "tests/io/io_test_util.h"

using namespace halfgrad;
using namespace halfgrad::io;
using halfgrad::io::test::check_mentions;
using halfgrad::io::test::error_message;
using halfgrad::io::test::TempDir;
using halfgrad::io::test::write_bytes;

namespace {

// A 2 x 4 x 4 (z, y, x) "head" at 1 mm whose world x = 0 lies between x indices 1 and 2. Regions:
// x < 2 -> AAL 1 (code 2001, frontal); x >= 2 -> AAL 2 (8111, temporal), except that the 2x2x2
// block at y >= 2, x >= 2 holds 5 voxels of AAL 3 (9001, cerebellum) and 3 of background.
const std::array<double, 16> kAffine = {1, 0, 0, -2, 0, 1, 0, -10, 0, 0, 1, 5, 0, 0, 0, 1};

void make_atlas(const TempDir& dir) {
  std::vector<float> image(32);
  std::vector<int64_t> region(32);
  for (int64_t z = 0; z < 2; ++z)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 4; ++x) {
        const int64_t i = (z * 4 + y) * 4 + x;
        image[i] = static_cast<float>(i);
        region[i] = x < 2 ? 1 : 2;
        if (y >= 2 && x >= 2) region[i] = (z == 0 && x == 2) ? 0 : 3;  // 3 background, 5 cerebellum
        if (y >= 2 && x >= 2 && z == 1 && x == 3 && y == 3) region[i] = 0;
      }
  write_nifti(dir.file("ch2.nii.gz"), Volume{Tensor::from_vector(image, {2, 4, 4}), {1, 1, 1}, kAffine, {}});
  write_nifti(dir.file("aal.nii.gz"), Volume{Tensor::from_labels(region, {2, 4, 4}), {1, 1, 1}, kAffine, {}});
  write_bytes(dir.file("aal.nii.txt"), "1 Precentral_L 2001\n2 Temporal_Sup_L 8111\n3 Cerebelum_Crus1_L 9001\n");
}

}  // namespace

TEST_CASE("io mricron: AAL codes group into lobes by their thousands digit") {
  CHECK(aal_code_to_lobe(2001) == 1);  // Precentral -> frontal
  CHECK(aal_code_to_lobe(8101) == 2);  // Heschl -> temporal
  CHECK(aal_code_to_lobe(6401) == 3);  // Paracentral lobule -> parietal
  CHECK(aal_code_to_lobe(5401) == 4);  // Fusiform -> occipital
  CHECK(aal_code_to_lobe(3001) == 5);  // Insula -> limbic
  CHECK(aal_code_to_lobe(4201) == 5);  // Amygdala -> limbic
  CHECK(aal_code_to_lobe(7101) == 6);  // Thalamus -> deep grey
  CHECK(aal_code_to_lobe(9170) == 7);  // Vermis -> cerebellum
  CHECK(lobe_class_names().size() == static_cast<size_t>(kNumLobeClasses));
  check_mentions(error_message([] { aal_code_to_lobe(1234); }), {"AAL code 1234", "expected"});
}

TEST_CASE("io mricron: synthetic atlas downsamples image by mean, lobes by majority, splits at world x = 0") {
  TempDir dir;
  make_atlas(dir);
  const BrainAtlas atlas = load_mricron_atlas(MricronOptions().with_dir(dir.file("")).with_factor(2));
  REQUIRE(atlas.image.data.shape() == Shape{1, 2, 2});
  CHECK(atlas.labels.data.to_double_vector() == std::vector<double>{1, 2, 1, 7});
  // Block (0, 0, 0) averages (z*16 + y*4 + x) over z, y, x in {0, 1}: 8 + 2 + 0.5.
  CHECK(atlas.image.data.item_at(0) == doctest::Approx(10.5));
  CHECK(atlas.image.spacing == std::array<double, 3>{2, 2, 2});
  // Output voxel 0 sits at the centre of input voxels 0 and 1: world x -2 + 0.5.
  CHECK(atlas.image.affine[0] == 2.0);
  CHECK(atlas.image.affine[3] == -1.5);
  CHECK(atlas.labels.affine == atlas.image.affine);

  const AtlasSplit split = split_hemispheres(atlas);
  CHECK(split.split_x == 1);  // world x of index 1 is +0.5
  CHECK(split.train.label.to_double_vector() == std::vector<double>{1, 1});
  CHECK(split.val.label.to_double_vector() == std::vector<double>{2, 7});
  CHECK(split.train.image.shape() == Shape{1, 2, 1});
}

TEST_CASE("io mricron: missing package files, grid mismatch and unlisted regions are errors naming the files") {
  TempDir dir;
  const MricronOptions opts = MricronOptions().with_dir(dir.file(""));
  check_mentions(error_message([&] { load_mricron_atlas(opts); }),
                 {dir.file("ch2.nii.gz"), "not found", "apt-get install mricron-data"});
  make_atlas(dir);
  std::filesystem::remove(dir.file("aal.nii.txt"));
  check_mentions(error_message([&] { load_mricron_atlas(opts); }), {dir.file("aal.nii.txt"), "apt-get install mricron-data"});

  make_atlas(dir);
  write_nifti(dir.file("aal.nii.gz"), Volume{Tensor::zeros({2, 4, 5}, kInt64), {1, 1, 1}, kAffine, {}});
  check_mentions(error_message([&] { load_mricron_atlas(opts); }),
                 {dir.file("aal.nii.gz"), dir.file("ch2.nii.gz"), "[2, 4, 5]", "expected one grid"});
  std::array<double, 16> shifted = kAffine;
  shifted[7] = -9;
  write_nifti(dir.file("aal.nii.gz"), Volume{Tensor::zeros({2, 4, 4}, kInt64), {1, 1, 1}, shifted, {}});
  check_mentions(error_message([&] { load_mricron_atlas(opts); }),
                 {dir.file("aal.nii.gz"), dir.file("ch2.nii.gz"), "affine entry (1, 3)", "expected one grid"});

  make_atlas(dir);
  write_bytes(dir.file("aal.nii.txt"), "1 Precentral_L 2001\n2 Temporal_Sup_L 8111\n");
  check_mentions(error_message([&] { load_mricron_atlas(opts); }),
                 {dir.file("aal.nii.gz"), "region value 3", dir.file("aal.nii.txt")});
  write_bytes(dir.file("aal.nii.txt"), "1 Precentral_L\n");
  check_mentions(error_message([&] { load_mricron_atlas(opts); }), {dir.file("aal.nii.txt"), "line 1", "expected"});
}

const char* const kMricronTest = "io mricron: the installed ch2 + AAL give 8 lobe classes on 91x109x91, all in both hemispheres";

// Evaluated when the test registers: doctest then reports the case as skipped, and the line names it.
static bool mricron_present() {
  const std::string dir = MricronOptions().dir;
  const bool ok = std::filesystem::is_regular_file(dir + "/ch2.nii.gz");
  if (!ok) std::cout << "skipped: " << kMricronTest << ": " << dir << "/ch2.nii.gz not found (apt-get install mricron-data)\n";
  return ok;
}

TEST_CASE(kMricronTest * doctest::skip(!mricron_present())) {
  const std::string dir = MricronOptions().dir;
  // ch2 and aal share one grid at full resolution (the loader checks this too).
  const Volume ch2 = read_nifti(dir + "/ch2.nii.gz");
  const Volume aal = read_label_nifti(dir + "/aal.nii.gz");
  CHECK(ch2.data.shape() == Shape{181, 217, 181});
  CHECK(aal.data.shape() == ch2.data.shape());
  CHECK(aal.affine == ch2.affine);

  const BrainAtlas atlas = load_mricron_atlas();
  REQUIRE(atlas.image.data.shape() == Shape{91, 109, 91});
  CHECK(atlas.labels.data.shape() == Shape{91, 109, 91});
  CHECK(atlas.image.spacing == std::array<double, 3>{2, 2, 2});
  const AtlasSplit split = split_hemispheres(atlas);
  CHECK(split.split_x == 45);
  CHECK(split.train.image.shape() == Shape{91, 109, 45});
  CHECK(split.val.image.shape() == Shape{91, 109, 46});
  for (const Sample* half : {&split.train, &split.val}) {
    std::vector<int64_t> count(kNumLobeClasses, 0);
    const int64_t* lab = half->label.data<int64_t>();
    for (int64_t i = 0; i < half->label.numel(); ++i) ++count[lab[i]];
    for (int64_t c = 0; c < kNumLobeClasses; ++c) {
      CAPTURE(lobe_class_names()[c]);
      CHECK(count[c] > 1000);  // every lobe is present in both hemispheres
    }
    double mean = 0;
    for (float v : half->image.to_float_vector()) mean += v;
    CHECK(mean / static_cast<double>(half->image.numel()) == doctest::Approx(0.0).epsilon(1e-4));
  }
  CHECK(load_mricron_atlas(MricronOptions().with_factor(3)).labels.data.shape() == Shape{61, 73, 61});
}
