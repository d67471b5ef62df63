// plan.cpp - see plan.h: the fingerprint, the planner, the plan file, and what train does with it.
#include "examples/05_unet3d/plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "amp/precision_plan.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/file_io.h"
#include "examples/05_unet3d/memory_estimate.h"
#include "io/msd.h"
#include "nn/unet3d.h"
#include "unet3d/run_folder.h"

namespace unet3d_app {

using namespace halfgrad;
using json_checked::Field;

namespace {

constexpr double kMaxIntensityVoxels = 1e7;  // nnU-Net's num_foreground_voxels_for_intensitystats
constexpr const char* kZscorePerVolume = "zscore_per_volume";

// numpy.percentile(sorted values, q), linear interpolation between order statistics.
double percentile_sorted(const std::vector<double>& v, double q) {
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string num(double v, int digits = 6) {
  std::ostringstream os;
  os.precision(digits);
  os << v;
  return os.str();
}

std::string extent_str(const Extent& e) {
  return std::to_string(e[0]) + "x" + std::to_string(e[1]) + "x" + std::to_string(e[2]);
}

std::string shape3_str(const std::array<double, 3>& e) { return num(e[0]) + "x" + num(e[1]) + "x" + num(e[2]); }

bool is_ct(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name == "ct";
}

IntensityStats intensity_stats(std::vector<double> v, const std::string& channel) {
  std::sort(v.begin(), v.end());
  IntensityStats s;
  s.channel = channel;
  s.voxels = static_cast<int64_t>(v.size());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(sq / static_cast<double>(v.size()));  // np.std: the population SD
  s.median = percentile_sorted(v, 50);
  s.min = v.front();
  s.max = v.back();
  s.p00_5 = percentile_sorted(v, 0.5);
  s.p99_5 = percentile_sorted(v, 99.5);
  return s;
}

}  // namespace

PlanFingerprint fingerprint_dataset(const std::string& dir) {
  const io::MsdDataset ds = io::load_msd(dir);
  PlanFingerprint fp;
  fp.name = ds.name;
  fp.dir = std::filesystem::absolute(dir).lexically_normal().string();
  fp.num_classes = ds.num_classes;
  fp.channel_names = ds.channel_names;
  HG_CHECK(!ds.pairs.empty(), "halfgrad-unet3d plan: " << dir << "/dataset.json lists no training cases");
  // Each case gives at most 10^7 / cases foreground voxels: every k-th, in file order (deterministic).
  const double per_case = std::max(1.0, std::floor(kMaxIntensityVoxels / static_cast<double>(ds.pairs.size())));
  std::vector<double> fg;
  for (const io::MsdPair& p : ds.pairs) {
    const io::MsdCase c = io::load_msd_case(p, ds.num_classes);
    const Shape& s = c.image.data.shape();
    HG_CHECK(s.size() == 3, "halfgrad-unet3d plan: " << p.image << " is not a 3-D volume");
    fp.spacings.push_back(c.image.spacing);
    fp.shapes.push_back({s[0], s[1], s[2]});
    const float* x = c.image.data.data<float>();
    const int64_t* y = c.label.data.data<int64_t>();
    std::vector<double> mine;
    for (int64_t i = 0; i < c.image.data.numel(); ++i)
      if (y[i] > 0) mine.push_back(x[i]);
    const size_t k = static_cast<size_t>(std::ceil(static_cast<double>(mine.size()) / per_case));
    for (size_t i = 0; i < mine.size(); i += std::max<size_t>(k, 1)) fg.push_back(mine[i]);
  }
  HG_CHECK(!fg.empty(), "halfgrad-unet3d plan: no label map of " << dir
                                                                  << " holds a foreground voxel (label > 0); "
                                                                     "expected a segmentation dataset");
  const std::string channel = fp.channel_names.empty() ? std::string("0") : fp.channel_names[0];
  fp.intensity.push_back(intensity_stats(std::move(fg), channel));
  return fp;
}

// ---- the planner ---------------------------------------------------------------------------------

namespace {

// nnU-Net's get_pool_and_conv_props on the smallest side (all axes pool together here): halvings,
// rounding up, while the side is >= 2 * kMinBottleneckEdge; at least 1 (nn::UNet3d has a level).
int64_t pool_levels(double smallest) {
  int64_t levels = 0;
  double s = smallest;
  while (s >= 2 * kMinBottleneckEdge && levels < kMaxPlanLevels) {
    s = std::ceil(s / 2);
    ++levels;
  }
  return std::max<int64_t>(levels, 1);
}

Extent pad_to(const std::array<double, 3>& p, int64_t levels) {
  const double div = static_cast<double>(int64_t{1} << levels);
  Extent e;
  for (size_t d = 0; d < 3; ++d) e[d] = static_cast<int64_t>(std::ceil(p[d] / div) * div);
  return e;
}

std::array<double, 3> as_double(const Extent& e) {
  return {static_cast<double>(e[0]), static_cast<double>(e[1]), static_cast<double>(e[2])};
}

double voxels(const std::array<double, 3>& e) { return e[0] * e[1] * e[2]; }

// What the planner needs beside its inputs: the base recipe, the resampled shapes, a parameter
// count per depth (a U-Net is built once per depth: the count is exactly the model's).
struct Planner {
  const PlanFingerprint& fp;
  const PlanTarget& t;
  Recipe base;
  Spacing spacing{};
  std::vector<Extent> shapes;  // every case at `spacing`
  std::array<double, 3> median{};
  std::map<int64_t, int64_t> params;

