// Cross-validation (issue 34 item 5): train --fold K splits an MSD folder into interleaved folds
// (io::split_fold), eval --fold K scores the pairs fold K held out, and `cv` summarises the folds'
// validation Dice (cv.h), refusing two runs of one fold or runs of other data. On the toy dataset
// (toy_msd.h) and the tiny recipe, one epoch a fold.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nifti1_io.h>

#include "examples/05_unet3d/cv.h"
#include "io/nifti.h"
#include "io/msd.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/toy_msd.h"
#include "tests/temp_dir.h"

using namespace halfgrad;
using namespace halfgrad::testing::toy_msd;
using halfgrad::testing::check_error;
using halfgrad::testing::TempDir;

namespace {
// std::cout collected for the life of the object (eval prints its JSON line there).
struct CapturedStdout {
  std::ostringstream buf;
  std::streambuf* saved = std::cout.rdbuf(buf.rdbuf());
  ~CapturedStdout() { std::cout.rdbuf(saved); }
  std::string text() const { return buf.str(); }
};
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A --probabilities file's float32 values, as stored (x fastest, the class axis slowest), read with
// nifticlib directly (io::read_nifti takes 3-D volumes only).
std::vector<float> probabilities(const std::string& path) {
  nifti_image* im = nifti_image_read(path.c_str(), 1);
  REQUIRE(im != nullptr);
  REQUIRE(im->datatype == DT_FLOAT32);
  const float* v = static_cast<const float*>(im->data);
  std::vector<float> out(v, v + im->nvox);
  nifti_image_free(im);
  return out;
}
}  // namespace

TEST_CASE("unet3d folds: fold k of 5 validates on the pairs whose index is k mod 5; the reference split is fold 4") {
  std::vector<io::MsdPair> pairs(12);
  for (size_t i = 0; i < pairs.size(); ++i) pairs[i].image = "case_" + std::to_string(i);
  for (int64_t k = 0; k < 5; ++k) {
    const io::MsdSplit s = io::split_fold(pairs, k);
    CHECK(s.val.size() + s.train.size() == pairs.size());
    for (const io::MsdPair& p : s.val) CHECK(std::stoi(p.image.substr(5)) % 5 == k);
    for (const io::MsdPair& p : s.train) CHECK(std::stoi(p.image.substr(5)) % 5 != k);
  }
  const io::MsdSplit ref = io::split_every_fifth(pairs), four = io::split_fold(pairs, 4);
  REQUIRE(ref.val.size() == four.val.size());
  for (size_t i = 0; i < ref.val.size(); ++i) CHECK(ref.val[i].image == four.val[i].image);
  check_error([&] { io::split_fold(pairs, 5); }, {"fold 5 of 5", "expected 0 <= fold < folds"});
}

