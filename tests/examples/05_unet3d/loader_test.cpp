// BatchLoader (examples/05_unet3d/loader.h): batches in step order whatever the number of workers,
// from any first step, the prefetch bound held, a worker's exception rethrown at its step, and a clean
// shutdown when the consumer stops early. The CUDA cases (pinned slots, copy stream) skip without a GPU.
#include "examples/05_unet3d/loader.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test_case.h"

using namespace halfgrad;
using namespace unet3d_app;

namespace {

// x (2, 1, 2, 3, 4) float32 whose every value is `step` + i / 100, y (2, 2, 3, 4) int64 = step.
void test_batch(int64_t step, Tensor& x, Tensor& y) {
  std::vector<float> xv(2 * 2 * 3 * 4);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(step) + static_cast<float>(i) / 100;
  x = Tensor::from_vector(xv, {2, 1, 2, 3, 4});
  y = Tensor::from_labels(std::vector<int64_t>(xv.size(), step), {2, 2, 3, 4});
}

void check_batch(int64_t step, const Tensor& x, const Tensor& y) {
  Tensor wx, wy;
  test_batch(step, wx, wy);
  REQUIRE(x.shape() == wx.shape());
  REQUIRE(y.shape() == wy.shape());
  CHECK(x.to_float_vector() == wx.to_float_vector());
  CHECK(y.to_double_vector() == wy.to_double_vector());
}

}  // namespace

TEST_CASE("unet3d loader cpu: workers 0, 1, 3 and prefetch 1, 2, 4 deliver steps first..end in order") {
  for (int workers : {0, 1, 3}) {
    for (int prefetch : {1, 2, 4}) {
      CAPTURE(workers);
      CAPTURE(prefetch);
      LoaderOptions o;
      o.workers = workers;
      o.prefetch = prefetch;
      // A builder that sleeps a varying time, so that workers finish out of order.
      BatchLoader loader(
          [](int64_t step, Tensor& x, Tensor& y) {
            std::this_thread::sleep_for(std::chrono::microseconds(200 * ((step * 7) % 5)));
            test_batch(step, x, y);
          },
          5, 25, o);
      for (int64_t s = 5; s < 25; ++s) {
        REQUIRE(loader.next_step() == s);
        Tensor x, y;
        loader.next(x, y);
        check_batch(s, x, y);
      }
      CHECK(loader.stats().batches == 20);
      CHECK(loader.stats().wait_seconds >= 0);
      Tensor x, y;
      CHECK_THROWS_WITH_AS(loader.next(x, y), doctest::Contains("all 25 steps' batches were delivered"), Error);
    }
  }
}

TEST_CASE("unet3d loader cpu: workers never build more than prefetch batches ahead of the consumer") {
  std::atomic<int64_t> delivered{0}, worst_ahead{0};
  LoaderOptions o;
  o.workers = 3;
  o.prefetch = 2;
  BatchLoader loader(
      [&](int64_t step, Tensor& x, Tensor& y) {
        // The step being built may be at most prefetch past the one the consumer takes next.
        int64_t ahead = step - delivered.load();
        int64_t w = worst_ahead.load();
        while (ahead > w && !worst_ahead.compare_exchange_weak(w, ahead)) {}
        test_batch(step, x, y);
      },
      0, 40, o);
  for (int64_t s = 0; s < 40; ++s) {
    Tensor x, y;
    loader.next(x, y);
    delivered.store(s + 1);
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // a slow training step
  }
  CHECK(worst_ahead.load() <= o.prefetch);
  CHECK(worst_ahead.load() >= 1);  // the workers did build ahead
}

