// train --augment-device (examples/05_unet3d/gpu_batch.h, data.h's plan_training_batch_slice and
// build_planned_batch) on the CPU: the plans draw make_training_batch_slice's volumes, corners and flips;
// without augmentation a planned batch is make_training_batch_slice's bit for bit; a slice's plans are
// the batch's rows; the option is parsed, checked against --device, saved with the run and restored
// (absent in runs saved before it: cpu); and the memory estimate counts the volumes held on the GPU.
// On a GPU, tests/cuda/augment_cuda_test.cpp builds the same plans with the CUDA kernels.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/gpu_batch.h"
#include "examples/05_unet3d/memory_estimate.h"
#include "examples/05_unet3d/resume.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/synthetic_seg_data.h"

using namespace halfgrad;
using namespace unet3d_app;

namespace {

using halfgrad::testing::recipe;
using halfgrad::testing::rows;

std::vector<io::Sample> volumes_of(const SegData& d) {
  std::vector<io::Sample> v;
  for (const SegVolume& s : d.train) v.push_back({s.image, s.label});
  return v;
}

}  // namespace

TEST_CASE("unet3d gpu batch: planned batches without augmentation are make_training_batch_slice's bits") {
  const SegData data = halfgrad::testing::synthetic_seg_data();
  for (bool patches : {true, false}) {
    const Recipe r = recipe(5, patches, Augmentation::None);
    for (int64_t step : {0, 4, 11})
      for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {2, 5}, {0, 3}}) {
        CAPTURE(patches);
        CAPTURE(step);
        CAPTURE(begin);
        Tensor x, y, px, py;
        make_training_batch_slice(data, r, 31, step, begin, end, x, y);
        build_planned_batch(volumes_of(data), plan_training_batch_slice(data, r, 31, step, begin, end), px, py);
        CHECK(px.shape() == x.shape());
        CHECK(rows(px, 0, end - begin) == rows(x, 0, end - begin));
        CHECK(rows(py, 0, end - begin) == rows(y, 0, end - begin));
      }
  }
}

TEST_CASE("unet3d gpu batch: nnunet plans keep the batch's volumes, corners and flips; slices are the batch's rows") {
  const SegData data = halfgrad::testing::synthetic_seg_data();
  const Recipe none = recipe(6, true, Augmentation::None), nn = recipe(6, true, Augmentation::NnUnet);
  int64_t augmented = 0;
  for (int64_t step : {0, 2, 9}) {
    const std::vector<SamplePlan> a = plan_training_batch_slice(data, none, 8, step, 0, 6);
    const std::vector<SamplePlan> b = plan_training_batch_slice(data, nn, 8, step, 0, 6);
    REQUIRE(a.size() == 6);
    for (size_t i = 0; i < 6; ++i) {
      CHECK(a[i].volume == b[i].volume);
      CHECK(a[i].start == b[i].start);
      CHECK(a[i].flip == b[i].flip);
      augmented += b[i].augment.spatial || b[i].augment.noise_std || b[i].augment.gamma;
    }
    Tensor x, y;
    build_planned_batch(volumes_of(data), b, x, y);
    for (int64_t k : {1, 4}) {
      Tensor x0, y0, x1, y1;
      build_planned_batch(volumes_of(data), plan_training_batch_slice(data, nn, 8, step, 0, k), x0, y0);
      build_planned_batch(volumes_of(data), plan_training_batch_slice(data, nn, 8, step, k, 6), x1, y1);
      CHECK(rows(x0, 0, k) == rows(x, 0, k));
      CHECK(rows(x1, 0, 6 - k) == rows(x, k, 6));
      CHECK(rows(y1, 0, 6 - k) == rows(y, k, 6));
    }
  }
  CHECK(augmented > 0);
  // A plan naming a volume that is not there, or samples of two extents, are refused.
  std::vector<SamplePlan> bad = plan_training_batch_slice(data, nn, 8, 0, 0, 2);
  bad[1].volume = 7;
  Tensor x, y;
  halfgrad::testing::check_error([&] { build_planned_batch(volumes_of(data), bad, x, y); }, {"build_planned_batch: volume 7"});
  bad[1].volume = 0;
  bad[1].size = {8, 8, 4};
  halfgrad::testing::check_error([&] { build_planned_batch(volumes_of(data), bad, x, y); }, {"build_planned_batch: sample 1"});
}

TEST_CASE("unet3d gpu batch: --augment-device is parsed, needs --device cuda, is saved and restored (absent: cpu)") {
  CommandLine cli;
  cli.parse({"train", "--out", "r", "--augment", "nnunet", "--augment-device", "cpu", "--device", "cuda"});
  CHECK(cli.train_args.augment_device == "cpu");
  CommandLine plain;
  plain.parse({"train", "--out", "r"});
  CHECK(plain.train_args.augment_device.empty());  // cpu, resolved by the trainer (the CUDA kernels are opt-in)
  CommandLine bad;
  CHECK_THROWS_AS(bad.parse({"train", "--out", "r", "--augment-device", "gpu"}), CLI::ParseError);
  TrainArgs a;
  a.out = "r";
  a.augment = "nnunet";
  a.augment_device = "cuda";
  halfgrad::testing::check_error([&] { check_train_args(a); }, {"--augment-device cuda needs --device cuda"});
  a.device = "cuda";
  check_train_args(a);
  const nlohmann::json saved = train_args_to_json(a);
  CHECK(train_args_from_json(json_checked::Field(saved, "state")).augment_device == "cuda");
  nlohmann::json old = saved;
  old.erase("augment_device");
  CHECK(train_args_from_json(json_checked::Field(old, "state")).augment_device == "cpu");
  old["augment_device"] = "tpu";
  halfgrad::testing::check_error([&] { train_args_from_json(json_checked::Field(old, "state")); },
                                 {"field 'augment_device' is \"tpu\""});
  // --resume keeps the run's: giving it again is refused.
  TrainArgs r;
  r.resume = "run";
  r.given = {"--resume", "--augment-device"};
  halfgrad::testing::check_error([&] { check_resume_args(r); }, {"--augment-device cannot be given with --resume"});
}

TEST_CASE("unet3d gpu batch: the memory estimate counts the training volumes held on the GPU") {
  const SegData data = halfgrad::testing::synthetic_seg_data();
  CHECK(GpuBatchBuilder::volume_bytes(data) == 3u * 12 * 10 * 14 * (4 + 8));
  MemoryEstimate m;
  m.model_state = 100;
  m.training_step = 1000;
  m.forward = 10;
  m.step_what = "batch 2 at 8x8x8";
  m.forward_what = "12x10x14";
  const uint64_t before = m.total();
  m.augment_volumes = GpuBatchBuilder::volume_bytes(data);
  CHECK(m.total() == before + m.augment_volumes);
  CHECK(m.describe().find("training volumes on the GPU for --augment-device cuda") != std::string::npos);
}
