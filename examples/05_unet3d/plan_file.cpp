// plan_file.cpp - the plan as JSON (plan.h: TrainingPlan::to_json / from_json, read_plan, plan_text)
// and as the human summary `halfgrad-unet3d plan` prints.
#include <algorithm>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "examples/05_unet3d/plan.h"
#include "nn/unet3d.h"
#include "unet3d/run_folder.h"

namespace unet3d_app {

using namespace halfgrad;
using json_checked::Field;
using nlohmann::json;

namespace {

constexpr const char* kPlanFormat = "halfgrad-unet3d plan";
constexpr int64_t kPlanVersion = 1;
constexpr size_t kMaxPlanFileBytes = size_t{1} << 20;
constexpr size_t kMaxText = 600;  // a why, a source or a name: printed, so bounded
constexpr int64_t kMaxSide = 4096;

template <typename T>
json planned(const Planned<T>& p) {
  return {{"value", p.value}, {"why", p.why}};
}

json intensity_json(const IntensityStats& s) {
  return {{"channel", s.channel}, {"voxels", s.voxels}, {"mean", s.mean},   {"sd", s.sd},
          {"median", s.median},   {"min", s.min},       {"max", s.max},     {"percentile_00_5", s.p00_5},
          {"percentile_99_5", s.p99_5}};
}

// The keys of object `f` must be among `allowed`: a misspelt key would otherwise be ignored.
void only_keys(const Field& f, std::initializer_list<const char*> allowed) {
  f.require_object();
  for (const auto& [key, value] : f.value().items())
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }))
      f.fail("has the unknown key \"" + key.substr(0, 40) + "\"; expected only the keys halfgrad-unet3d plan writes");
}

// A string we print: at most kMaxText bytes, no control characters (a terminal escape).
std::string text(const Field& f) {
  const std::string s = f.as_string();
  const bool control = std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  if (s.size() > kMaxText || control)
    f.fail("is not a plain line of text: expected at most " + std::to_string(kMaxText) +
           " characters without control characters");
  return s;
}

// {"value": ..., "why": "..."}: the value's Field, the why into `why`.
Field value_of(const Field& parent, const char* key, std::string& why) {
  const Field f = parent[key];
  only_keys(f, {"value", "why"});
  why = text(f["why"]);
  return f["value"];
}

std::array<double, 3> three_numbers(const Field& f) {
  const std::vector<double> v = f.as_number_list();
  if (v.size() != 3) f.fail("has " + std::to_string(v.size()) + " numbers; expected 3 (z, y, x)");
  return {v[0], v[1], v[2]};
}

IntensityStats intensity_from(const Field& f) {
  only_keys(f, {"channel", "voxels", "mean", "sd", "median", "min", "max", "percentile_00_5", "percentile_99_5"});
  IntensityStats s;
  s.channel = text(f["channel"]);
  s.voxels = f["voxels"].as_int(1, INT64_MAX);
  s.mean = f["mean"].as_number();
  s.sd = f["sd"].as_number();
  if (s.sd < 0) f["sd"].fail("is negative; expected a standard deviation >= 0");
  s.median = f["median"].as_number();
  s.min = f["min"].as_number();
  s.max = f["max"].as_number();
  s.p00_5 = f["percentile_00_5"].as_number();
  s.p99_5 = f["percentile_99_5"].as_number();
  if (!(s.min <= s.p00_5 && s.p00_5 <= s.median && s.median <= s.p99_5 && s.p99_5 <= s.max))
    f.fail("does not hold min <= percentile_00_5 <= median <= percentile_99_5 <= max");
  return s;
}

void made_for_from(const Field& m, TrainingPlan& p) {
  only_keys(m, {"device", "opt_level", "config", "budget_bytes", "budget_source"});
  p.device = m["device"].as_string();
  if (p.device != "cpu" && p.device != "cuda") m["device"].fail("is \"" + p.device.substr(0, 20) + "\"; expected cpu or cuda");
  p.opt_level = m["opt_level"].as_string();
  try {
    amp::opt_level_from_name(p.opt_level);
  } catch (const Error&) {
    m["opt_level"].fail("is \"" + p.opt_level.substr(0, 20) + "\"; expected O0, O1, O2 or O3");
  }
  p.config = m["config"].as_string();
  recipe_by_name(p.config, m.where() + ": field '" + m["config"].path() + "'");
  p.budget_bytes = static_cast<uint64_t>(m["budget_bytes"].as_int(1, INT64_MAX));
  p.budget_source = text(m["budget_source"]);
}

