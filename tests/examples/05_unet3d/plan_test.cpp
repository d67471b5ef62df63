// halfgrad-unet3d plan (issue 34 item 4, plan.h): the planner as a pure function of a synthetic
// fingerprint (shapes, spacings, budget -> patch, levels, widths, batch, with the arithmetic in the
// comments), the plan file's round trip and its refusals, train --plan auto / FILE on the toy dataset
// (plan.json written and used, --resume bit-identical, overrides recorded), and the hippocampus plan
// against nnU-Net v2's when the data is present.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "examples/05_unet3d/memory_estimate.h"
#include "examples/05_unet3d/plan.h"
#include "nn/unet3d.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/toy_msd.h"
#include "tests/temp_dir.h"
#include "unet3d/run_checkpoint.h"

using namespace halfgrad;
using namespace unet3d_app;
using halfgrad::testing::check_error;
using halfgrad::testing::TempDir;
namespace toy = halfgrad::testing::toy_msd;

namespace {

PlanFingerprint synthetic(int cases, const Extent& shape, const Spacing& spacing = {1, 1, 1}) {
  PlanFingerprint fp;
  fp.name = "Synthetic";
  fp.dir = "/synthetic";
  fp.num_classes = 3;
  fp.channel_names = {"MRI"};
  for (int i = 0; i < cases; ++i) {
    fp.spacings.push_back(spacing);
    fp.shapes.push_back(shape);
  }
  fp.intensity.push_back({"MRI", 10, 1, 0.5, 1, 0, 2, 0.01, 1.99});
  return fp;
}

PlanTarget target(const std::string& device, const std::string& config, uint64_t bytes) {
  PlanTarget t;
  t.device = device;
  t.config = config;
  t.memory_bytes = bytes;
  t.memory_source = "the test";
  return t;
}

// estimate_train_memory(...).total() of a U-Net with these widths, as the planner computes it.
uint64_t estimate(const std::vector<int64_t>& channels, int64_t bottleneck, const Extent& patch, int64_t batch,
                  const Extent& forward) {
  const nn::UNet3dOptions o = nn::UNet3dOptions().channels(channels).bottleneck(bottleneck).num_classes(3);
  Generator gen(0);
  const int64_t params = nn::UNet3d(o, gen).num_parameters();
  return estimate_train_memory(o, params, patch, batch, forward, amp::OptLevel::O0, false).total();
}

struct CapturedStdout {
  std::ostringstream buf;
  std::streambuf* saved = std::cout.rdbuf(buf.rdbuf());
  ~CapturedStdout() { std::cout.rdbuf(saved); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

int run_cli(const std::vector<std::string>& args) {
  CommandLine cli;
  cli.parse(args);
  if (*cli.plan) return run_plan(cli.plan_args);
  return run_train(cli.train_args, RankContext{});
}

}  // namespace

TEST_CASE("unet3d plan: hippocampus-like fingerprint (200 cases of 36x50x35 at 1 mm) on a GPU of 80 GiB") {
  const TrainingPlan p = make_plan(synthetic(200, {36, 50, 35}), target("cuda", "reference", uint64_t{80} << 30));
  // Initial patch: 256^3 at 1 mm, clipped to the median 36x50x35. Smallest side 35: 35 -> 18 -> 9 -> 5,
  // three halvings while >= 8, so 3 levels (bottleneck side 5 >= 4); sides rounded up to multiples of 8.
  CHECK(p.spacing.value == Spacing{1, 1, 1});
  CHECK(p.median_shape.value == std::array<double, 3>{36, 50, 35});
  CHECK(p.levels.value == 3);
  CHECK(p.patch.value == Extent{40, 56, 40});  // nnU-Net v2's 3d_fullres patch for Task04 too
  CHECK(p.channels.value == std::vector<int64_t>{16, 32, 64});  // reference's 16, doubling
  CHECK(p.bottleneck.value == 128);
  // 80 GiB holds the cap of 32; 5% of 200 x 36*50*35 = 12,600,000 voxels / 89,600 = 7.03 -> 7.
  CHECK(p.batch.value == 7);
  CHECK(p.samples_per_epoch.value == 250 * 7);  // nnU-Net's 250 iterations an epoch
  CHECK(p.foreground_prob.value == doctest::Approx(0.33));
  CHECK(p.normalization.value == "zscore_per_volume");
  CHECK(p.optimizer.value == "sgd");  // nnU-Net's SGD and poly schedule on a GPU
  CHECK(p.budget_bytes == uint64_t{80} << 30);
  CHECK(p.estimate_bytes == estimate({16, 32, 64}, 128, {40, 56, 40}, 7, {48, 64, 48}));

  // A budget of exactly batch 5 at that patch: the patch stays, the batch is 5 (memory binds before 5%).
  const uint64_t five = estimate({16, 32, 64}, 128, {40, 56, 40}, 5, {48, 64, 48});
  const TrainingPlan q = make_plan(synthetic(200, {36, 50, 35}), target("cuda", "reference", five));
  CHECK(q.patch.value == Extent{40, 56, 40});
  CHECK(q.batch.value == 5);
  // 10 cases: 5% is 0.35 patches, rounded 0; the batch is the minimum, 2.
  CHECK(make_plan(synthetic(10, {36, 50, 35}), target("cuda", "reference", uint64_t{80} << 30)).batch.value == 2);
}

TEST_CASE("unet3d plan: a tight budget shrinks the patch, the side largest relative to the median first") {
  // 100 cases of 64^3: start 64^3 with 4 levels (64 -> 32 -> 16 -> 8 -> 4). The budget is batch 2 at
  // 48^3 with 3 levels. nnU-Net's two-step reduction: x loses 16 in tmp (48, whose depth is 3: 48 -> 24
  // -> 12 -> 6), so x loses 8 = 2^3: 64x64x56 at 3 levels; then the largest ratio (ties: the last axis)
  // each time: 64x56x56, 56x56x56, 56x56x48, 56x48x48, 48x48x48, where batch 2 fits exactly.
  const Extent forward{64, 64, 64};  // the largest volume (64^3) and the recipe's 48x64x48, padded to 8
  const uint64_t budget = estimate({16, 32, 64}, 128, {48, 48, 48}, 2, forward);
  const TrainingPlan p = make_plan(synthetic(100, {64, 64, 64}), target("cuda", "reference", budget));
  CHECK(p.levels.value == 3);
  CHECK(p.patch.value == Extent{48, 48, 48});
  CHECK(p.channels.value == std::vector<int64_t>{16, 32, 64});
  CHECK(p.batch.value == 2);
  CHECK(p.estimate_bytes == budget);
  CHECK(p.patch.why.find("6 side(s) reduced") != std::string::npos);
  // One byte less, and 48^3 no longer fits: the next side goes (48x48x40).
  const TrainingPlan q = make_plan(synthetic(100, {64, 64, 64}), target("cuda", "reference", budget - 1));
  CHECK(q.patch.value == Extent{48, 48, 40});
  // Far too little memory: refused, naming the budget.
  check_error([] { make_plan(synthetic(100, {64, 64, 64}), target("cuda", "reference", 1000)); },
              {"halfgrad-unet3d plan: even batch 2 at the smallest patch", "exceeds the budget"});
}

TEST_CASE("unet3d plan: depth between 1 and 6 levels, widths doubling to nnU-Net's cap of 320") {
  // 6^3: 6 < 8, no halving; nn::UNet3d needs one level, so 1, and the patch rounds to 2: 6x6x6.
  const TrainingPlan small = make_plan(synthetic(20, {6, 6, 6}), target("cuda", "reference", uint64_t{80} << 30));
  CHECK(small.levels.value == 1);
  CHECK(small.levels.why.find("the smallest side of the patch, 6, is < 8: 1, the fewest") != std::string::npos);
  CHECK(small.patch.value == Extent{6, 6, 6});
  CHECK(small.channels.value == std::vector<int64_t>{16});
  CHECK(small.bottleneck.value == 32);
  // 512^3 at 1 mm: the initial patch is 256^3 (nnU-Net's), 256 -> ... -> 4 is 6 halvings; widths
  // 16 .. 512 capped at 320. An unbounded budget keeps the patch.
  const TrainingPlan big = make_plan(synthetic(5, {512, 512, 512}), target("cuda", "reference", uint64_t{1} << 50));
  CHECK(big.levels.value == 6);
  CHECK(big.patch.value == Extent{256, 256, 256});
  CHECK(big.channels.value == std::vector<int64_t>{16, 32, 64, 128, 256, 320});
  CHECK(big.bottleneck.value == 320);
  // Anisotropic (3 mm x 0.5 mm): the initial patch is in proportion to 1/spacing (1/3 : 2 : 2) with
  // 256^3 voxels, round(232.56 x (1/3, 2, 2)) = (78, 465, 465), clipped to the median 40x300x300.
  const TrainingPlan aniso = make_plan(synthetic(5, {40, 300, 300}, {3, 0.5, 0.5}),
                                       target("cuda", "reference", uint64_t{1} << 50));
  CHECK(aniso.patch.why.find("from 40x300x300") != std::string::npos);
  CHECK(aniso.levels.value == 3);  // 40 -> 20 -> 10 -> 5: the thin axis limits every axis
  CHECK(aniso.patch.value == Extent{40, 304, 304});
}

TEST_CASE("unet3d plan: on the CPU the budget is the base recipe's own estimate; CT is refused") {
  const TrainingPlan p = make_plan(synthetic(200, {36, 50, 35}), target("cpu", "cpu", uint64_t{64} << 30));
  // The cpu recipe: 12-24-48-96, bottleneck 192, batch 4 at 32x48x32; validation 48x64x48 (4 levels: 16 | 48, 64).
  CHECK(p.budget_bytes == estimate({12, 24, 48, 96}, 192, {32, 48, 32}, 4, {48, 64, 48}));
  CHECK(p.budget_source.find("the 'cpu' recipe's own estimate") != std::string::npos);
  CHECK(p.patch.value == Extent{40, 56, 40});
  CHECK(p.channels.value == std::vector<int64_t>{12, 24, 48});
  CHECK(p.bottleneck.value == 96);
  // 2 x 89,600 voxels fit in 4 x 49,152's estimate; 3 x 89,600 do not.
  CHECK(p.batch.value == 2);
  CHECK(p.samples_per_epoch.value == 40 * 2);  // the cpu recipe's 160 / 4 = 40 steps an epoch
  CHECK(p.optimizer.value == "adamw");         // the cpu recipe's
  PlanFingerprint ct = synthetic(10, {36, 50, 35});
  ct.channel_names = {"CT"};
  check_error([&] { make_plan(ct, target("cpu", "cpu", uint64_t{64} << 30)); },
              {"names channel 0 'CT'", "which halfgrad-unet3d's loader does not do", "refusing a plan"});
}

TEST_CASE("unet3d plan file: the JSON round trip, and every bad field named with the file") {
  const TrainingPlan p = make_plan(synthetic(200, {36, 50, 35}), target("cuda", "reference", uint64_t{80} << 30));
  const nlohmann::json j = p.to_json();
  const TrainingPlan back = TrainingPlan::from_json(j, "plan.json");
  CHECK(back.to_json() == j);
  CHECK(nlohmann::json::parse(plan_text(p)) == j);
  auto bad = [&](const std::function<void(nlohmann::json&)>& edit, const std::vector<std::string>& parts) {
    nlohmann::json e = j;
    edit(e);
    check_error([&] { TrainingPlan::from_json(e, "x/plan.json"); }, parts);
  };
  bad([](nlohmann::json& e) { e["patch"]["value"][1] = 41; },
      {"x/plan.json: field 'patch.value[1]' is 41; expected a multiple of 2^levels = 8"});
  bad([](nlohmann::json& e) { e["batch"]["value"] = 0; }, {"x/plan.json: field 'batch.value'"});
  bad([](nlohmann::json& e) { e["batch"]["value"] = "7"; }, {"field 'batch.value' must be an integer"});
  bad([](nlohmann::json& e) { e["channels"]["value"] = {16, 32}; }, {"field 'channels.value' lists 2 widths"});
  bad([](nlohmann::json& e) { e["spacing"]["value"] = {1, 1, -1}; }, {"x/plan.json: field 'spacing.value'"});
  bad([](nlohmann::json& e) { e["normalization"]["value"] = "ct_clip"; }, {"expected \"zscore_per_volume\""});
  bad([](nlohmann::json& e) { e["bacth"] = 7; }, {"has the unknown key \"bacth\""});
  bad([](nlohmann::json& e) { e.erase("samples_per_epoch"); }, {"field 'samples_per_epoch' is missing"});
  bad([](nlohmann::json& e) { e["made_for"]["device"] = "tpu"; }, {"field 'made_for.device' is \"tpu\""});
  bad([](nlohmann::json& e) { e["made_for"]["config"] = "huge"; }, {"unknown recipe 'huge'"});
  bad([](nlohmann::json& e) { e["foreground_prob"]["value"] = 1.5; }, {"field 'foreground_prob.value' is out of range"});
  bad([](nlohmann::json& e) { e["patch"]["why"] = "a\x1b[2Jb"; }, {"field 'patch.why' is not a plain line of text"});
  bad([](nlohmann::json& e) { e["format"] = "nnU-Net plans"; }, {"not a plan file"});
  bad([](nlohmann::json& e) { e["optimizer"]["value"] = "adam"; }, {"field 'optimizer.value'", "unknown optimizer 'adam'"});
  bad([](nlohmann::json& e) { e["intensity"][0]["min"] = 1e9; }, {"field 'intensity[0]' does not hold min <="});
  TempDir tmp_dir("plan_test");
  const std::string tmp_root = tmp_dir.path.string();
  const std::string path = tmp_root + "/broken.json";
  std::ofstream(path) << "{\"format\": ";
  check_error([&] { read_plan(path); }, {"halfgrad-unet3d: plan " + path, "not valid JSON"});
  check_error([&] { read_plan(tmp_root + "/none.json"); }, {"halfgrad-unet3d: plan " + tmp_root + "/none.json"});
}

TEST_CASE("unet3d train --plan auto on the toy data: plan.json written and used, --resume bit-identical") {
  TempDir tmp_dir("plan_test");
  const std::string tmp_root = tmp_dir.path.string();
  const std::string data = tmp_root + "/toy";
  toy::make_dataset(data, 5);
  const std::string file = tmp_root + "/plan.json";
  {
    CapturedStdout quiet;
    CHECK(run_cli({"plan", "--data", data, "--config", "tiny", "--output", file}) == 0);
    check_error([&] { run_cli({"plan", "--data", data, "--config", "tiny", "--output", file}); },
                {"--output " + file + " exists already; pass --overwrite"});
  }
  const TrainingPlan p = read_plan(file);
  // 16^3 at 1 mm: 16 -> 8 -> 4, 2 levels; the tiny recipe's 4-8, bottleneck 16; its batch 2 at 16^3 is
  // the CPU budget, so 2; 5% of 5 x 4096 voxels is 0.25 patches; its 4 steps an epoch.
  CHECK(p.patch.value == Extent{16, 16, 16});
  CHECK(p.channels.value == std::vector<int64_t>{4, 8});
  CHECK(p.batch.value == 2);
  CHECK(p.samples_per_epoch.value == 8);
  const std::vector<std::string> base = {"train", "--data", data, "--plan", "auto", "--config", "tiny", "--epochs", "2",
                                         "--seed", "5", "--no-progress"};
  auto with = [&](std::vector<std::string> v, const std::vector<std::string>& more) {
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  {
    CapturedStdout quiet;
    CHECK(run_cli(with(base, {"--out", tmp_root + "/straight"})) == 0);
    CHECK(run_cli(with(base, {"--out", tmp_root + "/split", "--stop-after-epoch", "1"})) == 0);
    CHECK(run_cli({"train", "--resume", tmp_root + "/split", "--no-progress"}) == 0);
  }
  CHECK(slurp(tmp_root + "/straight/plan.json") == slurp(file));  // auto plans what `plan` wrote
  CHECK(slurp(tmp_root + "/straight/model.safetensors") == slurp(tmp_root + "/split/model.safetensors"));
  CHECK(slurp(tmp_root + "/straight/training_state.safetensors") ==
        slurp(tmp_root + "/split/training_state.safetensors"));
  const nlohmann::json meta = read_run_training_meta(tmp_root + "/straight");
  CHECK(meta["args"]["plan"] == "auto");
  CHECK(meta["args"]["batch"] == 2);
  CHECK(meta["args"]["spacing"] == "1,1,1");
  CHECK(meta["args"]["optimizer"] == "adamw");
  CapturedStdout quiet;
  // The run folder's rules: plan.json is a run file (a second run into the folder is refused).
  check_error([&] { run_cli(with(base, {"--out", tmp_root + "/straight"})); }, {"plan.json"});
  // --resume refuses a plan.json whose values changed since the run started (its checksum is saved).
  nlohmann::json edited = nlohmann::json::parse(slurp(tmp_root + "/split/plan.json"));
  edited["foreground_prob"]["value"] = 0.9;
  std::ofstream(tmp_root + "/split/plan.json") << edited.dump(1);
  check_error([&] { run_cli({"train", "--resume", tmp_root + "/split", "--epochs", "3", "--no-progress"}); },
              {tmp_root + "/split/plan.json is not the plan the run started with", "restore the run's plan.json"});
  // --resume needs the run's plan.json.
  std::filesystem::remove(tmp_root + "/split/plan.json");
  check_error([&] { run_cli({"train", "--resume", tmp_root + "/split", "--epochs", "3", "--no-progress"}); },
              {"was started with --plan auto, but " + tmp_root + "/split/plan.json is missing"});
}

TEST_CASE("unet3d train --plan FILE: the command line's --batch overrides the plan's; another dataset is refused") {
  TempDir tmp_dir("plan_test");
  const std::string tmp_root = tmp_dir.path.string();
  const std::string data = tmp_root + "/toy", other = tmp_root + "/toy6";
  toy::make_dataset(data, 5);
  toy::make_dataset(other, 6);
  const std::string file = tmp_root + "/plan.json";
  {
    CapturedStdout quiet;
    CHECK(run_cli({"plan", "--data", data, "--config", "tiny", "--output", file}) == 0);
    CHECK(run_cli({"train", "--data", data, "--plan", file, "--batch", "3", "--optimizer", "sgd", "--epochs", "1",
                   "--no-progress", "--out", tmp_root + "/run"}) == 0);
  }
  const nlohmann::json meta = read_run_training_meta(tmp_root + "/run");
  CHECK(meta["args"]["batch"] == 3);
  CHECK(meta["args"]["optimizer"] == "sgd");  // --optimizer over the plan's adamw
  CHECK(meta["args"]["config"] == "tiny");  // the plan's base recipe
  CHECK(meta["args"]["plan"] == file);
  CHECK(TrainingPlan::from_json(nlohmann::json::parse(slurp(tmp_root + "/run/plan.json")), "run").to_json() ==
        read_plan(file).to_json());
  CapturedStdout quiet;  // the refused runs print the plan first
  check_error([&] { run_cli({"train", "--data", other, "--plan", file, "--out", tmp_root + "/r2", "--no-progress"}); },
              {"was made for 'Toy' (5 cases, 3 classes), but --data " + other, "(6 cases, 3 classes)"});
  check_error([&] { run_cli({"train", "--data", data, "--plan", file, "--config", "cpu", "--out", tmp_root + "/r3"}); },
              {"--config cpu names another base recipe than the plan's 'tiny'"});
  check_error([&] { run_cli({"train", "--plan", "auto", "--out", tmp_root + "/r4"}); }, {"--plan needs --data"});
  // A plan of another channel (its normalisation is the channel's) is refused too.
  nlohmann::json ct = nlohmann::json::parse(slurp(file));
  ct["dataset"]["channels"] = {"CT"};
  std::ofstream(tmp_root + "/ct.json") << ct.dump(1);
  check_error([&] { run_cli({"train", "--data", data, "--plan", tmp_root + "/ct.json", "--out", tmp_root + "/r5"}); },
              {"was made for the channel 'CT', but --data " + data + "'s dataset.json names 'none'"});
  CHECK(!std::filesystem::exists(tmp_root + "/r5"));
  // A run that fails before its first checkpoint leaves no plan.json (a run file: it would block a retry).
  check_error([&] { run_cli({"train", "--data", data, "--plan", file, "--out", tmp_root + "/r6", "--lr", "1e30",
                             "--no-progress"}); },
              {"lower --lr"});
  CHECK(!std::filesystem::exists(tmp_root + "/r6/plan.json"));
  // plan --output in a folder that does not exist: refused before the dataset is read.
  check_error([&] { run_cli({"plan", "--data", data, "--output", tmp_root + "/no/plan.json"}); },
              {"--output " + tmp_root + "/no/plan.json: its folder " + tmp_root + "/no does not exist"});
}

const char* const kHippocampusPlan = "unet3d plan: the hippocampus (200 cases) against nnU-Net v2's Task04 plan";

static bool hippocampus_present() {
  const bool ok = std::filesystem::is_regular_file(std::string(HALFGRAD_SHARED_DIR) + "/data/hippocampus/dataset.json");
  if (!ok) std::cout << "skipped: " << kHippocampusPlan << ": ../shared/data/hippocampus not found\n";
  return ok;
}

TEST_CASE(kHippocampusPlan * doctest::skip(!hippocampus_present())) {
  const PlanFingerprint fp = fingerprint_dataset(std::string(HALFGRAD_SHARED_DIR) + "/data/hippocampus");
  const TrainingPlan p = make_plan(fp, target("cuda", "reference", uint64_t{80} << 30));
  MESSAGE("halfgrad (reference widths, 80 GiB, 200 cases): spacing " << spacing_str(p.spacing.value) << ", median "
          << p.median_shape.value[0] << "x" << p.median_shape.value[1] << "x" << p.median_shape.value[2] << ", patch "
          << p.patch.value[0] << "x" << p.patch.value[1] << "x" << p.patch.value[2] << ", " << p.levels.value
          << " levels, batch " << p.batch.value
          << "; nnU-Net v2 3d_fullres (260 cases): 1 mm, median 36x50x35, patch 40x56x40, 3 poolings per axis, batch "
             "9. The patch and depth agree (the smallest side, 35, limits every axis to 3 poolings either way); the "
             "batch is 5% of the dataset: 7.03 patches of 200 cases here, 9.1 of nnU-Net's 260");
  CHECK(p.spacing.value == Spacing{1, 1, 1});
  CHECK(p.patch.value == Extent{40, 56, 40});
  CHECK(p.levels.value == 3);
  CHECK(p.batch.value == 7);
  REQUIRE(p.intensity.size() == 1);
  CHECK(p.intensity[0].channel == "MRI");
  CHECK(p.intensity[0].p00_5 <= p.intensity[0].p99_5);
}
