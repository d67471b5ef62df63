// train.cpp - the train and eval subcommands of halfgrad-unet3d. Training is the Trainer's
// (trainer.h): setup, one step() for the eager and the CUDA-graph paths, end_epoch(), report(). eval
// reports Dice, HD95 and the normalised surface Dice (surface_distance.h) per class and per volume.
#include "examples/05_unet3d/train.h"

#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/memory_estimate.h"
#include "examples/05_unet3d/metrics.h"
#include "examples/05_unet3d/overlay.h"
#include "examples/05_unet3d/surface_distance.h"
#include "examples/05_unet3d/trainer.h"
#include "unet3d/trained_model.h"

namespace unet3d_app {

using namespace halfgrad;

amp::PrecisionPlan precision_plan(const TrainArgs& a) {
  return amp::PrecisionPlan::from_words(a.opt_level, a.amp, a.amp_dtype, a.fp32_ops, a.fp32_modules,
                                        "halfgrad-unet3d train");
}

int run_train(const TrainArgs& a, const RankContext& ctx) { return Trainer(a, ctx).run(); }

// eval's per-volume rows and the per-class means of Dice, HD95 and the normalised surface Dice. A
// volume where a class is in exactly one of prediction and label has no HD95 for it (null in the
// row): the class's mean HD95 is over the others, and hd95_undefined counts them.
class BoundaryTable {
 public:
  explicit BoundaryTable(int64_t classes) : classes_(classes) {}
  void add(const std::string& name, const std::vector<double>& dice, const std::vector<SurfaceScores>& surface) {
    nlohmann::json hd95 = nlohmann::json::array(), nsd = nlohmann::json::array();
    for (const SurfaceScores& s : surface) {
      hd95.push_back(s.hd95_defined ? nlohmann::json(s.hd95_mm) : nlohmann::json(nullptr));
      nsd.push_back(s.surface_dice);
    }
    rows_.push_back({{"name", name}, {"dice", dice}, {"hd95_mm", hd95}, {"surface_dice", nsd}});
    scores_.push_back(surface);
  }
  nlohmann::json to_json(double tolerance_mm) const {
    std::vector<double> hd95(classes_, 0.0), nsd(classes_, 0.0);
    std::vector<int64_t> defined(classes_, 0), undefined(classes_, 0);
    for (const std::vector<SurfaceScores>& v : scores_)
      for (int64_t c = 0; c < classes_; ++c) {
        nsd[c] += v[c].surface_dice;
        if (v[c].hd95_defined) {
          hd95[c] += v[c].hd95_mm;
          ++defined[c];
        } else {
          ++undefined[c];
        }
      }
    nlohmann::json hd95_mean = nlohmann::json::array();
    double nsd_all = 0;
    for (int64_t c = 0; c < classes_; ++c) {
      hd95_mean.push_back(defined[c] ? nlohmann::json(hd95[c] / defined[c]) : nlohmann::json(nullptr));
      nsd[c] /= std::max<size_t>(scores_.size(), 1);
      nsd_all += nsd[c] / std::max<int64_t>(classes_, 1);
    }
    return {{"hd95_mm", hd95_mean},         {"hd95_undefined", undefined},     {"surface_dice", nsd},
            {"mean_surface_dice", nsd_all}, {"surface_dice_tolerance_mm", tolerance_mm}, {"per_volume", rows_}};
  }