void dataset_from(const Field& d, TrainingPlan& p) {
  only_keys(d, {"name", "dir", "cases", "classes", "channels"});
  p.dataset_name = text(d["name"]);
  p.dataset_dir = d["dir"].as_string();
  p.cases = d["cases"].as_int(1, int64_t{1} << 30);
  p.num_classes = d["classes"].as_int(2, nn::UNet3dOptions::kMaxJsonWidth);
  p.channel_names = d["channels"].as_string_list();
  if (p.channel_names.size() > 1) d["channels"].fail("lists several channels; halfgrad-unet3d reads one");
}

// The network and the patch: levels, then a patch of multiples of 2^levels, one width per level.
void network_from(const Field& j, TrainingPlan& p) {
  p.levels.value = value_of(j, "levels", p.levels.why).as_int(1, kMaxPlanLevels);
  const int64_t div = int64_t{1} << p.levels.value;
  const Field patch = value_of(j, "patch", p.patch.why);
  const std::vector<int64_t> e = patch.as_int_list();
  if (e.size() != 3) patch.fail("has " + std::to_string(e.size()) + " sides; expected 3 (z, y, x)");
  for (size_t d = 0; d < 3; ++d) {
    if (e[d] < div || e[d] > kMaxSide || e[d] % div != 0)
      patch[d].fail("is " + std::to_string(e[d]) + "; expected a multiple of 2^levels = " + std::to_string(div) +
                    " in [" + std::to_string(div) + ", " + std::to_string(kMaxSide) + "]");
    p.patch.value[d] = e[d];
  }
  const Field ch = value_of(j, "channels", p.channels.why);
  p.channels.value = ch.as_int_list();
  if (static_cast<int64_t>(p.channels.value.size()) != p.levels.value)
    ch.fail("lists " + std::to_string(p.channels.value.size()) + " widths; expected one per level (" +
            std::to_string(p.levels.value) + ")");
  for (size_t l = 0; l < p.channels.value.size(); ++l) ch[l].as_int(1, nn::UNet3dOptions::kMaxJsonWidth);
  p.bottleneck.value = value_of(j, "bottleneck", p.bottleneck.why).as_int(1, nn::UNet3dOptions::kMaxJsonWidth);
}

}  // namespace

json TrainingPlan::to_json() const {
  json intensity_list = json::array();
  for (const IntensityStats& s : intensity) intensity_list.push_back(intensity_json(s));
  return {{"format", kPlanFormat},
          {"version", kPlanVersion},
          {"dataset",
           {{"name", dataset_name}, {"dir", dataset_dir}, {"cases", cases}, {"classes", num_classes},
            {"channels", channel_names}}},
          {"made_for",
           {{"device", device}, {"opt_level", opt_level}, {"config", config}, {"budget_bytes", budget_bytes},
            {"budget_source", budget_source}}},
          {"intensity", intensity_list},
          {"spacing", planned(spacing)},
          {"median_shape", planned(median_shape)},
          {"levels", planned(levels)},
          {"patch", planned(patch)},
          {"channels", planned(channels)},
          {"bottleneck", planned(bottleneck)},
          {"batch", planned(batch)},
          {"samples_per_epoch", planned(samples_per_epoch)},
          {"foreground_prob", planned(foreground_prob)},
          {"optimizer", planned(optimizer)},
          {"normalization", planned(normalization)},
          {"estimate", {{"bytes", estimate_bytes}, {"what", estimate_what}}}};
}

