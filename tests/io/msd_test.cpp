// Tests of io/msd.h on a small synthetic MSD dataset (every error case), and on the real
// hippocampus subset in ../shared/data/hippocampus when it is there.
#include "io/msd.h"

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "io/preprocess.h"
#include "tests/io/io_test_util.h"

using namespace halfgrad;
using namespace halfgrad::io;
using halfgrad::io::test::check_mentions;
using halfgrad::io::test::error_message;
using halfgrad::io::test::TempDir;
using halfgrad::io::test::write_bytes;

namespace {

// A dataset of `names` (listed in the given order) with 2 x 3 x 4 images and label maps of
// classes {0, 1, 2}; label voxel i holds i % 3, stored as float32 as some real datasets do.
nlohmann::json make_dataset(const TempDir& dir, const std::vector<std::string>& names) {
  std::filesystem::create_directories(dir.file("imagesTr"));
  std::filesystem::create_directories(dir.file("labelsTr"));
  nlohmann::json ds = {{"name", "Toy"}, {"labels", {{"0", "background"}, {"1", "a"}, {"2", "b"}}}};
  Generator gen(0);
  std::vector<int64_t> lab(24);
  for (int i = 0; i < 24; ++i) lab[i] = i % 3;
  for (const auto& n : names) {
    write_nifti(dir.file("imagesTr/" + n), Volume{Tensor::randn({2, 3, 4}, gen), {1, 1, 1}, {}});
    write_nifti(dir.file("labelsTr/" + n), Volume{Tensor::from_labels(lab, {2, 3, 4}), {1, 1, 1}, {}});
    ds["training"].push_back({{"image", "./imagesTr/" + n}, {"label", "./labelsTr/" + n}});
  }
  return ds;
}

void save(const TempDir& dir, const nlohmann::json& ds) { write_bytes(dir.file("dataset.json"), ds.dump(1)); }

}  // namespace

TEST_CASE("io msd: load_msd sorts pairs by image name and splits every fifth to validation") {
  TempDir dir;
  std::vector<std::string> names;
  for (int i : {7, 3, 10, 1, 9, 2, 8, 4, 6, 5}) names.push_back("case_" + std::string(i < 10 ? "00" : "0") + std::to_string(i) + ".nii.gz");
  save(dir, make_dataset(dir, names));
  const MsdDataset ds = load_msd(dir.file(""));
  CHECK(ds.name == "Toy");
  CHECK(ds.num_classes == 3);
  CHECK(ds.class_names == std::vector<std::string>{"background", "a", "b"});
  REQUIRE(ds.pairs.size() == 10);
  for (int i = 0; i < 10; ++i) {
    const std::string stem = "case_" + std::string(i + 1 < 10 ? "00" : "0") + std::to_string(i + 1) + ".nii.gz";
    CHECK(ds.pairs[i].image == dir.file("imagesTr/" + stem));
    CHECK(ds.pairs[i].label == dir.file("labelsTr/" + stem));
  }
  const MsdSplit split = split_every_fifth(ds.pairs);
  REQUIRE(split.val.size() == 2);
  CHECK(split.train.size() == 8);
  CHECK(split.val[0].image == ds.pairs[4].image);  // index % 5 == 4, as the reference
  CHECK(split.val[1].image == ds.pairs[9].image);
  CHECK(split.train[4].image == ds.pairs[5].image);

  const MsdCase c = load_msd_case(ds.pairs[0], ds.num_classes);
  CHECK(c.image.data.shape() == Shape{2, 3, 4});
  CHECK(c.label.data.dtype() == kInt64);
  for (int i = 0; i < 24; ++i) CHECK(c.label.data.data<int64_t>()[i] == i % 3);
}

TEST_CASE("io msd: missing or malformed dataset.json is an error naming it") {
  TempDir dir;
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("dataset.json"), "not found"});
  write_bytes(dir.file("dataset.json"), "{\"labels\": {\"0\": ");
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("dataset.json"), "not valid JSON"});
  nlohmann::json ds = make_dataset(dir, {"a.nii.gz", "b.nii.gz"});

  nlohmann::json bad = ds;
  bad.erase("labels");
  save(dir, bad);
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("dataset.json"), "no \"labels\" map"});
  bad = ds;
  bad["labels"] = {{"0", "background"}, {"2", "b"}};
  save(dir, bad);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "no string entry \"1\"", "expected keys \"0\" .. \"1\""});
  bad = ds;
  bad.erase("training");
  save(dir, bad);
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("dataset.json"), "no \"training\" list"});
  bad = ds;
  bad["training"][1].erase("label");
  save(dir, bad);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "training[1] has no string \"label\""});
}