TEST_CASE("unet3d cv: two folds trained, eval --fold, the summary's means and SD, and what cv refuses") {
  TempDir dir{"halfgrad_cv"};
  const std::string data = dir.file("data"), other = dir.file("other");
  make_dataset(data, 10);  // 8 train + 2 validate per fold
  auto train = [&](const std::string& d, int fold, const std::string& out) {
    return run({"train", "--config", "tiny", "--data", d, "--out", out, "--epochs", "1", "--no-progress", "--fold",
                std::to_string(fold)});
  };
  REQUIRE(train(data, 0, dir.file("f0")) == 0);
  REQUIRE(train(data, 3, dir.file("f3")) == 0);

  const nlohmann::json s = cross_validation_summary({dir.file("f0"), dir.file("f3")});
  REQUIRE(s["folds"].size() == 2);
  CHECK(s["folds"][0]["fold"] == 0);
  CHECK(s["folds"][1]["fold"] == 3);
  CHECK(s["class_names"] == nlohmann::json({"a", "b"}));
  CHECK(s["missing_folds"] == nlohmann::json({1, 2, 4}));
  for (int c = 0; c < 2; ++c) {
    const double a = s["folds"][0]["dice"][c], b = s["folds"][1]["dice"][c];
    CHECK(s["dice"][c].get<double>() == doctest::Approx((a + b) / 2));
    CHECK(s["dice_sd"][c].get<double>() == doctest::Approx(std::fabs(a - b) / std::sqrt(2.0)));
  }
  // The fold's recorded Dice is its validation pairs': eval --fold 0 of the same checkpoint gives it
  // (metrics.csv keeps 4 decimals).
  {
    CapturedStdout out;
    REQUIRE(run({"eval", "--checkpoint", dir.file("f0"), "--data", data, "--fold", "0"}) == 0);
    const nlohmann::json e = nlohmann::json::parse(out.text());
    CHECK(e["volumes"] == 2);
    for (int c = 0; c < 2; ++c)
      CHECK(e["dice"][c].get<double>() == doctest::Approx(s["folds"][0]["dice"][c].get<double>()).epsilon(1e-3));
  }
  // The ensemble (predict with --checkpoint twice): the mean of the two models' softmax, whose argmax
  // is the label map; a model with itself gives the single model's bytes (mean of p and p is p).
  {
    const std::string img = data + "/imagesTr/case_0.nii.gz";
    auto predict = [&](const std::vector<std::string>& cks, const std::string& tag) {
      std::vector<std::string> args = {"predict", "--input", img, "--output", dir.file(tag + ".nii.gz"),
                                       "--probabilities", dir.file(tag + "_p.nii.gz"), "--no-progress"};
      for (const std::string& ck : cks) args.insert(args.end(), {"--checkpoint", ck});
      CapturedStdout out;
      REQUIRE(run(args) == 0);
    };
    predict({dir.file("f0")}, "a");
    predict({dir.file("f3")}, "b");
    predict({dir.file("f0"), dir.file("f3")}, "ab");
    predict({dir.file("f0"), dir.file("f0")}, "aa");
    CHECK(slurp(dir.file("aa.nii.gz")) == slurp(dir.file("a.nii.gz")));
    CHECK(slurp(dir.file("aa_p.nii.gz")) == slurp(dir.file("a_p.nii.gz")));
    const std::vector<float> pa = probabilities(dir.file("a_p.nii.gz")), pb = probabilities(dir.file("b_p.nii.gz")),
                             pab = probabilities(dir.file("ab_p.nii.gz"));
    REQUIRE(pa.size() == 3 * 16 * 16 * 16);
    REQUIRE(pab.size() == pa.size());
    int64_t off = 0;
    for (size_t i = 0; i < pa.size(); ++i) off += std::fabs(pab[i] - (pa[i] + pb[i]) / 2) > 1e-6f;
    CHECK(off == 0);
    // Labels: the argmax over the class axis (the 4th, slowest) of the mean.
    const Tensor lab = io::read_label_nifti(dir.file("ab.nii.gz"), 3).data;
    int64_t wrong = 0;
    for (int64_t v = 0; v < 16 * 16 * 16; ++v) {
      int64_t best = 0;
      for (int64_t c = 1; c < 3; ++c)
        if (pab[c * 4096 + v] > pab[best * 4096 + v]) best = c;
      wrong += lab.data<int64_t>()[v] != best;
    }
    CHECK(wrong == 0);
  }
  // Refused: two runs of one fold, a fold of other data, a run without --data.
  REQUIRE(train(data, 0, dir.file("f0b")) == 0);
  check_error([&] { cross_validation_summary({dir.file("f0"), dir.file("f0b")}); },
              {"both trained fold 0", "expected one run per fold"});
  make_dataset(other, 10);
  write_pair(other, "case_9.nii.gz", 999);  // one image differs
  REQUIRE(train(other, 1, dir.file("o1")) == 0);
  check_error([&] { cross_validation_summary({dir.file("f0"), dir.file("o1")}); },
              {"trained on other data than", "data fingerprints differ"});
  if (std::filesystem::exists("/usr/share/mricron/templates/ch2.nii.gz")) {  // the default data (mricron-data)
    REQUIRE(run({"train", "--config", "tiny", "--out", dir.file("default"), "--epochs", "1", "--no-progress"}) == 0);
    check_error([&] { cross_validation_summary({dir.file("default")}); }, {"default data, which has no folds"});
  } else {
    MESSAGE("skipped: cv of a default-data run: mricron-data is not installed");
  }
  check_error([&] { run({"train", "--config", "tiny", "--out", dir.file("x"), "--epochs", "1", "--fold", "1"}); },
              {"--fold needs --data"});
}
