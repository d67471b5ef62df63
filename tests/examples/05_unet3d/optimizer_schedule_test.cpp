// halfgrad-unet3d train --optimizer adamw|sgd and --lr-schedule constant|cosine|poly: the schedule's
// values by hand, nnU-Net's SGD recipe, the words' errors, the options saved with the run, and a tiny
// SGD run whose stop-and-resume gives the same checkpoint bytes as the run that never stopped.
#include <cmath>
#include <cstring>
#include <filesystem>

#include <doctest/doctest.h>

#include "core/file_io.h"
#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/resume.h"
#include "nn/checkpoint.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/toy_msd.h"
#include "tests/temp_dir.h"
#include "unet3d/recipe.h"
#include "unet3d/run_folder.h"

using namespace halfgrad;
using namespace unet3d_app;
using halfgrad::testing::check_error;
using halfgrad::testing::TempDir;

TEST_CASE("unet3d lr_at: constant, cosine to lr/20 and nnU-Net's poly (1 - t)^0.9 to 0, after a linear warm-up") {
  Recipe r = recipe_by_name("reference");
  r.lr = 0.01;
  r.epochs = 10;
  CHECK(r.schedule == LrSchedule::Constant);  // the reference recipe: torch_hippo_train.py's constant lr
  CHECK(lr_at(r, 0.0) == 0.01);
  CHECK(lr_at(r, 9.5) == 0.01);
  r.schedule = LrSchedule::Poly;
  CHECK(lr_at(r, 0.0) == 0.01);
  CHECK(lr_at(r, 5.0) == doctest::Approx(0.01 * 0.535886731268146).epsilon(1e-12));  // 0.5^0.9
  CHECK(lr_at(r, 9.0) == doctest::Approx(0.01 * 0.125892541179417).epsilon(1e-12));  // 0.1^0.9
  CHECK(lr_at(r, 10.0) == 0.0);
  CHECK(lr_at(r, 12.0) == 0.0);  // past the end: the schedule's end value
  r.schedule = LrSchedule::Cosine;
  CHECK(lr_at(r, 0.0) == doctest::Approx(0.01));
  CHECK(lr_at(r, 5.0) == doctest::Approx(0.0005 + 0.5 * 0.0095));  // half way: the mean of lr and lr/20
  CHECK(lr_at(r, 10.0) == doctest::Approx(0.0005));
  r.warmup_epochs = 2;  // warm-up from lr/10, then the schedule over the remaining 8 epochs
  r.schedule = LrSchedule::Poly;
  CHECK(lr_at(r, 0.0) == doctest::Approx(0.001));
  CHECK(lr_at(r, 1.0) == doctest::Approx(0.0055));
  CHECK(lr_at(r, 2.0) == 0.01);
  CHECK(lr_at(r, 6.0) == doctest::Approx(0.01 * 0.535886731268146).epsilon(1e-12));
}

TEST_CASE("unet3d with_nnunet_sgd: nnU-Net v2's SGD (Nesterov 0.99, lr 1e-2, weight decay 3e-5, poly, no warm-up)") {
  const Recipe r = with_nnunet_sgd(recipe_by_name("cpu"));
  CHECK(r.optimizer == OptimizerKind::Sgd);
  CHECK(r.lr == 1e-2);
  CHECK(r.momentum == 0.99);
  CHECK(r.weight_decay == 3e-5);
  CHECK(r.schedule == LrSchedule::Poly);
  CHECK(r.warmup_epochs == 0);
  CHECK(r.patch == recipe_by_name("cpu").patch);  // the rest is the recipe's
  CHECK(optimizer_by_name("sgd", "w") == OptimizerKind::Sgd);
  CHECK(std::string(optimizer_name(OptimizerKind::AdamW)) == "adamw");
  CHECK(schedule_by_name("poly", "w") == LrSchedule::Poly);
  CHECK(std::string(schedule_name(LrSchedule::Cosine)) == "cosine");
  check_error([] { optimizer_by_name("adam", "halfgrad-unet3d train: --optimizer"); },
              {"halfgrad-unet3d train: --optimizer", "unknown optimizer 'adam'", "expected adamw or sgd"});
  check_error([] { schedule_by_name("step", "f: field 'lr_schedule'"); },
              {"f: field 'lr_schedule'", "unknown schedule 'step'", "expected constant, cosine or poly"});
}