TrainingPlan TrainingPlan::from_json(const json& doc, const std::string& where) {
  const Field j(doc, where);
  only_keys(j, {"format", "version", "dataset", "made_for", "intensity", "spacing", "median_shape", "levels", "patch",
                "channels", "bottleneck", "batch", "samples_per_epoch", "foreground_prob", "optimizer", "normalization",
                "estimate"});
  if (j["format"].as_string() != kPlanFormat) j["format"].fail(std::string("is not \"") + kPlanFormat + "\"; not a plan file");
  j["version"].as_int(kPlanVersion, kPlanVersion);
  TrainingPlan p;
  dataset_from(j["dataset"], p);
  made_for_from(j["made_for"], p);
  const Field in = j["intensity"];
  in.require_array();
  if (in.size() > 1) in.fail("lists several channels; halfgrad-unet3d reads one");
  for (size_t i = 0; i < in.size(); ++i) p.intensity.push_back(intensity_from(in[i]));
  const Field sp = value_of(j, "spacing", p.spacing.why);
  p.spacing.value = three_numbers(sp);
  check_spacing(p.spacing.value, where + ": field 'spacing.value'");
  const Field ms = value_of(j, "median_shape", p.median_shape.why);
  p.median_shape.value = three_numbers(ms);
  for (size_t d = 0; d < 3; ++d)
    if (!(p.median_shape.value[d] >= 1 && p.median_shape.value[d] <= double(kMaxResampledVoxels)))
      ms[d].fail("is out of range; expected a side of at least 1 voxel");
  network_from(j, p);
  p.batch.value = value_of(j, "batch", p.batch.why).as_int(1, kMaxPlanBatch);
  p.samples_per_epoch.value = value_of(j, "samples_per_epoch", p.samples_per_epoch.why).as_int(1, 1000000000);
  const Field fg = value_of(j, "foreground_prob", p.foreground_prob.why);
  p.foreground_prob.value = fg.as_number();
  if (!(p.foreground_prob.value >= 0 && p.foreground_prob.value <= 1)) fg.fail("is out of range; expected [0, 1]");
  const Field opt = value_of(j, "optimizer", p.optimizer.why);
  p.optimizer.value = opt.as_string();
  optimizer_by_name(p.optimizer.value, where + ": field 'optimizer.value'");
  const Field norm = value_of(j, "normalization", p.normalization.why);
  p.normalization.value = norm.as_string();
  if (p.normalization.value != "zscore_per_volume")
    norm.fail("is \"" + p.normalization.value.substr(0, 40) +
              "\"; expected \"zscore_per_volume\", the one normalisation halfgrad-unet3d's loader does");
  const Field est = j["estimate"];
  only_keys(est, {"bytes", "what"});
  p.estimate_bytes = static_cast<uint64_t>(est["bytes"].as_int(0, INT64_MAX));
  p.estimate_what = text(est["what"]);
  return p;
}

TrainingPlan read_plan(const std::string& path) {
  const std::string where = "halfgrad-unet3d: plan " + path;
  const std::string s = read_regular_file(path, kMaxPlanFileBytes, where, "a plan JSON file written by halfgrad-unet3d plan");
  json_checked::ParseLimits limits;
  limits.max_bytes = kMaxPlanFileBytes;
  limits.max_depth = 8;
  return TrainingPlan::from_json(json_checked::parse(s.data(), s.size(), where, limits), where);
}

std::string plan_text(const TrainingPlan& p) { return p.to_json().dump(1) + "\n"; }

std::string TrainingPlan::summary() const {
  std::ostringstream os;
  os.precision(6);
  auto line = [&](const char* what, const std::string& value, const std::string& why) {
    os << "  " << what << std::string(15 - std::min<size_t>(14, std::string(what).size()), ' ') << value
       << (why.empty() ? "" : ": " + why) << "\n";
  };
  auto x3 = [](const auto& a) {
    std::ostringstream s;
    s.precision(6);
    s << a[0] << "x" << a[1] << "x" << a[2];
    return s.str();
  };
  std::string widths;
  for (int64_t w : channels.value) widths += (widths.empty() ? "" : "-") + std::to_string(w);
  os << "plan: " << (dataset_name.empty() ? std::string("dataset") : dataset_name) << " (" << dataset_dir << "): "
     << cases << " cases, " << num_classes << " classes"
     << (channel_names.empty() ? std::string() : ", channel " + channel_names[0]) << "\n";
  line("made for", device + ", " + opt_level + ", base recipe '" + config + "'", "");
  line("budget", human_bytes(budget_bytes), budget_source);
  line("spacing", spacing_str(spacing.value), spacing.why);
  line("median shape", x3(median_shape.value), median_shape.why);
  line("levels", std::to_string(levels.value), levels.why);
  line("patch", x3(patch.value), patch.why);
  line("widths", widths, channels.why);
  line("bottleneck", std::to_string(bottleneck.value), bottleneck.why);
  line("batch", std::to_string(batch.value), batch.why);
  line("samples/epoch", std::to_string(samples_per_epoch.value), samples_per_epoch.why);
  std::ostringstream fg;
  fg << foreground_prob.value;
  line("foreground", fg.str(), foreground_prob.why);
  line("optimizer", optimizer.value, optimizer.why);
  line("normalisation", normalization.value, normalization.why);
  for (const IntensityStats& s : intensity) {
    std::ostringstream st;
    st.precision(6);
    st << s.channel << ", " << s.voxels << " foreground voxels: mean " << s.mean << ", sd " << s.sd << ", median "
       << s.median << ", 0.5% " << s.p00_5 << ", 99.5% " << s.p99_5 << ", min " << s.min << ", max " << s.max;
    line("intensity", st.str(), "");
  }
  line("estimate", estimate_what, "");
  return os.str();
}

}  // namespace unet3d_app
