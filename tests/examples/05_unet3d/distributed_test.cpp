// halfgrad-unet3d's data-parallel pieces that need no GPU (examples/05_unet3d/distributed.h): the
// per-rank slice of the global batch is exactly the single-process batch's rows (for N = 1 the
// whole batch, bit for bit), --batch must split evenly, the children's argument list and GPU choice,
// and the step agreement of a world of 1 passes values and errors through unchanged.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/distributed.h"
#include "unet3d/recipe.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/synthetic_seg_data.h"

using namespace halfgrad;
using namespace unet3d_app;

namespace {

// Three 12x10x14 volumes with a foreground blob each, and a recipe drawing 8x8x8 patches (foreground
// two times out of three) flipped along all three axes: every kind of draw make_training_batch makes.
SegData synthetic_data() { return halfgrad::testing::synthetic_seg_data(); }

Recipe patch_recipe(int64_t batch) {
  Recipe r;
  r.batch = batch;
  r.patch = {8, 8, 8};
  r.foreground_prob = 2.0 / 3.0;
  r.flip_axes = {0, 1, 2};
  return r;
}

// Rows [begin, end) of a (B, ...) tensor's bytes.
std::vector<uint8_t> rows(const Tensor& t, int64_t begin, int64_t end) {
  const size_t row = t.nbytes() / static_cast<size_t>(t.size(0));
  const uint8_t* p = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(p + begin * row, p + end * row);
}

}  // namespace

TEST_CASE("unet3d distributed sampler: each rank's slice is its rows of the single-process batch, N = 1, 2, 4") {
  const SegData data = synthetic_data();
  const Recipe r = patch_recipe(8);
  for (int64_t step : {0, 1, 17}) {
    Tensor x, y;
    make_training_batch(data, r, 42, step, x, y);
    REQUIRE(x.size(0) == 8);
    for (int n : {1, 2, 4}) {
      CAPTURE(step);
      CAPTURE(n);
      for (int rank = 0; rank < n; ++rank) {
        const BatchSlice s = rank_batch_slice(r.batch, n, rank);
        CHECK(s.size() == 8 / n);
        CHECK(s.begin == rank * (8 / n));
        Tensor xs, ys;
        make_training_batch_slice(data, r, 42, step, s.begin, s.end, xs, ys);
        CHECK(xs.size(0) == s.size());
        CHECK(rows(xs, 0, s.size()) == rows(x, s.begin, s.end));
        CHECK(rows(ys, 0, s.size()) == rows(y, s.begin, s.end));
      }
    }
  }
  // N = 1: the slice is the whole batch, so a one-GPU run builds today's batches.
  const BatchSlice whole = rank_batch_slice(8, 1, 0);
  CHECK(whole.begin == 0);
  CHECK(whole.end == 8);
}

TEST_CASE("unet3d distributed sampler: --batch not a multiple of the GPUs, and bad slices, are refused") {
  testing::check_error([] { rank_batch_slice(6, 4, 0); }, {"--batch 6", "4 GPUs", "multiple of 4"});
  testing::check_error([] { rank_batch_slice(2, 4, 0); }, {"--batch 2", "multiple of 4"});
  testing::check_error([] { rank_batch_slice(8, 2, 2); }, {"rank 2 of world size 2"});
  const SegData data = synthetic_data();
  Tensor x, y;
  testing::check_error([&] { make_training_batch_slice(data, patch_recipe(4), 1, 0, 2, 5, x, y); },
                       {"make_training_batch", "[2, 5)", "batch of 4"});
}

TEST_CASE("unet3d launcher: the children's arguments drop --gpus N and --gpus=N only") {
  CHECK(args_without_gpus({"train", "--gpus", "4", "--device", "cuda", "--out", "r"}) ==
        std::vector<std::string>{"train", "--device", "cuda", "--out", "r"});
  CHECK(args_without_gpus({"train", "--out", "r", "--gpus=2"}) == std::vector<std::string>{"train", "--out", "r"});
  CHECK(args_without_gpus({"train", "--out", "gpus"}) == std::vector<std::string>{"train", "--out", "gpus"});
}

TEST_CASE("unet3d launcher: a rank's CUDA_VISIBLE_DEVICES is its entry of the caller's list") {
  CHECK(visible_device_for(nullptr, 3) == "3");
  CHECK(visible_device_for("", 1) == "1");
  CHECK(visible_device_for("4,5,6,7", 2) == "6");
  CHECK(visible_device_for("GPU-abc", 1) == "GPU-abc");  // one device given: the launcher chose it
  testing::check_error([] { visible_device_for("0,1", 2); }, {"CUDA_VISIBLE_DEVICES='0,1'", "local rank 2"});
}

TEST_CASE("unet3d step agreement: a world of 1 returns the values and lets an error through unchanged") {
  const RankContext solo;
  StepAgreement agreement(solo);
  CHECK(agreement.agree({1.5, -2.0}, "step 1") == std::vector<double>{1.5, -2.0});
  testing::check_error([&] { agreement.guard([] { HG_FAIL("loader: step 3: bad volume"); }); },
                       {"loader: step 3: bad volume"});
}
