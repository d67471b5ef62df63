// toy_msd.h - a tiny synthetic MSD dataset and halfgrad-unet3d run in-process, for the U-Net
// program's tests (hostile_input_test.cpp, cv_test.cpp): 16^3 volumes, a sphere of class 1 with
// class 2 on its upper half in noise, written as NIfTI pairs with their dataset.json.
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/cv.h"
#include "examples/05_unet3d/distributed.h"
#include "examples/05_unet3d/predict.h"
#include "examples/05_unet3d/train.h"
#include "io/nifti.h"

namespace halfgrad::testing::toy_msd {

namespace fs = std::filesystem;
using namespace unet3d_app;

constexpr int64_t kSide = 16;  // 16^3 volumes: the tiny recipe's patch

inline io::Volume volume(const Tensor& data,
                         const std::array<double, 16>& affine = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1},
                         const std::array<double, 3>& spacing = {1, 1, 1}) {
  io::Volume v;
  v.data = data;
  v.spacing = spacing;
  v.affine = affine;
  return v;
}

// A 16^3 sphere of class 1 (class 2 on its upper half) in noise; `seed` varies the image.
inline void write_pair(const std::string& root, const std::string& name, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> lab(static_cast<size_t>(kSide * kSide * kSide));
  for (int64_t z = 0; z < kSide; ++z)
    for (int64_t y = 0; y < kSide; ++y)
      for (int64_t x = 0; x < kSide; ++x) {
        const double r = std::sqrt(double((z - 8) * (z - 8) + (y - 8) * (y - 8) + (x - 8) * (x - 8)));
        lab[static_cast<size_t>((z * kSide + y) * kSide + x)] = r < 5 ? (z < 8 ? 1 : 2) : 0;
      }
  io::write_nifti(root + "/imagesTr/" + name, volume(Tensor::randn({kSide, kSide, kSide}, gen)));
  io::write_nifti(root + "/labelsTr/" + name, volume(Tensor::from_labels(lab, {kSide, kSide, kSide})));
}

inline void write_dataset_json(const std::string& root, int pairs) {
  nlohmann::json ds = {{"name", "Toy"}, {"labels", {{"0", "background"}, {"1", "a"}, {"2", "b"}}}};
  for (int i = 0; i < pairs; ++i) {
    const std::string n = "case_" + std::to_string(i) + ".nii.gz";
    ds["training"].push_back({{"image", "./imagesTr/" + n}, {"label", "./labelsTr/" + n}});
  }
  std::ofstream(root + "/dataset.json") << ds.dump(1);
}

// An MSD folder of `pairs` pairs (every 5th validates: 5 pairs give 4 + 1).
inline void make_dataset(const std::string& root, int pairs) {
  fs::create_directories(root + "/imagesTr");
  fs::create_directories(root + "/labelsTr");
  for (int i = 0; i < pairs; ++i) write_pair(root, "case_" + std::to_string(i) + ".nii.gz", 100 + i);
  write_dataset_json(root, pairs);
}

// halfgrad-unet3d with these arguments, as main() runs it after parsing (rank 0 of 1).
inline int run(const std::vector<std::string>& args) {
  CommandLine cli;
  cli.parse(args);
  if (*cli.train) return run_train(cli.train_args, RankContext{});
  if (*cli.predict) return run_predict(cli.predict_args);
  if (*cli.cv) return run_cv(cli.cv_runs);
  return run_eval(cli.eval_args);
}

inline std::vector<std::string> tiny_train(const std::string& data, const std::string& out) {
  return {"train", "--config", "tiny", "--data", data, "--out", out, "--epochs", "2", "--no-progress", "--seed", "3"};
}

}  // namespace halfgrad::testing::toy_msd
