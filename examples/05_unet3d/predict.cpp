// predict.cpp - see predict.h.
#include "examples/05_unet3d/predict.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/nonfinite.h"
#include "examples/05_unet3d/memory_estimate.h"
#include "examples/05_unet3d/metrics.h"
#include "examples/05_unet3d/overlay.h"
#include "examples/05_unet3d/progress.h"
#include "unet3d/run_folder.h"
#include "examples/05_unet3d/sliding_window.h"
#include "unet3d/trained_model.h"
#include "io/nifti.h"
#include "io/preprocess.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "ops/softmax/softmax.h"

namespace unet3d_app {

using namespace halfgrad;
namespace fs = std::filesystem;

namespace {

bool has_nifti_name(const std::string& name) {
  auto ends = [&](const std::string& s) { return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  return ends(".nii") || ends(".nii.gz");
}

struct Job {
  std::string name;         // the input's file name, also the output's
  std::string input, output, probabilities, labels, overlay;  // paths; the last three empty when not asked for
};

// Where one input's result goes: into `dest` when it is (or, for a folder input, will be) a folder,
// else `dest` itself, which must then be a .nii/.nii.gz path in an existing folder.
std::string destination(const std::string& dest, const std::string& name, bool folder_input, const char* option) {
  std::error_code ec;
  if (folder_input) {
    HG_CHECK(!fs::exists(dest, ec) || fs::is_directory(dest, ec),
             "halfgrad-unet3d predict: " << option << " " << dest << " is a file, but --input is a folder; expected a folder "
                                         << "(created if missing) for one output per input file");
    return (fs::path(dest) / name).string();
  }
  if (fs::is_directory(dest, ec)) return (fs::path(dest) / name).string();
  HG_CHECK(has_nifti_name(fs::path(dest).filename().string()),
           "halfgrad-unet3d predict: " << option << " " << dest << " is neither an existing folder nor a .nii/.nii.gz "
                                       << "file name; expected one of them");
  const fs::path parent = fs::path(dest).parent_path();
  HG_CHECK(parent.empty() || fs::is_directory(parent, ec),
           "halfgrad-unet3d predict: " << option << " " << dest << ": folder " << parent.string()
                                       << " does not exist; expected an existing folder");
  return dest;
}

std::vector<Job> plan_jobs(const PredictArgs& a) {
  std::error_code ec;
  HG_CHECK(fs::exists(a.input, ec), "halfgrad-unet3d predict: --input " << a.input
                                                                       << " does not exist; expected a .nii/.nii.gz file or a folder of them");
  const bool folder = fs::is_directory(a.input, ec);
  std::vector<std::string> names;
  if (folder) {
    for (const fs::directory_entry& e : fs::directory_iterator(a.input, ec)) {
      const std::string n = e.path().filename().string();
      if (has_nifti_name(n) && n[0] != '.' && fs::is_regular_file(e.path(), ec)) names.push_back(n);
    }
    HG_CHECK(!ec, "halfgrad-unet3d predict: --input " << a.input << ": cannot list the folder (" << ec.message() << ")");
    std::sort(names.begin(), names.end());
    HG_CHECK(!names.empty(), "halfgrad-unet3d predict: --input " << a.input
                                                                 << " holds no *.nii or *.nii.gz file; expected NIfTI volumes");
    for (const std::string* out : {&a.output, &a.probabilities})
      HG_CHECK(out->empty() || !fs::exists(*out, ec) || !fs::equivalent(*out, a.input, ec),
               "halfgrad-unet3d predict: " << *out << " is the --input folder; the outputs would replace the inputs "
                                           << "(same file names); expected another folder");
  } else {
    names.push_back(fs::path(a.input).filename().string());
  }
  std::vector<Job> jobs;
  for (const std::string& n : names) {
    Job j;
    j.name = n;
    j.input = folder ? (fs::path(a.input) / n).string() : a.input;
    j.output = destination(a.output, n, folder, "--output");
    if (!a.probabilities.empty()) j.probabilities = destination(a.probabilities, n, folder, "--probabilities");
    if (!a.labels.empty()) j.labels = (fs::path(a.labels) / n).string();
    if (!a.overlay.empty()) j.overlay = (fs::path(a.overlay) / (n.substr(0, n.rfind(".nii")) + ".png")).string();
    // No two of the paths a volume reads and writes may be one file: --probabilities equal to
    // --output would replace the label maps, and --output equal to --labels the reference labels
    // (which would then score Dice 1). Compared as weakly canonical paths (they need not exist yet).
    const std::pair<const char*, const std::string*> paths[] = {
        {"--input", &j.input}, {"--output", &j.output}, {"--probabilities", &j.probabilities},
        {"--labels", &j.labels}, {"--overlay", &j.overlay}};
    for (size_t p = 0; p < 5; ++p)
      for (size_t q = p + 1; q < 5; ++q) {
        if (paths[p].second->empty() || paths[q].second->empty()) continue;
        const fs::path u = fs::weakly_canonical(*paths[p].second, ec), v = fs::weakly_canonical(*paths[q].second, ec);
        HG_CHECK(u != v, "halfgrad-unet3d predict: " << paths[p].first << " and " << paths[q].first << " both name "
                                                     << u.string() << " for " << n
                                                     << "; expected a different file for each (no output may replace an input)");
      }
    jobs.push_back(j);
  }
  // No file may be written twice: a.nii and a.nii.gz in one folder would share a.png.
  std::map<fs::path, std::string> written_by;
  for (const Job& j : jobs)
    for (const std::string* p : {&j.output, &j.probabilities, &j.overlay}) {
      if (p->empty()) continue;
      const auto [it, fresh] = written_by.emplace(fs::weakly_canonical(*p, ec), j.name);
      HG_CHECK(fresh, "halfgrad-unet3d predict: " << it->second << " and " << j.name << " would both be written to " << *p
                                                  << "; expected one output file per input volume (rename one of them)");
    }
  // Refuse at once, before any volume runs, rather than after an hour of work.
  std::vector<std::string> existing;
  for (const Job& j : jobs)
    for (const std::string* p : {&j.output, &j.probabilities}) {
      if (!p->empty() && fs::exists(*p, ec)) existing.push_back(*p);
      HG_CHECK(p->empty() || !fs::exists(*p, ec) || !fs::equivalent(*p, j.input, ec),
               "halfgrad-unet3d predict: output " << *p << " is the input file itself; expected another path");
    }
  if (!existing.empty() && !a.overwrite)
    HG_FAIL("halfgrad-unet3d predict: " << existing.size() << " output file(s) exist already (" << existing.front()
                                        << (existing.size() > 1 ? ", ..." : "")
                                        << "); pass --overwrite to replace them, or choose another --output");
  for (const Job& j : jobs)
    if (!j.overlay.empty() && fs::exists(j.overlay, ec) && !a.overwrite)
      HG_FAIL("halfgrad-unet3d predict: " << j.overlay << " exists already; pass --overwrite to replace it");
  if (!a.overlay.empty()) {
    fs::create_directories(a.overlay, ec);
    HG_CHECK(fs::is_directory(a.overlay, ec), "halfgrad-unet3d predict: --overlay " << a.overlay
                                                                                  << ": cannot create the folder");
  }
  if (folder)
    for (const std::string* out : {&a.output, &a.probabilities})
      if (!out->empty()) {
        fs::create_directories(*out, ec);
        HG_CHECK(fs::is_directory(*out, ec), "halfgrad-unet3d predict: cannot create the folder " << *out << " ("
                                                                                               << ec.message() << ")");
      }
  return jobs;
}

std::string fixed(double v, int prec) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(prec);
  os << v;
  return os.str();
}

}  // namespace

// A volume of predict's input: its header first (a 4-D file of several volumes is a channel count,
// not a corrupt file), then the voxels. Throws halfgrad::Error naming the file and its extents.
static io::Volume read_volume(const Job& j, const nn::UNet3dOptions& mo) {
  const std::vector<int64_t> ext = io::read_nifti_extents(j.input);
  std::string extents;
  for (int64_t e : ext) extents += (extents.empty() ? "" : "x") + std::to_string(e);
  HG_CHECK(ext.size() >= 3, "halfgrad-unet3d predict: " << j.input << " is " << ext.size() << "-D (extents " << extents
                                                        << "); expected a 3-D volume");
  int64_t channels = 1;
  for (size_t d = 3; d < ext.size(); ++d) channels *= ext[d];
  HG_CHECK(channels == mo.in_channels(),
           "halfgrad-unet3d predict: " << j.input << " holds " << channels << " volume(s) (extents " << extents
                                       << "): " << channels << " channel(s), the model expects " << mo.in_channels());
  return io::read_nifti(j.input);
}

// --memory-check: the host buffers of blending (padded image, logit and weight sums, logits,
// probabilities) must fit in the host's available memory.
static void check_host_memory(const Job& j, const Shape& s, const TilePlan& plan, const nn::UNet3dOptions& mo) {
  const int64_t K = mo.num_classes();
  const double voxels = static_cast<double>(plan.padded[0] * plan.padded[1] * plan.padded[2]);
  const double need = voxels * 4.0 * static_cast<double>(mo.in_channels() + 3 * K + 2);
  const MemoryAvailable host = available_memory("cpu");
  HG_CHECK(need <= static_cast<double>(host.bytes),
           "halfgrad-unet3d predict: " << j.input << ": a volume of " << shape_str(s) << " needs about "
                                       << human_bytes(static_cast<uint64_t>(need)) << " of host memory to blend its "
                                       << plan.num_tiles() << " tiles, but " << human_bytes(host.bytes)
                                       << " is available (" << host.source << "); pass --no-memory-check to try anyway");
}

// A NaN logit would argmax to background silently: refused, naming the file, the count and the first.
static void check_finite_logits(const Job& j, const Tensor& logits, amp::OptLevel level) {
  if (!any_nonfinite(logits)) return;
  const NonFiniteSummary bad = nonfinite_summary(logits.contiguous());
  HG_FAIL("halfgrad-unet3d predict: " << j.input << ": the network's output holds " << bad.count
                                      << " non-finite logit(s) (the first, " << bad.value << ", at flat index "
                                      << bad.first << " of (classes, D, H, W) " << shape_str(logits.shape())
                                      << "); nothing was written for it ("
                                      << (level == amp::OptLevel::O0
                                              ? std::string("an FP32 model: its weights are finite (checked at load), so "
                                                            "some are too large, or a BatchNorm variance is negative")
                                              : std::string("at ") + amp::opt_level_name(level) +
                                                    ": an FP16 overflow? try the FP32 model, or --fp32-module")
                                      << ")");
}

// One model of predict's ensemble (one member without --checkpoint repeated): the model, its
// sliding window (its recipe's window, and with --tta its flip axes) and the file it came from.
struct Member {
  std::string checkpoint;
  TrainedModel tm;
  SlidingWindowOptions sw;
};

// The member's blended logits (K, D, H, W) of the z-scored image (1, D, H, W), checked finite.
static Tensor member_logits(const Job& j, const PredictArgs& a, const Member& m, const Tensor& image, const Shape& s,
                            const Placement& where, const std::string& label) {
  const TilePlan plan = plan_tiles(s, m.sw);
  ProgressBar bar("  " + label, plan.num_tiles() * mirror_passes(m.sw), a.progress);
  const Network net = [&](const Tensor& x) {
    NoGradGuard no_grad;
    amp::AutocastGuard autocast(m.tm.mp.autocast_options());
    return (*m.tm.model)(m.tm.mp.cast_input(where.input(x)));
  };
  const Tensor logits = sliding_window_logits(net, image, m.sw, [&](int64_t done, int64_t) {
    bar.update(done * mirror_passes(m.sw));
  });
  bar.finish();
  check_finite_logits(j, logits, m.tm.plan.level);  // nothing is written from a broken output
  return logits;
}

// The grid member `m` segments on: the input's own, or the input resampled to the spacing the
// model trained at (TrainedModel::spacing_mm).
static Extent member_grid(const Job& j, const Member& m, const io::Volume& vol) {
  const Shape& s = vol.data.shape();
  if (!m.tm.spacing_mm) return {s[0], s[1], s[2]};
  return resampled_shape({s[0], s[1], s[2]}, vol.spacing, *m.tm.spacing_mm, "halfgrad-unet3d predict: " + j.input);
}

// `t` (C, D, H, W) float32 on the host, resampled to `e` on the run's device (unet3d/resample.h: the
// upsample op on the GPU with --device cuda), back on the host.
static Tensor resample_on(const Placement& where, const Tensor& t, const Extent& e) {
  return resample_image(t.copy_to(where.device), e).copy_to(Device::CPU);
}

// The member's logits (K, D, H, W) on the input's grid: segmented on its own grid, resampled back.
static Tensor logits_on_input_grid(const Job& j, const PredictArgs& a, const Member& m, const io::Volume& vol,
                                   const Tensor& image, const Placement& where, const std::string& label) {
  const Shape& s = vol.data.shape();
  const Extent own{s[0], s[1], s[2]};
  const Extent e = member_grid(j, m, vol);
  if (e == own) return member_logits(j, a, m, image, s, where, label);
  const Tensor logits = member_logits(j, a, m, resample_on(where, image, e), Shape{e[0], e[1], e[2]}, where, label);
  return resample_on(where, logits, own);
}

// One volume of predict: read and checked, segmented with the sliding window (each member's; an
// ensemble averages the members' softmax), written (label map, --probabilities, --overlay) and
// scored against --labels. Returns its per-class Dice (empty without --labels). Throws
// halfgrad::Error naming the file; nothing is written for a volume that fails before its label map.
static std::vector<double> predict_volume(const Job& j, const PredictArgs& a, const std::vector<Member>& members,
                                          const Placement& where) {
  const auto t0 = std::chrono::steady_clock::now();
  const TrainedModel& tm = members[0].tm;
  const nn::UNet3dOptions& mo = tm.recipe.model;
  const int64_t K = mo.num_classes();
  std::vector<double> dice;
  const io::Volume vol = read_volume(j, mo);
  const Shape s = vol.data.shape();
  int64_t tiles = 0;
  for (const Member& m : members) {
    const Extent e = member_grid(j, m, vol);
    const TilePlan plan = plan_tiles(Shape{e[0], e[1], e[2]}, m.sw);
    if (a.memory_check) check_host_memory(j, Shape{e[0], e[1], e[2]}, plan, mo);
    tiles += plan.num_tiles();
  }
  const Tensor image = io::zscore(vol.data).view_as_shape({1, s[0], s[1], s[2]});
  Tensor labels, probabilities;
  if (members.size() == 1) {
    const Tensor logits = logits_on_input_grid(j, a, members[0], vol, image, where, j.name);
    labels = ops::argmax(logits, 0);  // (D, H, W) int64
    if (!j.probabilities.empty()) probabilities = ops::softmax(logits, 0).contiguous();
  } else {
    // The mean of the members' softmax, summed in member order (the same bits every run).
    for (size_t i = 0; i < members.size(); ++i) {
      const Tensor p = ops::softmax(logits_on_input_grid(j, a, members[i], vol, image, where,
                                                         j.name + " [" + std::to_string(i + 1) + "/" +
                                                             std::to_string(members.size()) + "]"),
                                    0);
      probabilities = i == 0 ? p.contiguous() : ops::add(probabilities, p);
    }
    probabilities = ops::affine(probabilities, 1.0 / static_cast<double>(members.size()), 0.0).contiguous();
    labels = ops::argmax(probabilities, 0);
  }
  io::Volume ref;
  if (!j.labels.empty()) {  // read and checked before anything is written
    ref = io::read_label_nifti(j.labels, K);
    io::check_same_geometry(vol, j.input, ref, j.labels, "halfgrad-unet3d predict: --labels");
  }
  io::write_label_nifti(j.output, labels, vol);
  std::ostringstream line;
  line << j.name << ": " << shape_str(s);
  const Extent grid = member_grid(j, members[0], vol);
  if (grid != Extent{s[0], s[1], s[2]})
    line << " (segmented at " << spacing_str(*tm.spacing_mm) << ": " << grid[0] << "x" << grid[1] << "x" << grid[2] << ")";
  line << ", " << tiles << " tile(s)"
       << (members.size() > 1 ? " over " + std::to_string(members.size()) + " models" : std::string()) << ", "
       << fixed(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2) << " s -> "
       << j.output;
  if (!j.probabilities.empty()) {
    io::write_probabilities_nifti(j.probabilities, probabilities, vol);
    line << ", " << j.probabilities;
  }
  if (!j.labels.empty()) {
    const std::vector<double> d = dice_per_class(labels, ref.data, K);
    line << "; Dice";
    for (size_t c = 0; c < d.size(); ++c) {
      line << " " << (c + 1 < tm.class_names.size() ? tm.class_names[c + 1] : "class " + std::to_string(c + 1)) << " "
           << fixed(d[c], 4);
    }
    dice = d;
  }
  if (!j.overlay.empty()) {
    write_png(j.overlay, compose_overlay(vol.data, ref.data, labels));
    line << ", " << j.overlay;
  }
  std::cout << line.str() << std::endl;
  return dice;
}

// The models of --checkpoint, each with its window, checked to agree with the first on what goes in
// (channels) and comes out (classes, and their names where both files have them).
static std::vector<Member> load_members(const PredictArgs& a, const Placement& where) {
  std::vector<Member> members;
  for (const std::string& ck : a.checkpoints) {
    Member m{ck, load_trained_model(ck, where, "predict"), {}};
    if (!m.tm.inferred.empty()) std::cerr << "predict: " << ck << ": " << m.tm.inferred << std::endl;
    if (!m.tm.unverified.empty()) std::cerr << "predict: note: " << m.tm.unverified << std::endl;
    const nn::UNet3dOptions& mo = m.tm.recipe.model;
    m.sw.window = m.tm.recipe.volume_shape;
    m.sw.overlap = a.overlap;
    if (a.tta) m.sw.mirror_axes = m.tm.recipe.flip_axes;  // the axes the model was trained with flips along
    m.sw.divisor = int64_t{1} << mo.channels().size();
    if (!members.empty()) {
      const Member& first = members[0];
      const nn::UNet3dOptions& fo = first.tm.recipe.model;
      HG_CHECK(mo.in_channels() == fo.in_channels() && mo.num_classes() == fo.num_classes(),
               "halfgrad-unet3d predict: " << ck << " takes " << mo.in_channels() << " channel(s) and gives "
                                           << mo.num_classes() << " classes, " << first.checkpoint << " "
                                           << fo.in_channels() << " and " << fo.num_classes()
                                           << "; expected models of one task to ensemble");
      HG_CHECK(m.tm.class_names.empty() || first.tm.class_names.empty() || m.tm.class_names == first.tm.class_names,
               "halfgrad-unet3d predict: " << ck << " names its classes otherwise than " << first.checkpoint
                                           << "; expected models of one task to ensemble");
    }
    members.push_back(std::move(m));
  }
  return members;
}

int run_predict(const PredictArgs& a) {
  HG_CHECK(a.overlap >= 0 && a.overlap <= kMaxOverlap,  // the command line checks it too (exit status 2)
           "halfgrad-unet3d predict: --overlap " << a.overlap << "; expected a fraction in [0, " << kMaxOverlap << "]");
  HG_CHECK(!a.checkpoints.empty(), "halfgrad-unet3d predict: --checkpoint is required");
  const std::vector<Job> jobs = plan_jobs(a);
  const Placement where = make_placement(a.device, "ndhwc", "predict");
  const std::vector<Member> members = load_members(a, where);
  for (const Member& m : members) {
    const nn::UNet3dOptions& mo = m.tm.recipe.model;
    if (a.memory_check)  // the largest tile's forward on the device
      check_memory(estimate_eval_memory(mo, m.tm.model->num_parameters(), m.sw.window, m.tm.plan.level),
                   available_memory(a.device), "predict", a.device, "the window is the recipe's volume_shape");
    std::cout << "predict: " << jobs.size() << " volume(s) with " << m.checkpoint << " (UNet3d " << mo.describe() << ", "
              << amp::opt_level_name(m.tm.plan.level) << ") on " << a.device << "; window " << m.sw.window[0] << "x"
              << m.sw.window[1] << "x" << m.sw.window[2] << ", overlap " << a.overlap
              << (a.tta ? ", mirroring TTA (" + std::to_string(mirror_passes(m.sw)) + " passes: the recipe's flip axes)" : "")
              << std::endl;
  }
  if (members.size() > 1)
    std::cout << "predict: an ensemble of " << members.size()
              << " models: the label map is the argmax of their mean softmax" << std::endl;

  const int64_t K = members[0].tm.recipe.model.num_classes();
  std::vector<std::string> failures;
  std::vector<double> dice_sum(static_cast<size_t>(std::max<int64_t>(K - 1, 0)), 0.0);
  int64_t scored = 0;
  for (const Job& j : jobs) {
    try {
      const std::vector<double> d = predict_volume(j, a, members, where);
      for (size_t c = 0; c < d.size(); ++c) dice_sum[c] += d[c];
      if (!d.empty()) ++scored;
    } catch (const std::exception& e) {
      std::cerr << "error: " << j.name << ": " << e.what() << std::endl;
      failures.push_back(j.input);
    }
  }
  if (!a.labels.empty() && scored > 0) {
    std::vector<double> mean_per_class;
    double mean = 0;
    for (double d : dice_sum) {
      mean_per_class.push_back(d / static_cast<double>(scored));
      mean += mean_per_class.back();
    }
    mean /= std::max<size_t>(mean_per_class.size(), 1);
    std::cout << nlohmann::json{{"volumes", scored}, {"dice", mean_per_class}, {"mean_dice", mean}}.dump() << std::endl;
  }
  if (failures.empty()) return 0;
  std::cerr << "predict: " << failures.size() << " of " << jobs.size() << " volume(s) failed:";
  for (const std::string& f : failures) std::cerr << " " << f;
  std::cerr << std::endl;
  return 1;
}

}  // namespace unet3d_app