TEST_CASE("unet3d loader cpu: a builder's exception is rethrown at its step, naming it; later steps still come") {
  for (int workers : {0, 2}) {
    CAPTURE(workers);
    LoaderOptions o;
    o.workers = workers;
    BatchLoader loader(
        [](int64_t step, Tensor& x, Tensor& y) {
          HG_CHECK(step != 3, "volume 'hippocampus_007.nii.gz' is unreadable");
          test_batch(step, x, y);
        },
        0, 6, o);
    Tensor x, y;
    for (int64_t s = 0; s < 3; ++s) {
      loader.next(x, y);
      check_batch(s, x, y);
    }
    CHECK_THROWS_WITH_AS(loader.next(x, y),
                         doctest::Contains("building the batch of training step 3 (counting from 0) failed: volume "
                                           "'hippocampus_007.nii.gz' is unreadable"),
                         Error);
    loader.next(x, y);
    check_batch(4, x, y);
  }
}

TEST_CASE("unet3d loader cpu: destroyed with batches in flight and steps left, it joins without hanging") {
  const auto t0 = std::chrono::steady_clock::now();
  {
    LoaderOptions o;
    o.workers = 3;
    o.prefetch = 4;
    BatchLoader loader(
        [](int64_t step, Tensor& x, Tensor& y) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          test_batch(step, x, y);
        },
        0, 1000000, o);
    Tensor x, y;
    loader.next(x, y);  // then the "training" throws: the loader goes out of scope
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("unet3d loader cpu: bad options are refused, naming the option") {
  auto build = [](int64_t step, Tensor& x, Tensor& y) { test_batch(step, x, y); };
  LoaderOptions o;
  o.workers = -1;
  CHECK_THROWS_WITH_AS(BatchLoader(build, 0, 4, o), doctest::Contains("--workers must be >= 0, got -1"), Error);
  o.workers = 1;
  o.prefetch = 0;
  CHECK_THROWS_WITH_AS(BatchLoader(build, 0, 4, o), doctest::Contains("--prefetch must be >= 1, got 0"), Error);
  o.prefetch = 2;
  CHECK_THROWS_WITH_AS(BatchLoader(build, 5, 4, o), doctest::Contains("first step 5 outside [0, 4]"), Error);
}

CUDA_TEST_CASE("unet3d loader cuda: pinned slots and the copy stream deliver CUDA tensors equal to the built ones") {
  for (int workers : {1, 3}) {
    for (int prefetch : {1, 3}) {
      CAPTURE(workers);
      CAPTURE(prefetch);
      LoaderOptions o;
      o.workers = workers;
      o.prefetch = prefetch;
      o.device = Device::CUDA;
      BatchLoader loader(test_batch, 2, 40, o);
      std::vector<Tensor> kept;  // some batches outlive their slot's reuse: their values must stay
      for (int64_t s = 2; s < 40; ++s) {
        Tensor x, y;
        loader.next(x, y);
        REQUIRE(x.is_cuda());
        REQUIRE(y.is_cuda());
        // Work on the main stream that reads the batch, as a training step would.
        Tensor x2 = x.clone();
        check_batch(s, x2, y);
        if (s % 5 == 0) { kept.push_back(x); kept.push_back(y); }
      }
      for (size_t i = 0; i < kept.size(); i += 2) check_batch(static_cast<int64_t>(5 * (i / 2 + 1)), kept[i], kept[i + 1]);
    }
  }
}

CUDA_TEST_CASE("unet3d StepGapTimer cuda: gaps are counted per step boundary, less skipped ones, and are >= the host's sleep") {
  StepGapTimer t(true);
  for (int i = 0; i < 20; ++i) {
    t.step_start();
    Tensor a = Tensor::ones({1 << 16}, kFloat32, Device::CUDA);
    t.step_end();
    // The GPU has finished the step before the host sleeps (under compute-sanitizer a kernel can
    // outlast the sleep), so it idles for at least the sleep.
    cuda::synchronize("StepGapTimer test");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (i == 9) t.skip_gap();  // an epoch boundary: not counted
  }
  const double s = t.finish();
  CHECK(t.gaps() == 18);
  CHECK(s >= 18 * 0.0015);
}