 private:
  int64_t classes_;
  std::vector<nlohmann::json> rows_;
  std::vector<std::vector<SurfaceScores>> scores_;
};

// eval --overlay's picture of volume `name`: DIR/<file name less .nii[.gz]>.png.
static std::filesystem::path overlay_path(const std::string& dir, const std::string& name) {
  std::string base = std::filesystem::path(name).filename().string();
  base = base.substr(0, base.rfind(".nii"));
  return std::filesystem::path(dir) / (base + ".png");
}

int run_eval(const EvalArgs& a) {
  const Placement where = make_placement(a.device, "ndhwc", "eval");
  TrainedModel tm = load_trained_model(a.checkpoint, where, "eval");
  if (!tm.inferred.empty()) std::cerr << "eval: " << a.checkpoint << ": " << tm.inferred << std::endl;
  if (!tm.unverified.empty()) std::cerr << "eval: note: " << tm.unverified << std::endl;
  const Recipe& r = tm.recipe;
  nn::UNet3d* model = tm.model.get();
  const amp::OptLevel level = tm.plan.level;
  const amp::OptLevelSetup& mp = tm.mp;
  HG_CHECK(a.fold < 0 || !a.data.empty(),
           "halfgrad-unet3d eval: --fold needs --data (the default data splits by hemisphere, not by fold)");
  // On the grid the model trained on (its spacing_mm), where the Dice of training's validation was taken.
  SegData data = a.data.empty() ? load_default_data(r)
                                : load_msd_data(a.data, r, true, a.fold,
                                                tm.spacing_mm ? SpacingChoice::fixed(*tm.spacing_mm) : SpacingChoice::native());
  HG_CHECK(data.num_classes == r.model.num_classes(),
           "halfgrad-unet3d eval: " << data.source << " has " << data.num_classes << " classes but checkpoint "
                                    << a.checkpoint << " was trained for " << r.model.num_classes());
  if (a.memory_check)  // every volume is padded to data.volume_shape, the largest one's
    check_memory(estimate_eval_memory(r.model, model->num_parameters(), data.volume_shape, level),
                 available_memory(a.device), "eval", a.device,
                 "the volumes are padded to " + shape_str(Shape{data.volume_shape[0], data.volume_shape[1],
                                                                data.volume_shape[2]}) +
                     "; check the image headers");
  if (!a.overlay.empty()) {
    std::error_code ec;
    // Refused before anything runs, as predict does: an existing picture is somebody's, and two
    // volumes whose names differ only in .nii / .nii.gz would write one picture.
    std::map<std::filesystem::path, std::string> written_by;
    for (const SegVolume& v : data.val) {
      const std::filesystem::path png = overlay_path(a.overlay, v.name);
      const auto [it, fresh] = written_by.emplace(png, v.name);
      HG_CHECK(fresh, "halfgrad-unet3d eval: --overlay: " << it->second << " and " << v.name << " would both be drawn in "
                                                          << png.string() << "; expected one picture per volume");
      HG_CHECK(a.overwrite || !std::filesystem::exists(std::filesystem::symlink_status(png, ec)),
               "halfgrad-unet3d eval: --overlay: " << png.string()
                                                   << " exists already; pass --overwrite to replace it, or choose another folder");
    }
    std::filesystem::create_directories(a.overlay, ec);
    HG_CHECK(std::filesystem::is_directory(a.overlay, ec),
             "halfgrad-unet3d eval: --overlay " << a.overlay << ": cannot create the folder (" << ec.message() << ")");
  }
  // Per volume: the overlay, Dice and the boundary metrics (surface_distance.h) at the volume's spacing.
  BoundaryTable boundary(data.num_classes - 1);
  const auto each_volume = [&](const SegVolume& v, const Tensor& pred) {
    if (!a.overlay.empty()) write_png(overlay_path(a.overlay, v.name).string(), compose_overlay(v.image, v.label, pred));
    // The boundary metrics on the volume's own grid: a prediction in the zero padding beyond it would
    // add a surface that a scorer of the original file (MONAI's) never sees. Dice stays on the padded
    // grid, as training's validation computes it.
    boundary.add(v.name, dice_per_class(pred, v.label, data.num_classes),
                 surface_scores_per_class(own_grid(pred, v.extent), own_grid(v.label, v.extent), data.num_classes,
                                          v.spacing_mm, a.nsd_tolerance));
  };
  std::vector<double> dice = validate(*model, data.val, data.num_classes, mp, where, each_volume);
  double mean = 0;
  for (double d : dice) mean += d;
  mean /= std::max<size_t>(dice.size(), 1);
  nlohmann::json out = {{"dice", dice}, {"mean_dice", mean}, {"volumes", data.val.size()}};
  if (data.spacing_mm) out["spacing_mm"] = *data.spacing_mm;  // the grid scored: the model's
  out.update(boundary.to_json(a.nsd_tolerance));
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace unet3d_app