  nn::UNet3dOptions model(int64_t levels) const {
    const int64_t c0 = base.model.channels().front();
    std::vector<int64_t> c;
    for (int64_t l = 0; l < levels; ++l) c.push_back(std::min(c0 << l, kMaxPlanWidth));
    nn::UNet3dOptions o = base.model;
    return o.channels(c).bottleneck(std::min(c0 << levels, kMaxPlanWidth)).num_classes(fp.num_classes);
  }
  int64_t num_parameters(const nn::UNet3dOptions& o) {
    const int64_t key = static_cast<int64_t>(o.channels().size()) * 100000 + o.channels().front();
    auto it = params.find(key);
    if (it != params.end()) return it->second;
    Generator gen(0);
    return params[key] = nn::UNet3d(o, gen).num_parameters();
  }
  // The largest validation volume the loader makes: every case padded to 2^levels, and to the recipe's shape.
  Extent forward_shape(int64_t levels) const {
    std::array<double, 3> m = as_double(base.volume_shape);
    for (const Extent& e : shapes)
      for (size_t d = 0; d < 3; ++d) m[d] = std::max(m[d], static_cast<double>(e[d]));
    return pad_to(m, levels);
  }
  MemoryEstimate estimate(const nn::UNet3dOptions& o, const Extent& patch, int64_t batch) {
    const int64_t levels = static_cast<int64_t>(o.channels().size());
    return estimate_train_memory(o, num_parameters(o), patch, batch, forward_shape(levels), t.level,
                                 t.device == "cuda");
  }
  uint64_t fits(int64_t levels, const Extent& patch, int64_t batch) {
    return estimate(model(levels), patch, batch).total();
  }
};

void plan_spacing(Planner& pl, TrainingPlan& p) {
  pl.spacing = target_spacing(pl.fp.spacings, pl.fp.shapes, "halfgrad-unet3d plan: " + pl.fp.dir);
  std::array<std::vector<double>, 3> sp, sz;
  for (size_t i = 0; i < pl.fp.spacings.size(); ++i) {
    pl.shapes.push_back(resampled_shape(pl.fp.shapes[i], pl.fp.spacings[i], pl.spacing, "halfgrad-unet3d plan"));
    for (size_t d = 0; d < 3; ++d) {
      sp[d].push_back(pl.fp.spacings[i][d]);
      sz[d].push_back(static_cast<double>(pl.shapes.back()[d]));
    }
  }
  bool median_only = true;
  for (size_t d = 0; d < 3; ++d) {
    std::sort(sp[d].begin(), sp[d].end());
    std::sort(sz[d].begin(), sz[d].end());
    pl.median[d] = percentile_sorted(sz[d], 50);
    median_only = median_only && percentile_sorted(sp[d], 50) == pl.spacing[d];
  }
  const std::string n = std::to_string(pl.fp.spacings.size());
  p.spacing = {pl.spacing, median_only ? "the median spacing per axis of the " + n + " cases (nnU-Net's target spacing)"
                                       : "nnU-Net's target spacing: the median per axis of the " + n +
                                             " cases, the coarse axis at its 10th percentile (anisotropy rule)"};
  p.median_shape = {pl.median, "per axis, the median of the " + n + " cases' shapes resampled to the spacing"};
}

// nnU-Net v2's initial patch: 256^3 voxels in proportion to 1 / spacing, clipped to the median shape.
std::array<double, 3> initial_patch(const Planner& pl) {
  std::array<double, 3> inv{};
  for (size_t d = 0; d < 3; ++d) inv[d] = 1.0 / pl.spacing[d];
  const double scale = std::cbrt(256.0 * 256.0 * 256.0 / voxels(inv));
  std::array<double, 3> p{};
  for (size_t d = 0; d < 3; ++d) p[d] = std::min(std::nearbyint(inv[d] * scale), pl.median[d]);
  return p;
}

// The budget, and on the CPU its cap at the base recipe's own estimate.
void plan_budget(Planner& pl, TrainingPlan& p) {
  p.budget_bytes = pl.t.memory_bytes;
  p.budget_source = pl.t.memory_source;
  if (pl.t.device != "cpu") return;
  const nn::UNet3dOptions base = nn::UNet3dOptions(pl.base.model).num_classes(pl.fp.num_classes);
  const int64_t levels = static_cast<int64_t>(base.channels().size());
  const Extent step = pl.base.patch[0] > 0 ? pl.base.patch : pl.forward_shape(levels);
  const uint64_t cap = estimate_train_memory(base, pl.num_parameters(base), step, pl.base.batch,
                                             pl.forward_shape(levels), pl.t.level, false).total();
  if (cap >= p.budget_bytes) return;
  p.budget_bytes = cap;
  p.budget_source = "the '" + pl.base.name + "' recipe's own estimate (batch " + std::to_string(pl.base.batch) +
                    " at " + extent_str(step) + "), below " + human_bytes(pl.t.memory_bytes) + " (" +
                    pl.t.memory_source + "): on the CPU a planned step costs about what the recipe's does";
}

// The patch and depth: start from initial_patch, shrink (nnU-Net's loop) until batch 2 fits.
void plan_patch(Planner& pl, TrainingPlan& p) {
  const std::array<double, 3> start = initial_patch(pl);
  int64_t levels = pool_levels(*std::min_element(start.begin(), start.end()));
  Extent patch = pad_to(start, levels);
  int64_t shrinks = 0;
  while (pl.fits(levels, patch, 2) > p.budget_bytes) {
    const int64_t div = int64_t{1} << levels;
    int axis = -1;  // the side largest relative to the median shape that can still lose a divisor
    for (int d = 0; d < 3; ++d)
      if (patch[d] > div && (axis < 0 || patch[d] / pl.median[d] >= patch[axis] / pl.median[axis])) axis = d;
    HG_CHECK(axis >= 0, "halfgrad-unet3d plan: even batch 2 at the smallest patch " << extent_str(patch) << " ("
                            << human_bytes(pl.fits(levels, patch, 2)) << ") exceeds the budget of "
                            << human_bytes(p.budget_bytes) << " (" << p.budget_source
                            << "); give more memory (--memory-gib) or a smaller --config");
    Extent tmp = patch;
    tmp[axis] -= div;
    const int64_t tmp_levels = pool_levels(static_cast<double>(*std::min_element(tmp.begin(), tmp.end())));
    Extent next = patch;
    next[axis] -= int64_t{1} << tmp_levels;
    levels = pool_levels(static_cast<double>(*std::min_element(next.begin(), next.end())));
    next = pad_to(as_double(next), levels);
    if (next == patch) {  // padding undid the step: keep the smaller side at the smaller depth
      next = tmp;
      levels = tmp_levels;
    }
    patch = next;
    ++shrinks;
  }
  const std::string div = std::to_string(int64_t{1} << levels);
  const int64_t smallest = *std::min_element(patch.begin(), patch.end());
  p.levels = {levels, smallest < 2 * kMinBottleneckEdge
                          ? "the smallest side of the patch, " + std::to_string(smallest) +
                                ", is < 8: 1, the fewest the U-Net has (its bottleneck is then < 4 voxels on that "
                                "side, below nnU-Net's rule; all axes pool together)"
                          : "the smallest side of the patch halves " + std::to_string(levels) +
                                " times before it is < 8 (bottleneck >= 4 voxels: nnU-Net's rule; all axes pool "
                                "together)"};
  p.patch = {patch, "from " + shape3_str(start) + " (256^3 voxels in proportion to 1/spacing, clipped to the median "
                        "shape), each side rounded up to a multiple of 2^" + std::to_string(levels) + " = " + div +
                        (shrinks ? ", then " + std::to_string(shrinks) +
                                       " side(s) reduced, each time the largest relative to the median shape, until "
                                       "batch 2 fits the budget"
                                 : "; batch 2 fits the budget as it is")};
}

void plan_model_and_batch(Planner& pl, TrainingPlan& p) {
  const nn::UNet3dOptions o = pl.model(p.levels.value);
  p.channels = {o.channels(), "the '" + pl.base.name + "' recipe's first width " +
                                  std::to_string(pl.base.model.channels().front()) +
                                  ", doubling at each level, at most 320 (nnU-Net's cap)"};
  p.bottleneck = {o.bottleneck(), "the next doubling of the widths, at most 320"};
  int64_t fit = 2;
  while (fit < kMaxPlanBatch && pl.fits(p.levels.value, p.patch.value, fit + 1) <= p.budget_bytes) ++fit;
  const double dataset = voxels(pl.median) * static_cast<double>(pl.fp.spacings.size());
  const double patches = kMaxDatasetCovered * dataset / voxels(as_double(p.patch.value));
  const double five = std::nearbyint(patches);  // np.round: ties to even
  const int64_t batch = std::max<int64_t>(2, std::min<int64_t>(fit, static_cast<int64_t>(five)));
  p.batch = {batch, std::to_string(fit) + (fit == kMaxPlanBatch ? " (the cap)" : "") +
                        " fit the budget; 5% of the dataset's " + num(dataset, 4) + " voxels (cases x median shape) is " +
                        num(patches, 3) + " patches, rounded " + num(five) + " (nnU-Net's cap); at least 2"};
  const MemoryEstimate est = pl.estimate(o, p.patch.value, batch);
  p.estimate_bytes = est.total();
  p.estimate_what = est.describe();
  const bool cpu = pl.t.device == "cpu";
  const int64_t base_steps =
      std::max<int64_t>(1, pl.base.samples_per_epoch > 0 ? pl.base.samples_per_epoch / pl.base.batch : kNnUnetStepsPerEpoch);
  const int64_t steps = cpu ? base_steps : kNnUnetStepsPerEpoch;
  p.samples_per_epoch = {steps * batch, std::to_string(steps) + " steps of the batch: " +
                                            (cpu ? "the '" + pl.base.name + "' recipe's steps an epoch (on the CPU an "
                                                   "epoch costs what the recipe's does)"
                                                 : std::string("nnU-Net's 250 iterations an epoch"))};
  p.foreground_prob = {kPlanForegroundProb, "nnU-Net's oversample_foreground_percent: a third of the patches centred "
                                            "on a foreground voxel"};
}

}  // namespace

TrainingPlan make_plan(const PlanFingerprint& fp, const PlanTarget& t) {
  HG_CHECK(!fp.spacings.empty() && fp.spacings.size() == fp.shapes.size(),
           "halfgrad-unet3d plan: the fingerprint has " << fp.spacings.size() << " spacings and " << fp.shapes.size()
                                                        << " shapes; expected one of each per case, at least one");
  HG_CHECK(fp.num_classes >= 2, "halfgrad-unet3d plan: " << fp.num_classes << " classes; expected at least 2");
  HG_CHECK(fp.channel_names.size() <= 1,
           "halfgrad-unet3d plan: " << fp.dir << " has " << fp.channel_names.size()
                                    << " image channels; halfgrad-unet3d reads one");
  for (const std::string& c : fp.channel_names)
    HG_CHECK(!is_ct(c), "halfgrad-unet3d plan: " << fp.dir << "/dataset.json names channel 0 '" << c
                            << "': nnU-Net normalises CT by clipping to the foreground's 0.5/99.5 percentiles and a "
                               "global z-score, which halfgrad-unet3d's loader does not do (it z-scores each volume); "
                               "refusing a plan that train would not follow");
  TrainingPlan p;
  Planner pl{fp, t, recipe_by_name(t.config, "halfgrad-unet3d plan: --config"), {}, {}, {}, {}};
  p.dataset_name = fp.name;
  p.dataset_dir = fp.dir;
  p.cases = static_cast<int64_t>(fp.spacings.size());
  p.num_classes = fp.num_classes;
  p.channel_names = fp.channel_names;
  p.device = t.device;
  p.opt_level = amp::opt_level_name(t.level);
  p.config = t.config;
  p.intensity = fp.intensity;
  plan_spacing(pl, p);
  plan_budget(pl, p);
  plan_patch(pl, p);
  plan_model_and_batch(pl, p);
  if (t.device == "cuda")
    p.optimizer = {"sgd", "nnU-Net v2's: SGD, Nesterov momentum 0.99, lr 1e-2, weight decay 3e-5, poly schedule "
                          "(exponent 0.9), no warm-up"};
  else
    p.optimizer = {"adamw", "the '" + t.config + "' recipe's AdamW with its warm-up and schedule (nnU-Net's SGD at lr "
                            "1e-2 is tuned for 1000 epochs of 250 steps, not a CPU run's few hundred steps)"};
  p.normalization = {kZscorePerVolume, "each volume z-scored on its own (nnU-Net's ZScoreNormalization for a "
                                       "channel other than CT; the loader's)"};
  return p;
}

std::string default_plan_config(const std::string& device) { return device == "cuda" ? "reference" : "cpu"; }

PlanTarget plan_target(const std::string& device, amp::OptLevel level, const std::string& config, double memory_gib,
                       const std::string& where) {
  PlanTarget t;
  t.device = device;
  t.level = level;
  t.config = config;
  const uint64_t gib = static_cast<uint64_t>(std::llround(memory_gib * 1024.0 * 1024.0 * 1024.0));
  if (memory_gib > 0 && device == "cuda" && !cuda::is_available()) {
    t.memory_bytes = gib;
    t.memory_source = "--memory-gib " + num(memory_gib) + " (no GPU here to read a total from)";
    return t;
  }
  MemoryAvailable total;
  try {
    total = total_memory(device);
  } catch (const Error& e) {
    HG_FAIL(where << ": cannot read the total memory of --device " << device << " (" << e.what() << "); pass --memory-gib");
  }
  t.memory_bytes = total.bytes;
  t.memory_source = "total memory: " + total.source;
  if (memory_gib > 0 && gib < total.bytes) {
    t.memory_bytes = gib;
    t.memory_source = "--memory-gib " + num(memory_gib) + " (of " + human_bytes(total.bytes) + ", " + total.source + ")";
  }
  return t;
}

// ---- what train does with a plan -------------------------------------------------------------------

Recipe apply_plan(Recipe r, const TrainingPlan& p) {
  r.model.channels(p.channels.value).bottleneck(p.bottleneck.value);
  r.patch = p.patch.value;
  r.samples_per_epoch = p.samples_per_epoch.value;
  r.foreground_prob = p.foreground_prob.value;
  const int64_t div = int64_t{1} << p.levels.value;  // the validation volumes' padding must halve evenly too
  for (int64_t& e : r.volume_shape) e = (e + div - 1) / div * div;
  return r;
}

std::vector<std::string> fold_plan_into_args(TrainArgs& a, const TrainingPlan& p) {
  const auto given = [&](const char* o) { return std::find(a.given.begin(), a.given.end(), o) != a.given.end(); };
  HG_CHECK(!given("--config") || a.config == p.config,
           "halfgrad-unet3d train: --config " << a.config << " names another base recipe than the plan's '" << p.config
               << "' (its widths and patch were planned from it); drop --config, or make the plan with --config "
               << a.config);
  a.config = p.config;
  std::vector<std::string> lines;
  if (given("--batch")) lines.push_back("batch " + std::to_string(a.batch) + " (--batch: the plan's " +
                                        std::to_string(p.batch.value) + " overridden)");
  else {
    a.batch = p.batch.value;
    lines.push_back("batch " + std::to_string(a.batch) + " (the plan's)");
  }
  if (given("--optimizer")) lines.push_back("optimizer " + a.optimizer + " (--optimizer: the plan's " +
                                            p.optimizer.value + " overridden)");
  else {
    a.optimizer = p.optimizer.value;
    lines.push_back("optimizer " + a.optimizer + " (the plan's)");
  }
  if (given("--spacing")) lines.push_back("spacing " + a.spacing + " (--spacing: the plan's " +
                                          spacing_str(p.spacing.value) + " overridden)");
  else {
    a.spacing = SpacingChoice::fixed(p.spacing.value).str();
    lines.push_back("spacing " + spacing_str(p.spacing.value) + " (the plan's)");
  }
  return lines;
}

void check_plan_matches_data(const TrainingPlan& p, const std::string& data_dir, const std::string& path) {
  const io::MsdDataset ds = io::load_msd(data_dir);
  const int64_t cases = static_cast<int64_t>(ds.pairs.size());
  HG_CHECK(ds.name == p.dataset_name && cases == p.cases && ds.num_classes == p.num_classes,
           "halfgrad-unet3d train: the plan " << path << " was made for '" << p.dataset_name << "' (" << p.cases
               << " cases, " << p.num_classes << " classes), but --data " << data_dir << " is '" << ds.name << "' ("
               << cases << " cases, " << ds.num_classes << " classes); make a plan of this data (halfgrad-unet3d plan, "
               << "or train --plan auto)");
  // The channel decides the normalisation (CT is refused): a plan of a CT dataset must not train an MRI one.
  const auto names = [](const std::vector<std::string>& v) { return v.empty() ? std::string("none") : v[0]; };
  HG_CHECK(ds.channel_names == p.channel_names,
           "halfgrad-unet3d train: the plan " << path << " was made for the channel '" << names(p.channel_names)
               << "', but --data " << data_dir << "'s dataset.json names '" << names(ds.channel_names)
               << "'; make a plan of this data (halfgrad-unet3d plan, or train --plan auto)");
}

int run_plan(const PlanArgs& a) {
  const std::string where = "halfgrad-unet3d plan";
  namespace fs = std::filesystem;
  std::error_code ec;
  HG_CHECK(a.overwrite || !fs::exists(fs::symlink_status(a.output, ec)),
           where << ": --output " << a.output << " exists already; pass --overwrite to replace it, or choose another file");
  HG_CHECK(!fs::is_directory(a.output, ec), where << ": --output " << a.output << " is a directory; expected a file path");
  // Before the fingerprint pass reads every case: a folder that does not exist fails now, not after it.
  const fs::path folder = fs::path(a.output).parent_path().empty() ? fs::path(".") : fs::path(a.output).parent_path();
  HG_CHECK(fs::is_directory(folder, ec), where << ": --output " << a.output << ": its folder " << folder.string()
                                               << " does not exist; expected a file in an existing folder");
  const amp::PrecisionPlan precision =
      amp::PrecisionPlan::from_words(a.opt_level, a.amp, a.amp_dtype, {}, {}, where);
  const std::string config = a.config.empty() ? default_plan_config(a.device) : a.config;
  const PlanTarget target = plan_target(a.device, precision.level, config, a.memory_gib, where);
  const TrainingPlan p = make_plan(fingerprint_dataset(a.data), target);
  std::cout << p.summary();
  write_file_atomic(a.output, plan_text(p));
  std::cout << "wrote " << a.output << " (train --data " << a.data << " --plan " << a.output << " uses it)" << std::endl;
  return 0;
}

}  // namespace unet3d_app
