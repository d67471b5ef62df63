// plan.h - `halfgrad-unet3d plan` and `train --plan FILE|auto`: a training recipe chosen from the
// dataset and the device, as nnU-Net v2's ExperimentPlanner chooses its 3d_fullres plan
// (nnunetv2/experiment_planning/experiment_planners/default_experiment_planner.py:
// determine_fullres_target_spacing, get_plans_for_configuration; network_topology.py:
// get_pool_and_conv_props). Every chosen value is written with a short "why".
//
//   fingerprint   every case of dataset.json (all folds: one plan serves the five, as nnU-Net's): its
//                 spacing and shape, and the foreground (label > 0) intensities of the image: mean, SD
//                 (population), median, min, max and the 0.5 / 99.5 percentiles (numpy's linear ones),
//                 over at most 10^7 voxels in all: each case gives every k-th of its n foreground
//                 voxels, k = ceil(n / (10^7 / cases)) (nnU-Net draws its 10^7 / cases at random).
//   spacing       target_spacing (unet3d/resample.h): the median per axis, with the anisotropy rule.
//   median shape  per axis, the median of every case's shape resampled to that spacing (np.median).
//   levels/patch  start: the box of 256^3 voxels with sides in proportion to 1 / spacing, clipped to the
//                 median shape (nnU-Net v2's initial_patch_size). Levels L: how often the smallest side
//                 can be halved (rounding up) while it is >= 8, so the bottleneck's smallest side is
//                 >= 4 voxels (nnU-Net's UNet_featuremap_min_edge_length); 1 <= L <= kMaxPlanLevels.
//                 Each side is rounded up to a multiple of 2^L (nn::UNet3d's size_divisor). While the
//                 estimate (memory_estimate.h, estimate_train_memory) at batch 2 exceeds the budget,
//                 the side largest relative to the median shape (the last of equal ones, as numpy's
//                 argsort) loses one divisor, L is recomputed (nnU-Net's two-step reduction).
//   widths        c_l = min(c0 * 2^l, 320) for l < L, bottleneck min(c0 * 2^L, 320); c0 the base
//                 recipe's first width (cpu 12, reference 16, tiny 4). At a recipe's own depth this is
//                 its widths; the cap is nnU-Net's UNet_max_features_3d. We keep the recipes' c0, not
//                 nnU-Net's 32: the recipes' widths are the ones halfgrad's runs have measured
//                 (tools/recipe/NOTES.md), and c0 = 32 costs 4x the cpu recipe's conv FLOPs.
//   batch         the largest that fits the budget (<= kMaxPlanBatch), then at most round(5% of the
//                 dataset's voxels / patch voxels) (nnU-Net's max_dataset_covered), at least 2.
//   samples       per epoch: 250 steps (nnU-Net's num_iterations_per_epoch) on CUDA; on the CPU the
//                 base recipe's steps (cpu: 40), so that an epoch costs what the recipe's does; times the batch.
//   foreground    P(patch centred on a foreground voxel) = 0.33 (nnU-Net's oversample_foreground_percent;
//                 nnU-Net forces the last third of each batch, halfgrad draws it per patch).
//   optimizer     on CUDA nnU-Net v2's: SGD, Nesterov momentum 0.99, lr 1e-2, weight decay 3e-5, poly
//                 schedule (unet3d/recipe.h with_nnunet_sgd); on the CPU the base recipe's AdamW with its
//                 warm-up and cosine schedule (SGD at 1e-2 is tuned for nnU-Net's 1000 x 250 steps; a CPU run
//                 takes a few hundred).
//   normalisation z-score per volume (halfgrad's loader: nnU-Net's ZScoreNormalization without the mask).
//                 A channel named CT is refused: nnU-Net clips CT to the foreground's 0.5 / 99.5
//                 percentiles and z-scores with the foreground's mean and SD, which the loader does not do.
//   budget        the device's TOTAL memory (total_memory), capped by --memory-gib: fixed, so a plan is
//                 reproducible (nnU-Net plans for a reference 8 GB, not for what is free now). On the CPU it
//                 is also capped by the base recipe's own estimate (its patch and batch), so the planned
//                 step costs about what the recipe's step costs: the estimate counts activations, which
//                 grow with the same sums of voxels x widths as the step's convolutions.
//
// What differs from nnU-Net v2:
//   - pooling is isotropic: nn::UNet3d halves all three axes at every level, so the smallest side
//     limits the depth; nnU-Net pools each axis while it is >= 8 and within 2x the finest spacing, so
//     anisotropic data pool in-plane more often than through-plane.
//   - memory: halfgrad's estimate at the opt level, the batch the largest that fits; nnU-Net scales
//     the feature-map count of its PlainConvUNet against a reference of 8 GB at batch 2.
//   - one configuration (3d_fullres): no 2d, lowres or cascade, no transposed axes; instance norm and
//     LeakyReLU are not planned (the recipe's BatchNorm and ReLU stay); flips and epochs stay the base
//     recipe's (nnU-Net: every axis mirrored, 1000 epochs).
//
// train --plan: auto plans at the start of the run (the device given, its total memory; the base
// recipe --config, else default_plan_config) and FILE reads a plan written before; either is written to
// RUN_DIR/plan.json (never over a file there: the run folder's rules) and --resume reads it from there.
// Options given on train's command line (--batch, --spacing, --optimizer, --config) override the plan's;
// the run prints which, and its training state records the values used.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/opt_level.h"
#include "core/json_checked.h"
#include "examples/05_unet3d/train.h"
#include "unet3d/recipe.h"
#include "unet3d/resample.h"