TEST_CASE("unet3d --optimizer / --lr-schedule: parsed, saved with the run's options and restored; old runs read the recipe's") {
  CommandLine cli;
  cli.parse({"train", "--out", "runs/x", "--optimizer", "sgd", "--lr-schedule", "cosine"});
  CHECK(cli.train_args.optimizer == "sgd");
  CHECK(cli.train_args.lr_schedule == "cosine");
  const nlohmann::json saved = train_args_to_json(cli.train_args);
  const TrainArgs back = train_args_from_json(json_checked::Field(saved, "state"));
  CHECK(back.optimizer == "sgd");
  CHECK(back.lr_schedule == "cosine");
  nlohmann::json old = saved;
  old.erase("optimizer");
  old.erase("lr_schedule");
  const TrainArgs old_args = train_args_from_json(json_checked::Field(old, "state"));
  CHECK(old_args.optimizer.empty());
  CHECK(old_args.lr_schedule.empty());
  nlohmann::json bad = saved;
  bad["optimizer"] = "lamb";
  check_error([&] { train_args_from_json(json_checked::Field(bad, "training_state.safetensors")); },
              {"training_state.safetensors", "field 'optimizer'", "unknown optimizer 'lamb'"});
  // Saved options the command line refuses are refused when read back too: augment_device cuda on
  // device cpu failed on --resume deep in Tensor::empty ("built without CUDA") on a CPU build.
  nlohmann::json gpu_augment = saved;
  gpu_augment["augment"] = "nnunet";
  gpu_augment["augment_device"] = "cuda";
  check_error([&] { train_args_from_json(json_checked::Field(gpu_augment, "training_state.safetensors")); },
              {"training_state.safetensors", "field 'augment_device' is \"cuda\" but field 'device' is \"cpu\""});
  gpu_augment["device"] = "cuda";
  CHECK(train_args_from_json(json_checked::Field(gpu_augment, "state")).augment_device == "cuda");
  CommandLine wrong;
  CHECK_THROWS(wrong.parse({"train", "--out", "runs/x", "--optimizer", "adam"}));
  TrainArgs resume = cli.train_args;
  resume.resume = "runs/x";
  resume.given = {"--resume", "--optimizer"};
  check_error([&] { check_resume_args(resume); }, {"--optimizer cannot be given with --resume"});
}

TEST_CASE("unet3d --optimizer sgd: a tiny run saves SGD's momentum buffers; stop and --resume give the same bytes") {
  TempDir dir("optimizer_sgd");
  const std::string data = dir.file("msd");
  halfgrad::testing::toy_msd::make_dataset(data, 5);
  const std::string straight = dir.file("straight"), stopped = dir.file("stopped");
  std::vector<std::string> args = halfgrad::testing::toy_msd::tiny_train(data, straight);
  args.insert(args.end(), {"--optimizer", "sgd"});
  REQUIRE(halfgrad::testing::toy_msd::run(args) == 0);
  args = halfgrad::testing::toy_msd::tiny_train(data, stopped);
  args.insert(args.end(), {"--optimizer", "sgd", "--stop-after-epoch", "1"});
  REQUIRE(halfgrad::testing::toy_msd::run(args) == 0);
  REQUIRE(halfgrad::testing::toy_msd::run({"train", "--resume", stopped, "--no-progress"}) == 0);
  for (const char* f : {"/model.safetensors", "/training_state.safetensors"}) {
    const std::string a = read_regular_file(straight + f, size_t{1} << 30, "test", "checkpoint");
    const std::string b = read_regular_file(stopped + f, size_t{1} << 30, "test", "checkpoint");
    CHECK_MESSAGE(a == b, f);
  }
  const nlohmann::json meta = nn::read_checkpoint_metadata(straight + "/training_state.safetensors");
  const std::string dumped = meta.dump();
  CHECK(dumped.find("\"momentum\":0.99") != std::string::npos);  // SGD's options in the optimizer's state
  CHECK(dumped.find("\"nesterov\":true") != std::string::npos);
  // O3 (pure FP16, no master weights) is AdamW's only.
  args = halfgrad::testing::toy_msd::tiny_train(data, dir.file("o3"));
  args.insert(args.end(), {"--optimizer", "sgd", "--opt-level", "O3"});
  check_error([&] { halfgrad::testing::toy_msd::run(args); },
              {"--optimizer sgd", "O3 keeps no FP32 master weights", "expected O0, O1 (--amp) or O2"});
}

