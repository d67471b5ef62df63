// halfgrad-unet3d's training augmentation (train --augment, examples/05_unet3d/data.h): with it a
// batch's slices [0, k) and [k, B) are its rows bit for bit (a rank draws nothing for the others'
// samples), for patches and whole volumes; without it (every recipe's default) the batches are the
// ones built before augmentation existed; and --augment travels with the run's options (resume.h).
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <vector>

#include "core/tensor.h"
#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/resume.h"
#include "io/preprocess.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/synthetic_seg_data.h"
#include "unet3d/recipe.h"

using namespace halfgrad;
using namespace unet3d_app;

namespace {

// Three 12x10x14 volumes with foreground blobs (labels 1 and 2).
SegData synthetic_data() { return halfgrad::testing::synthetic_seg_data(); }

using halfgrad::testing::recipe;
using halfgrad::testing::rows;

// make_training_batch as it was before --augment (data.cpp at 327e773), written out: the bits every
// existing run was trained on.
void batch_before_augment(const SegData& data, const Recipe& r, uint64_t seed, int64_t step, Tensor& x, Tensor& y) {
  Generator gen(batch_seed(seed, step));
  std::vector<io::Sample> samples;
  const io::PatchOptions patch = io::PatchOptions().with_size({r.patch[0], r.patch[1], r.patch[2]}).with_foreground_prob(r.foreground_prob);
  for (int64_t b = 0; b < r.batch; ++b) {
    const SegVolume& v = data.train[gen.randint(static_cast<int64_t>(data.train.size()))];
    io::Sample s{v.image, v.label};
    if (r.patch[0] > 0) s = io::random_patch(s, patch, gen);
    for (int64_t axis : r.flip_axes)
      if (gen.uniform() < 0.5) s = {io::flip(s.image, axis), io::flip(s.label, axis)};
    samples.push_back(s);
  }
  io::Batch batch = io::make_batch(samples);
  x = batch.image;
  y = batch.label;
}

}  // namespace

TEST_CASE("unet3d augment: with --augment nnunet, slices [0, k) and [k, B) are the batch's rows, patches and whole volumes") {
  const SegData data = synthetic_data();
  for (bool patches : {true, false}) {
    const Recipe r = recipe(6, patches, Augmentation::NnUnet);
    for (int64_t step : {0, 3, 17}) {
      CAPTURE(patches);
      CAPTURE(step);
      Tensor x, y;
      make_training_batch(data, r, 42, step, x, y);
      REQUIRE(x.size(0) == 6);
      for (int64_t k : {1, 2, 5}) {
        Tensor x0, y0, x1, y1;
        make_training_batch_slice(data, r, 42, step, 0, k, x0, y0);
        make_training_batch_slice(data, r, 42, step, k, 6, x1, y1);
        CHECK(rows(x0, 0, k) == rows(x, 0, k));
        CHECK(rows(y0, 0, k) == rows(y, 0, k));
        CHECK(rows(x1, 0, 6 - k) == rows(x, k, 6));
        CHECK(rows(y1, 0, 6 - k) == rows(y, k, 6));
      }
      // Built again, the same bits (nothing but the seed decides them).
      Tensor x2, y2;
      make_training_batch(data, r, 42, step, x2, y2);
      CHECK(rows(x2, 0, 6) == rows(x, 0, 6));
    }
  }
}

TEST_CASE("unet3d augment: --augment none (every recipe's default) builds exactly the batches of before; nnunet others") {
  const SegData data = synthetic_data();
  for (const char* name : {"cpu", "reference", "tiny"}) CHECK(recipe_by_name(name).augment == Augmentation::None);
  for (bool patches : {true, false}) {
    const Recipe r = recipe(4, patches, Augmentation::None);
    for (int64_t step : {0, 5}) {
      Tensor x, y, xb, yb;
      make_training_batch(data, r, 9, step, x, y);
      batch_before_augment(data, r, 9, step, xb, yb);
      CHECK(rows(x, 0, 4) == rows(xb, 0, 4));
      CHECK(rows(y, 0, 4) == rows(yb, 0, 4));
    }
  }
  // Over 8 steps of 4 samples, the nnU-Net transforms change some images (P(any) per sample > 0.6).
  int changed = 0;
  for (int64_t step = 0; step < 8; ++step) {
    Tensor x, y, xa, ya;
    make_training_batch(data, recipe(4, true, Augmentation::None), 9, step, x, y);
    make_training_batch(data, recipe(4, true, Augmentation::NnUnet), 9, step, xa, ya);
    for (int64_t b = 0; b < 4; ++b) changed += rows(x, b, b + 1) != rows(xa, b, b + 1);
  }
  CHECK(changed > 8);
  CHECK(augment_options(Augmentation::None).rotation_p == 0.0);
  CHECK(augment_options(Augmentation::NnUnet).rotation_p == 0.2);
}

TEST_CASE("unet3d augment: sample_seed differs between samples, steps and runs, and is a function of them alone") {
  std::set<uint64_t> seeds;
  for (uint64_t run : {0ull, 1ull})
    for (int64_t step = 0; step < 50; ++step)
      for (int64_t b = 0; b < 16; ++b) seeds.insert(sample_seed(run, step, b));
  CHECK(seeds.size() == 2 * 50 * 16);
  CHECK(sample_seed(3, 4, 5) == sample_seed(3, 4, 5));
  CHECK(sample_seed(3, 4, 0) != batch_seed(3, 4));
}

TEST_CASE("unet3d augment: --augment none|nnunet is parsed, saved with the run's options and restored; others refused") {
  CommandLine cli;
  cli.parse({"train", "--out", "runs/x", "--augment", "nnunet"});
  CHECK(cli.train_args.augment == "nnunet");
  CommandLine plain;
  plain.parse({"train", "--out", "runs/x"});
  CHECK(plain.train_args.augment.empty());  // the recipe's
  CommandLine bad;
  CHECK_THROWS_AS(bad.parse({"train", "--out", "runs/x", "--augment", "mirror"}), CLI::ParseError);
  // Saved and restored (train_meta.args): what --resume trains with.
  const nlohmann::json saved = train_args_to_json(cli.train_args);
  CHECK(saved.at("augment") == "nnunet");
  CHECK(train_args_from_json(json_checked::Field(saved, "state")).augment == "nnunet");
  // A run saved before --augment trained without: the recipe's (none).
  nlohmann::json old = saved;
  old.erase("augment");
  CHECK(train_args_from_json(json_checked::Field(old, "state")).augment.empty());
  nlohmann::json edited = saved;
  edited["augment"] = "spin";
  testing::check_error([&] { train_args_from_json(json_checked::Field(edited, "state")); },
                       {"field 'augment'", "unknown augmentation 'spin'", "none or nnunet"});
  testing::check_error([] { augmentation_by_name("x", "halfgrad-unet3d train: --augment"); }, {"--augment", "'x'"});
  CHECK(augmentation_name(augmentation_by_name("nnunet", "t")) == std::string("nnunet"));
  // --resume keeps the run's choice: --augment with it is refused.
  TrainArgs resume = plain.train_args;
  resume.resume = "runs/x";
  resume.given = {"--resume", "--augment"};
  testing::check_error([&] { check_resume_args(resume); }, {"--augment cannot be given with --resume"});
}