namespace unet3d_app {

constexpr int64_t kMaxPlanLevels = 6;      // 2^6 = 64: a patch of 256 per side; nnU-Net has no cap (it never gets there)
constexpr int64_t kMaxPlanBatch = 32;      // nnU-Net has none; the 5% rule binds first on every MSD task
constexpr int64_t kMaxPlanWidth = 320;     // nnU-Net's UNet_max_features_3d
constexpr int64_t kMinBottleneckEdge = 4;  // nnU-Net's UNet_featuremap_min_edge_length
constexpr int64_t kNnUnetStepsPerEpoch = 250;
constexpr double kPlanForegroundProb = 0.33;
constexpr double kMaxDatasetCovered = 0.05;
constexpr const char* kPlanFile = "plan.json";  // in the run folder (run_folder.h)

/// Foreground intensities of one image channel (raw values, before normalisation).
struct IntensityStats {
  std::string channel;  // dataset.json's name for it ("MRI"), or its index
  int64_t voxels = 0;   // voxels the statistics are of
  double mean = 0, sd = 0, median = 0, min = 0, max = 0, p00_5 = 0, p99_5 = 0;
};

/// What the planner reads of a dataset (fingerprint_dataset), or a synthetic one for tests.
struct PlanFingerprint {
  std::string name, dir;
  int64_t num_classes = 0;
  std::vector<std::string> channel_names;  // dataset.json's; halfgrad reads one channel
  std::vector<Spacing> spacings;           // (z, y, x) mm, one per case
  std::vector<Extent> shapes;              // (z, y, x) voxels, one per case
  std::vector<IntensityStats> intensity;   // one per channel
};

/// What the plan is made for.
struct PlanTarget {
  std::string device = "cpu";  // "cpu" or "cuda"
  halfgrad::amp::OptLevel level = halfgrad::amp::OptLevel::O0;
  std::string config = "cpu";  // the base recipe (recipe.h)
  uint64_t memory_bytes = 0;   // the device's total memory, or --memory-gib
  std::string memory_source;   // where memory_bytes came from
};

template <typename T>
struct Planned {
  T value{};
  std::string why;
};

struct TrainingPlan {
  // What it was made from and for.
  std::string dataset_name, dataset_dir;
  int64_t cases = 0, num_classes = 0;
  std::vector<std::string> channel_names;
  std::string device, opt_level, config;
  uint64_t budget_bytes = 0;
  std::string budget_source;
  std::vector<IntensityStats> intensity;
  // The recipe.
  Planned<Spacing> spacing;
  Planned<std::array<double, 3>> median_shape;  // at `spacing`
  Planned<int64_t> levels;
  Planned<Extent> patch;
  Planned<std::vector<int64_t>> channels;
  Planned<int64_t> bottleneck;
  Planned<int64_t> batch;
  Planned<int64_t> samples_per_epoch;
  Planned<double> foreground_prob;
  Planned<std::string> optimizer;      // "sgd" (nnU-Net's, with its lr, weight decay and poly schedule) or "adamw"
  Planned<std::string> normalization;  // "zscore_per_volume", the one scheme the loader has
  uint64_t estimate_bytes = 0;         // estimate_train_memory(...).total() of the plan
  std::string estimate_what;           // its describe()

