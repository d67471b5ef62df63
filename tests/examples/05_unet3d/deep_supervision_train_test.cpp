// halfgrad-unet3d train --deep-supervision: parsed, saved with the run's options and restored (old
// runs read false); a tiny run with it saves ds_heads and the option in the checkpoint, resumes
// with them, and predict (forward(), the full-resolution output) reads the checkpoint.
#include <doctest/doctest.h>

#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/resume.h"
#include "nn/checkpoint.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/toy_msd.h"
#include "tests/temp_dir.h"

using namespace halfgrad;
using namespace unet3d_app;
using halfgrad::testing::check_error;
using halfgrad::testing::TempDir;

TEST_CASE("unet3d --deep-supervision: parsed (off by default), saved with the run's options and restored; old runs read false") {
  CommandLine cli;
  cli.parse({"train", "--out", "runs/x", "--deep-supervision"});
  CHECK(cli.train_args.deep_supervision);
  CommandLine plain;
  plain.parse({"train", "--out", "runs/x"});
  CHECK_FALSE(plain.train_args.deep_supervision);
  const nlohmann::json saved = train_args_to_json(cli.train_args);
  CHECK(saved.at("deep_supervision") == true);
  CHECK(train_args_from_json(json_checked::Field(saved, "state")).deep_supervision);
  nlohmann::json old = saved;
  old.erase("deep_supervision");
  CHECK_FALSE(train_args_from_json(json_checked::Field(old, "state")).deep_supervision);
  TrainArgs resume = plain.train_args;
  resume.resume = "runs/x";
  resume.given = {"--resume", "--deep-supervision"};
  check_error([&] { check_resume_args(resume); }, {"--deep-supervision cannot be given with --resume"});
}

TEST_CASE("unet3d --deep-supervision: a tiny run saves ds_heads, resumes with them, and predict reads it") {
  TempDir dir("deep_supervision");
  const std::string data = dir.file("msd");
  halfgrad::testing::toy_msd::make_dataset(data, 5);
  const std::string run = dir.file("run");
  std::vector<std::string> args = halfgrad::testing::toy_msd::tiny_train(data, run);
  args.insert(args.end(), {"--deep-supervision", "--stop-after-epoch", "1"});
  REQUIRE(halfgrad::testing::toy_msd::run(args) == 0);
  const nlohmann::json meta = nn::read_checkpoint_metadata(run + "/model.safetensors");
  CHECK(meta["model"]["deep_supervision"] == true);
  const nn::CheckpointState st = nn::read_checkpoint(run + "/model.safetensors");
  bool found = false;
  for (const auto& [name, t] : st.parameters)
    if (name == "ds_heads.0.weight") {
      found = true;
      CHECK(t.shape() == Shape{3, 8, 1, 1, 1});  // tiny: channels {4, 8}, one head on dec.0 (width 8)
    }
  CHECK(found);
  REQUIRE(halfgrad::testing::toy_msd::run({"train", "--resume", run, "--no-progress"}) == 0);
  REQUIRE(halfgrad::testing::toy_msd::run({"predict", "--checkpoint", run, "--input", data + "/imagesTr/case_0.nii.gz",
                                           "--output", dir.file("pred.nii.gz"), "--no-progress"}) == 0);
}