namespace {

// Rewrites the run's training_state.safetensors with its options' "optimizer" set to `optimizer` and
// its checksums dropped (as a file saved before 2026-12-04 carries none), so the edit is read, not
// refused as corruption: what a hand-edited or old state file would give --resume.
void set_saved_optimizer(const std::string& run, const std::string& optimizer) {
  const std::string path = run + "/training_state.safetensors";
  const std::string bytes = read_regular_file(path, size_t{1} << 30, "test", "training state");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  nlohmann::json& meta = header["__metadata__"];
  nlohmann::json state = nlohmann::json::parse(meta["halfgrad"].get<std::string>());
  state["train"]["args"]["optimizer"] = optimizer;
  meta["halfgrad"] = state.dump();
  meta.erase("halfgrad_xxh3");
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t m = text.size();
  std::string out(reinterpret_cast<const char*>(&m), 8);
  out += text + bytes.substr(8 + n);
  write_file_atomic(path, out);
}

}  // namespace

TEST_CASE("unet3d --resume: a training state whose optimizer state is AdamW's but whose options say sgd is refused, naming the file") {
  TempDir dir("optimizer_swap");
  const std::string data = dir.file("msd");
  halfgrad::testing::toy_msd::make_dataset(data, 5);
  const std::string adamw = dir.file("adamw"), sgd = dir.file("sgd");
  std::vector<std::string> args = halfgrad::testing::toy_msd::tiny_train(data, adamw);
  args.insert(args.end(), {"--stop-after-epoch", "1"});
  REQUIRE(halfgrad::testing::toy_msd::run(args) == 0);
  args = halfgrad::testing::toy_msd::tiny_train(data, sgd);
  args.insert(args.end(), {"--optimizer", "sgd", "--stop-after-epoch", "1"});
  REQUIRE(halfgrad::testing::toy_msd::run(args) == 0);
  set_saved_optimizer(adamw, "sgd");
  set_saved_optimizer(sgd, "adamw");
  check_error([&] { halfgrad::testing::toy_msd::run({"train", "--resume", adamw, "--no-progress"}); },
              {adamw + "/training_state.safetensors: its optimizer state does not fit this run's optimizer",
               "SGD::load_state_dict", "momentum' is missing"});
  check_error([&] { halfgrad::testing::toy_msd::run({"train", "--resume", sgd, "--no-progress"}); },
              {sgd + "/training_state.safetensors: its optimizer state does not fit", "AdamW::load_state_dict"});
}

TEST_CASE("unet3d train --lr 1e30: stops with a message naming --lr and writes no checkpoint (O0 at the loss, O2 at validation)") {
  TempDir dir("optimizer_huge_lr");
  const std::string data = dir.file("msd");
  halfgrad::testing::toy_msd::make_dataset(data, 5);
  for (const char* level : {"O0", "O2"}) {
    CAPTURE(level);
    const std::string out = dir.file(std::string("run_") + level);
    std::vector<std::string> args = halfgrad::testing::toy_msd::tiny_train(data, out);
    args.insert(args.end(), {"--lr", "1e30", "--optimizer", "sgd", "--opt-level", level});
    check_error([&] { halfgrad::testing::toy_msd::run(args); }, {"lower --lr"});
    CHECK(!std::filesystem::exists(out + "/model.safetensors"));
    CHECK(!std::filesystem::exists(out + "/training_state.safetensors"));
  }
}