  nlohmann::json to_json() const;
  /// Every field checked (json_checked::Field): types, ranges (a patch side a multiple of 2^levels,
  /// one width per level, spacings as check_spacing, batch in [1, kMaxPlanBatch], ...), unknown keys
  /// refused. Throws halfgrad::Error "<where>: field 'patch.value[1]' ...".
  static TrainingPlan from_json(const nlohmann::json& j, const std::string& where);
  /// The human summary `plan` prints: one line per value with its why.
  std::string summary() const;
};

/// Reads every case of the MSD folder `dir` (io::load_msd, io::load_msd_case) into a fingerprint.
/// Throws halfgrad::Error as those do, and when no label map holds a foreground voxel.
PlanFingerprint fingerprint_dataset(const std::string& dir);

/// The planner, a pure function of its inputs (see the top of this file). Throws halfgrad::Error
/// "halfgrad-unet3d plan: ..." for a CT channel, no cases, or a budget that holds not even batch 2 at
/// the smallest patch.
TrainingPlan make_plan(const PlanFingerprint& fp, const PlanTarget& target);

/// The base recipe when none is named: reference on cuda (the widths the reference trains on a GPU),
/// cpu on the CPU.
std::string default_plan_config(const std::string& device);

/// The target of `device` and precision: the memory from total_memory(device), capped by memory_gib
/// (> 0: given). With memory_gib on cuda where no GPU can be read, memory_gib alone (planning for a
/// GPU elsewhere). Throws halfgrad::Error naming `where` when the memory cannot be found out.
PlanTarget plan_target(const std::string& device, halfgrad::amp::OptLevel level, const std::string& config,
                       double memory_gib, const std::string& where);

/// A plan file (at most 1 MiB, json_checked's limits), checked by TrainingPlan::from_json naming `path`.
TrainingPlan read_plan(const std::string& path);
/// The text of `p` as written to a file (to_json, indented).
std::string plan_text(const TrainingPlan& p);

/// The recipe `r` with the plan's patch, widths, samples per epoch and foreground probability; the
/// validation volume shape rounded up to a multiple of 2^levels. (Batch and spacing reach the run
/// through its TrainArgs: fold_plan_into_args.)
Recipe apply_plan(Recipe r, const TrainingPlan& p);
/// A fresh run's options with the plan's config, batch, spacing and optimizer where the command line
/// gave none.
/// Returns one line per value saying where it came from ("batch 6 (the plan)", "batch 3 (--batch:
/// the plan's 6 overridden)"). Throws halfgrad::Error when --config names another recipe than the plan's.
std::vector<std::string> fold_plan_into_args(TrainArgs& a, const TrainingPlan& p);
/// Throws halfgrad::Error naming `path` when the dataset at `data_dir` is not the one the plan was
/// made for (dataset.json's name, case count or class count differ).
void check_plan_matches_data(const TrainingPlan& p, const std::string& data_dir, const std::string& path);

/// `halfgrad-unet3d plan`'s options.
struct PlanArgs {
  std::string data;             // --data DIR (required)
  std::string device = "cpu";   // --device cpu|cuda: the device the plan is for
  double memory_gib = 0;        // --memory-gib X: cap the budget (0: not given)
  std::string config;           // --config NAME: the base recipe (default: default_plan_config)
  bool amp = false;
  std::string opt_level;
  std::string amp_dtype = "fp16";
  std::string output;           // --output FILE (required)
  bool overwrite = false;
};

/// Plans, prints the summary, writes --output (refused if it exists unless --overwrite). Returns 0.
int run_plan(const PlanArgs& a);

}  // namespace unet3d_app
