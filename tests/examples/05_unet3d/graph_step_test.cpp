// train --cuda-graph's GraphStep and LaggedLoss (examples/05_unet3d/graph_step.h) on CUDA: the
// schedule (eager warm-up per shape, one capture, replays; a new shape warms up and captures again)
// and the one-step-late losses, against the same steps run eagerly from the same seed.
#include "examples/05_unet3d/graph_step.h"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "autocast/autocast.h"
#include "core/error.h"
#include "amp/grad_scaler.h"
#include "nn/buffer_snapshot.h"
#include "nn/unet3d.h"
#include "ops/loss/deferred_label_check.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "tests/cuda/cuda_test_case.h"

using namespace halfgrad;

namespace {

struct TinyRun {
  TinyRun() {
    Generator init(11);
    model = std::make_unique<nn::UNet3d>(nn::UNet3dOptions().channels({2, 4}).bottleneck(8), init);
    model->to(Device::CUDA);
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(1e-3).capturable(true));
    scaler = std::make_unique<amp::GradScaler>(amp::GradScalerOptions().init_scale(256).capturable(true));
    buffers = std::make_unique<nn::BufferSnapshot>(*model);
  }
  // Trainer::step()'s sequence, as GraphStep's body.
  Tensor body(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    buffers->capture();
    Tensor loss;
    {
      amp::AutocastGuard autocast(true);
      loss = ops::segmentation_loss((*model)(x).to(kFloat32), y);
    }
    scaler->scale(loss).backward();
    scaler->step(*opt);
    buffers->restore_if(scaler->device_found_inf(*opt));
    scaler->update();
    return loss;
  }
  std::unique_ptr<nn::UNet3d> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<nn::BufferSnapshot> buffers;
};

void batch(int64_t step, const Shape& shape, Tensor& x, Tensor& y) {
  Generator gen(500 + static_cast<uint64_t>(step));
  x = Tensor::randn(shape, gen).copy_to(Device::CUDA);
  const Shape ls = {shape[0], shape[2], shape[3], shape[4]};
  const std::vector<double> u = Tensor::uniform(ls, 0.0, 3.0, gen, kFloat64).to_double_vector();
  y = Tensor::from_labels(std::vector<int64_t>(u.begin(), u.end()), ls).copy_to(Device::CUDA);
}

Shape shape_of(int64_t step) { return step <= 6 ? Shape{1, 1, 8, 8, 8} : Shape{2, 1, 8, 8, 16}; }

}  // namespace

CUDA_TEST_CASE("unet3d GraphStep cuda: warm-up, capture, replays and a re-capture give the eager steps' bits, one step late") {
  constexpr int64_t kSteps = 10;
  std::vector<float> eager_losses, graph_losses;
  std::vector<float> eager_weights, graph_weights;
  {
    TinyRun r;
    ops::DeferredLabelCheck labels;
    for (int64_t s = 1; s <= kSteps; ++s) {
      Tensor x, y;
      batch(s, shape_of(s), x, y);
      for (auto& g : r.opt->param_groups()) g.options().set_lr(1e-3 * s);
      eager_losses.push_back(static_cast<float>(r.body(x, y).item()));
    }
    labels.check("eager");
    for (const auto& [name, p] : r.model->named_parameters()) {
      const std::vector<float> v = p.to_float_vector();
      eager_weights.insert(eager_weights.end(), v.begin(), v.end());
    }
  }
  {
    TinyRun r;
    ops::DeferredLabelCheck labels;
    unet3d_app::GraphStep step([&](const Tensor& x, const Tensor& y) { return r.body(x, y); },
                               [&] { r.opt->stage_lr(); }, /*warmup=*/2);
    unet3d_app::LaggedLoss lagged;
    for (int64_t s = 1; s <= kSteps; ++s) {
      Tensor x, y;
      batch(s, shape_of(s), x, y);
      for (auto& g : r.opt->param_groups()) g.options().set_lr(1e-3 * s);
      lagged.push(step.step(x, y));
      if (lagged.pending() == 2) graph_losses.push_back(static_cast<float>(lagged.pop()));
    }
    while (lagged.pending() > 0) graph_losses.push_back(static_cast<float>(lagged.pop()));
    labels.check("graph");
    // Shape A: steps 1-2 eager, 3 captured, 3-6 replayed; shape B: 7-8 eager, 9 captured, 9-10 replayed.
    CHECK(step.captures() == 2);
    CHECK(step.replays() == 6);
    CHECK(step.nodes() > 50);
    CHECK(step.pool_bytes() > 0);
    for (const auto& [name, p] : r.model->named_parameters()) {
      const std::vector<float> v = p.to_float_vector();
      graph_weights.insert(graph_weights.end(), v.begin(), v.end());
    }
  }
  REQUIRE(graph_losses.size() == eager_losses.size());
  for (size_t i = 0; i < eager_losses.size(); ++i)
    CHECK_MESSAGE(std::memcmp(&eager_losses[i], &graph_losses[i], sizeof(float)) == 0,
                  "step " << i + 1 << ": eager loss " << eager_losses[i] << ", graph " << graph_losses[i]);
  REQUIRE(graph_weights.size() == eager_weights.size());
  CHECK(std::memcmp(graph_weights.data(), eager_weights.data(), graph_weights.size() * sizeof(float)) == 0);
}

CUDA_TEST_CASE("unet3d LaggedLoss cuda: values in push order, at most two pending") {
  unet3d_app::LaggedLoss lagged;
  lagged.push(Tensor::full({}, 1.5, kFloat32, Device::CUDA));
  lagged.push(Tensor::full({}, -2.0, kFloat32, Device::CUDA));
  CHECK_THROWS_WITH_AS(lagged.push(Tensor::full({}, 3.0, kFloat32, Device::CUDA)), doctest::Contains("pop one first"),
                       Error);
  CHECK(lagged.pop() == 1.5);
  lagged.push(Tensor::full({}, 4.0, kFloat32, Device::CUDA));
  CHECK(lagged.pop() == -2.0);
  CHECK(lagged.pop() == 4.0);
  CHECK(lagged.pending() == 0);
  CHECK_THROWS_WITH_AS((void)lagged.pop(), doctest::Contains("nothing pending"), Error);
}