TEST_CASE("io msd: a listed file that does not exist is an error naming it") {
  TempDir dir;
  nlohmann::json ds = make_dataset(dir, {"a.nii.gz", "b.nii.gz"});
  ds["training"].push_back({{"image", "./imagesTr/c.nii.gz"}, {"label", "./labelsTr/c.nii.gz"}});
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("imagesTr/c.nii.gz"), "listed in " + dir.file("dataset.json"), "not found"});
  std::filesystem::remove(dir.file("labelsTr/b.nii.gz"));
  ds["training"].erase(2);
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("labelsTr/b.nii.gz"), "not found"});
}

TEST_CASE("io msd: a pair listed twice in dataset.json is an error naming it") {
  TempDir dir;
  nlohmann::json ds = make_dataset(dir, {"a.nii.gz", "b.nii.gz"});
  ds["training"].push_back(ds["training"][0]);
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "./imagesTr/a.nii.gz", "listed twice"});
}

TEST_CASE("io msd: load_msd_case rejects shape mismatch and out-of-range labels, naming the files") {
  TempDir dir;
  save(dir, make_dataset(dir, {"a.nii.gz"}));
  const MsdDataset ds = load_msd(dir.file(""));
  const MsdPair pair = ds.pairs[0];
  // Two classes only: the label value 2 at voxel 2 = (z, y, x) (0, 0, 2) is out of range.
  check_mentions(error_message([&] { load_msd_case(pair, 2); }),
                 {pair.label, "value 2", "(0, 0, 2)", "expected classes in [0, 2)"});
  write_nifti(pair.label, Volume{Tensor::zeros({2, 3, 5}), {1, 1, 1}, {}});
  check_mentions(error_message([&] { load_msd_case(pair, 3); }),
                 {pair.label, pair.image, "[2, 3, 5]", "[2, 3, 4]", "expected equal shapes"});
  write_nifti(pair.label, Volume{Tensor::full({2, 3, 4}, -1.0), {1, 1, 1}, {}});
  check_mentions(error_message([&] { load_msd_case(pair, 3); }), {pair.label, "value -1", "expected classes in [0, 3)"});
}

const char* const kHippocampusTest = "io msd: hippocampus subset loads 200 pairs of equal shapes with classes {0, 1, 2}";

// Evaluated when the test registers: doctest then reports the case as skipped, and the line names it.
static bool hippocampus_present() {
  const bool ok = std::filesystem::is_regular_file(std::string(HALFGRAD_SHARED_DIR) + "/data/hippocampus/dataset.json");
  if (!ok) std::cout << "skipped: " << kHippocampusTest << ": ../shared/data/hippocampus not found\n";
  return ok;
}

TEST_CASE(kHippocampusTest * doctest::skip(!hippocampus_present())) {
  const std::string root = std::string(HALFGRAD_SHARED_DIR) + "/data/hippocampus";
  const MsdDataset ds = load_msd(root);
  CHECK(ds.num_classes == 3);
  REQUIRE(ds.pairs.size() == 200);
  CHECK(std::filesystem::path(ds.pairs[0].image).filename() == "hippocampus_001.nii.gz");
  for (size_t i = 1; i < ds.pairs.size(); ++i) CHECK(ds.pairs[i - 1].image < ds.pairs[i].image);
  const MsdSplit split = split_every_fifth(ds.pairs);
  CHECK(split.train.size() == 160);
  CHECK(split.val.size() == 40);

  std::vector<Sample> first_batch;
  for (const MsdPair& pair : ds.pairs) {
    CAPTURE(pair.image);
    const MsdCase c = load_msd_case(pair, ds.num_classes);  // checks shapes and label range
    const Shape& s = c.image.data.shape();
    CHECK((s[0] >= 20 && s[0] <= 64 && s[1] >= 20 && s[1] <= 64 && s[2] >= 20 && s[2] <= 64));
    for (int d = 0; d < 3; ++d) CHECK(c.image.spacing[d] == doctest::Approx(1.0));
    int64_t count[3] = {0, 0, 0};
    const int64_t* lab = c.label.data.data<int64_t>();
    for (int64_t i = 0; i < c.label.data.numel(); ++i) ++count[lab[i]];
    CHECK(count[1] > 0);  // every case holds both hippocampus parts
    CHECK(count[2] > 0);
    if (first_batch.size() < 8) first_batch.push_back(prepare_fixed_shape(c.image.data, c.label.data, {48, 64, 48}));
  }
  const Batch b = make_batch(first_batch);
  CHECK(b.image.shape() == Shape{8, 1, 48, 64, 48});
  CHECK(b.label.shape() == Shape{8, 48, 64, 48});
}
