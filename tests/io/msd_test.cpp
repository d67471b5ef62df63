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
    write_nifti(dir.file("imagesTr/" + n), Volume{Tensor::randn({2, 3, 4}, gen), {1, 1, 1}, {}, {}});
    write_nifti(dir.file("labelsTr/" + n), Volume{Tensor::from_labels(lab, {2, 3, 4}), {1, 1, 1}, {}, {}});
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
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("dataset.json"), "field 'labels' is missing"});
  bad = ds;
  bad["labels"] = {{"0", "background"}, {"2", "b"}};
  save(dir, bad);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "field 'labels' has 2 entries but no key \"1\"", "expected keys \"0\" .. \"1\""});
  bad = ds;
  bad.erase("training");
  save(dir, bad);
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("dataset.json"), "field 'training' is missing"});
  bad = ds;
  bad["training"][1].erase("label");
  save(dir, bad);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "field 'training[1].label' is missing"});
}

TEST_CASE("io msd: a listed file that does not exist is an error naming it") {
  TempDir dir;
  nlohmann::json ds = make_dataset(dir, {"a.nii.gz", "b.nii.gz"});
  ds["training"].push_back({{"image", "./imagesTr/c.nii.gz"}, {"label", "./labelsTr/c.nii.gz"}});
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "field 'training[2].image' names " + dir.file("imagesTr/c.nii.gz"), "not an existing regular file"});
  std::filesystem::remove(dir.file("labelsTr/b.nii.gz"));
  ds["training"].erase(2);
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }), {dir.file("labelsTr/b.nii.gz"), "not an existing regular file"});
}

TEST_CASE("io msd: a pair listed twice in dataset.json is an error naming it") {
  TempDir dir;
  nlohmann::json ds = make_dataset(dir, {"a.nii.gz", "b.nii.gz"});
  ds["training"].push_back(ds["training"][0]);
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "field 'training[2].image' names imagesTr/a.nii.gz",
                  "already listed as 'training[0].image'", "both the training and the validation split"});
}

TEST_CASE("io msd: the same pair as ./imagesTr/x.nii.gz and imagesTr/x.nii.gz, or through a link, is an error") {
  // Sorted by the entry string, "./imagesTr/a" and "imagesTr/a" are not neighbours: the check
  // compares normalised paths, and files by device and inode.
  TempDir dir;
  nlohmann::json ds = make_dataset(dir, {"a.nii.gz", "b.nii.gz", "c.nii.gz"});
  ds["training"].push_back({{"image", "imagesTr/a.nii.gz"}, {"label", "labelsTr//a.nii.gz"}});
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "field 'training[3].image' names imagesTr/a.nii.gz",
                  "already listed as 'training[0].image'"});
  ds["training"][3] = {{"image", "./imagesTr/./d/../b.nii.gz"}, {"label", "./labelsTr/b.nii.gz"}};
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {"field 'training[3].image' names imagesTr/b.nii.gz", "already listed as 'training[1].image'"});
  // A second name for the same file: a hard link, and a symbolic link.
  std::filesystem::create_hard_link(dir.file("imagesTr/a.nii.gz"), dir.file("imagesTr/a_copy.nii.gz"));
  std::filesystem::create_symlink(dir.file("labelsTr/c.nii.gz"), dir.file("labelsTr/c_link.nii.gz"));
  ds["training"][3] = {{"image", "./imagesTr/a_copy.nii.gz"}, {"label", "./labelsTr/a_copy.nii.gz"}};
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {"field 'training[3].image' names " + dir.file("imagesTr/a_copy.nii.gz"),
                  "the same file (same device and inode) as 'training[0].image'"});
  std::filesystem::copy_file(dir.file("imagesTr/a.nii.gz"), dir.file("imagesTr/d.nii.gz"));
  ds["training"][3] = {{"image", "./imagesTr/d.nii.gz"}, {"label", "./labelsTr/c_link.nii.gz"}};
  save(dir, ds);
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {"field 'training[3].label'", "same device and inode", "'training[2].label'"});
  // Unique again: loads, four pairs.
  std::filesystem::copy_file(dir.file("labelsTr/a.nii.gz"), dir.file("labelsTr/d.nii.gz"));
  ds["training"][3]["label"] = "./labelsTr/d.nii.gz";
  save(dir, ds);
  CHECK(load_msd(dir.file("")).pairs.size() == 4);
}

