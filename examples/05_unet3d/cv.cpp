// cv.cpp - the cross-validation summary (cv.h).
#include "examples/05_unet3d/cv.h"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/json_checked.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/data_fingerprint.h"
#include "unet3d/run_checkpoint.h"

namespace unet3d_app {

namespace {

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string field;
  while (std::getline(ss, field, ',')) out.push_back(field);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

struct FoldScores {
  std::string run;
  int64_t fold = 0, epoch = 0;
  std::vector<std::string> class_names;  // foreground classes, from the dice_<name> columns
  std::vector<double> dice;
  std::optional<DataFingerprint> data;  // absent in runs saved before 2026-12-04
};

// The run's fold and its last validated epoch's Dice, from RUN/training_state.safetensors.
FoldScores read_fold(const std::string& run) {
  const std::string where = "halfgrad-unet3d cv: " + run + "/" + kTrainingStateFile;
  const nlohmann::json meta = read_run_training_meta(run);
  const halfgrad::json_checked::Field m(meta, where);
  FoldScores f;
  f.run = run;
  HG_CHECK(!m["args"]["data"].as_string().empty(),
           where << ": the run trained on the default data, which has no folds; expected runs of train --data DIR --fold K");
  f.fold = m["args"].has("fold") ? m["args"]["fold"].as_int(0, kFolds - 1) : kReferenceFold;
  f.epoch = m["last_epoch"].as_int();
  HG_CHECK(f.epoch >= 1, where << ": the run has not validated yet (no epoch with a validation Dice); train it further");
  if (m.has("data_fingerprint")) f.data = DataFingerprint::from_json(m["data_fingerprint"]);
  const std::vector<std::string> header = split_csv(m["metrics"]["header"].as_string());
  std::vector<size_t> dice_columns;
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i].rfind("dice_", 0) == 0) {
      dice_columns.push_back(i);
      f.class_names.push_back(header[i].substr(5));
    }
  HG_CHECK(!dice_columns.empty(), where << ": metrics header '" << m["metrics"]["header"].as_string()
                                        << "' has no dice_<class> column");
  for (const std::string& row : m["metrics"]["rows"].as_string_list()) {
    const std::vector<std::string> fields = split_csv(row);
    if (fields.empty() || fields[0] != std::to_string(f.epoch)) continue;
    for (size_t c : dice_columns) {
      HG_CHECK(c < fields.size() && !fields[c].empty(),
               where << ": epoch " << f.epoch << "'s metrics row '" << row << "' has no Dice in column " << header[c]);
      char* end = nullptr;
      const double d = std::strtod(fields[c].c_str(), &end);
      HG_CHECK(end == fields[c].c_str() + fields[c].size() && std::isfinite(d) && d >= 0 && d <= 1,
               where << ": epoch " << f.epoch << "'s " << header[c] << " is '" << fields[c]
                     << "'; expected a Dice in [0, 1]");
      f.dice.push_back(d);
    }
  }
  HG_CHECK(f.dice.size() == dice_columns.size(),
           where << ": no metrics row for epoch " << f.epoch << ", the run's last validated epoch");
  return f;
}

}  // namespace

nlohmann::json cross_validation_summary(const std::vector<std::string>& run_dirs) {
  HG_CHECK(!run_dirs.empty(), "halfgrad-unet3d cv: no run folders; expected the RUN_DIRs of train --fold K runs");
  std::vector<FoldScores> folds;
  std::map<int64_t, std::string> by_fold;
  for (const std::string& run : run_dirs) {
    FoldScores f = read_fold(run);
    const auto [it, fresh] = by_fold.emplace(f.fold, run);
    HG_CHECK(fresh, "halfgrad-unet3d cv: " << it->second << " and " << run << " both trained fold " << f.fold
                                           << "; expected one run per fold");
    if (!folds.empty()) {
      HG_CHECK(f.class_names == folds[0].class_names,
               "halfgrad-unet3d cv: " << run << " has other classes than " << folds[0].run << "; expected one dataset");
      // The same files (sizes and XXH3-64), wherever the folder was: data_fingerprint.h's rule.
      const bool differ = f.data.has_value() != folds[0].data.has_value() ||
                          (f.data && data_changed(*folds[0].data, *f.data));
      HG_CHECK(!differ, "halfgrad-unet3d cv: " << run << " trained on other data than " << folds[0].run
                                               << " (their data fingerprints differ); expected the folds of one dataset");
    }
    folds.push_back(std::move(f));
  }
  const size_t classes = folds[0].class_names.size(), n = folds.size();
  std::vector<double> mean(classes, 0.0), sd(classes, 0.0);
  for (const FoldScores& f : folds)
    for (size_t c = 0; c < classes; ++c) mean[c] += f.dice[c] / static_cast<double>(n);
  if (n > 1)
    for (size_t c = 0; c < classes; ++c) {
      for (const FoldScores& f : folds) sd[c] += (f.dice[c] - mean[c]) * (f.dice[c] - mean[c]);
      sd[c] = std::sqrt(sd[c] / static_cast<double>(n - 1));
    }
  double mean_all = 0;
  for (double m : mean) mean_all += m / static_cast<double>(classes);
  nlohmann::json rows = nlohmann::json::array();
  for (const FoldScores& f : folds) {
    double fold_mean = 0;
    for (double d : f.dice) fold_mean += d / static_cast<double>(classes);
    rows.push_back({{"run", f.run}, {"fold", f.fold}, {"epoch", f.epoch}, {"dice", f.dice}, {"mean_dice", fold_mean}});
  }
  std::vector<int64_t> missing;
  for (int64_t k = 0; k < kFolds; ++k)
    if (!by_fold.count(k)) missing.push_back(k);
  return {{"folds", rows},      {"class_names", folds[0].class_names}, {"dice", mean},
          {"dice_sd", sd},      {"mean_dice", mean_all},                {"missing_folds", missing}};
}

int run_cv(const std::vector<std::string>& run_dirs) {
  const nlohmann::json summary = cross_validation_summary(run_dirs);
  if (!summary["missing_folds"].empty())
    std::cerr << "cv: note: folds " << summary["missing_folds"].dump() << " of " << kFolds
              << " have no run here; the means are over the " << summary["folds"].size() << " given" << std::endl;
  std::cout << summary.dump() << std::endl;
  return 0;
}

}  // namespace unet3d_app