TEST_CASE("io msd: dataset.json fields of the wrong type, paths leaving the folder and deep nesting name the field") {
  TempDir dir;
  const nlohmann::json ds = make_dataset(dir, {"a.nii.gz", "b.nii.gz"});
  auto check_bad = [&](const nlohmann::json& bad, const std::vector<std::string>& parts) {
    save(dir, bad);
    const std::string msg = error_message([&] { load_msd(dir.file("")); });
    check_mentions(msg, parts);
    check_mentions(msg, {dir.file("dataset.json")});
    CHECK_MESSAGE(msg.find("json.exception") == std::string::npos, msg);
  };
  nlohmann::json bad = ds;
  bad["training"][1]["image"] = 42;
  check_bad(bad, {"field 'training[1].image' must be a string, got integer 42"});
  bad = ds;
  bad["name"] = {1, 2};
  check_bad(bad, {"field 'name' must be a string, got array"});
  bad = ds;
  bad["labels"]["1"] = nullptr;
  check_bad(bad, {"field 'labels.1' must be a string, got null"});
  bad = ds;
  bad["training"] = {{"image", "x"}};
  check_bad(bad, {"field 'training' must be an array"});
  bad = ds;
  bad["training"][0] = "./imagesTr/a.nii.gz";
  check_bad(bad, {"field 'training[0]' must be an object", "got string \"./imagesTr/a.nii.gz\""});
  bad = ds;
  bad["training"][0]["image"] = "/etc/passwd";
  check_bad(bad, {"field 'training[0].image' is the absolute path \"/etc/passwd\"", "relative to the dataset folder"});
  bad = ds;
  bad["training"][0]["label"] = "./labelsTr/../../a.nii.gz";
  check_bad(bad, {"field 'training[0].label'", "which leaves the dataset folder"});
  bad = ds;
  bad["training"][0]["label"] = std::string("./labelsTr/a.nii.gz\0.txt", 24);
  check_bad(bad, {"field 'training[0].label'", "control character"});
  check_bad(nlohmann::json::array(), {"the top level must be an object (an MSD dataset.json), got array"});

  // 100,000 nested arrays: refused by the pre-scan, before nlohmann's recursive parser sees them.
  write_bytes(dir.file("dataset.json"), "{\"name\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  check_mentions(error_message([&] { load_msd(dir.file("")); }),
                 {dir.file("dataset.json"), "nests arrays/objects more than 32 levels deep"});
  // A syntax error shows a bounded, printable excerpt, not nlohmann's text.
  write_bytes(dir.file("dataset.json"), "{\"labels\": {\"0\": \"bg\"}, \"training\": [\x01]}");
  const std::string msg = error_message([&] { load_msd(dir.file("")); });
  check_mentions(msg, {dir.file("dataset.json"), "not valid JSON: syntax error near byte 3", "\\x01"});
  CHECK_MESSAGE(msg.find("json.exception") == std::string::npos, msg);
}

TEST_CASE("io msd: load_msd_case rejects shape mismatch and out-of-range labels, naming the files") {
  TempDir dir;
  save(dir, make_dataset(dir, {"a.nii.gz"}));
  const MsdDataset ds = load_msd(dir.file(""));
  const MsdPair pair = ds.pairs[0];
  // Two classes only: the label value 2 at voxel 2 = (i, j, k) (2, 0, 0) is out of range.
  check_mentions(error_message([&] { load_msd_case(pair, 2); }),
                 {pair.label, "holds 2", "voxel (i, j, k) = (2, 0, 0)", "expected a class in [0, 2)"});
  write_nifti(pair.label, Volume{Tensor::zeros({2, 3, 5}), {1, 1, 1}, {}, {}});
  check_mentions(error_message([&] { load_msd_case(pair, 3); }),
                 {pair.label, pair.image, "[2, 3, 5]", "[2, 3, 4]", "expected equal shapes"});
  write_nifti(pair.label, Volume{Tensor::full({2, 3, 4}, -1.0), {1, 1, 1}, {}, {}});
  check_mentions(error_message([&] { load_msd_case(pair, 3); }), {pair.label, "holds -1", "expected a class in [0, 3)"});
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
