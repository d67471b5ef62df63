// engine_memory_test.cpp - the tape keeps alive only what backward reads: an intermediate that no
// closure saved is freed as soon as the forward drops its handle (InputEdge, autograd/node.h), as in
// PyTorch; a saved one lives until its node's backward has run. Anomaly mode keeps the inputs (its
// messages describe their values).
#include <doctest/doctest.h>

#include <memory>

#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "ops/ops.h"

using namespace halfgrad;

namespace {

std::weak_ptr<Storage> storage_of(const Tensor& t) { return t.impl()->storage; }

}  // namespace

TEST_CASE("autograd memory: an intermediate no backward reads is freed after the forward drops it") {
  Generator gen(3);
  Tensor x = Tensor::randn({4, 8}, gen).set_requires_grad(true);
  std::weak_ptr<Storage> mid_storage;
  Tensor y;
  {
    Tensor mid = x * 3.0 + 1.0;  // affine: its closure reads no tensor (Save list empty)
    mid_storage = storage_of(mid);
    y = ops::relu(mid);          // relu saves its output, not its input
  }
  // PyTorch frees `mid` here too; before InputEdge the relu node's input list held it until the
  // graph died.
  CHECK(mid_storage.expired());
  std::weak_ptr<Storage> y_storage = storage_of(y);
  Tensor loss = ops::sum(y);
  y = Tensor();
  CHECK_FALSE(y_storage.expired());  // saved by relu for its backward
  loss.backward();
  CHECK(y_storage.expired());        // freed with the relu node's closure, during backward
  // The gradient is unchanged: d/dx relu(3x + 1) = 3 where 3x + 1 > 0.
  const Tensor g = x.grad();
  REQUIRE(g.defined());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float xi = x.data<float>()[i];
    CHECK(g.data<float>()[i] == (3.0f * xi + 1.0f > 0.0f ? 3.0f : 0.0f));
  }
}

TEST_CASE("autograd memory: a chain of n ops keeps n saved tensors at the end of the forward, not 2n") {
  Generator gen(4);
  Tensor x = Tensor::randn({256, 256}, gen).set_requires_grad(true);  // 256 KiB per float32 tensor
  const size_t bytes = 256 * 256 * sizeof(float);
  cpu_reset_peak_stats();
  const size_t live_before = cpu_allocator_stats().allocated_bytes;
  Tensor h = x;
  constexpr int kLayers = 8;
  for (int i = 0; i < kLayers; ++i) h = ops::relu(h * 0.5 + 0.1);  // per layer: one unsaved, one saved tensor
  const size_t live_after = cpu_allocator_stats().allocated_bytes;
  // The kLayers relu outputs (the last one is h) are alive; the affine outputs are not.
  CHECK(live_after - live_before == kLayers * bytes);
  ops::sum(h).backward();
  CHECK(x.grad().defined());
}

TEST_CASE("autograd memory: under anomaly mode the forward inputs are kept, and a backward anomaly describes them") {
  autograd::DetectAnomalyGuard anomaly;
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f, -2.0f}, {2}).set_requires_grad(true);
  std::weak_ptr<Storage> mid_storage;
  Tensor y;
  {
    Tensor mid = x * 2.0;
    mid_storage = storage_of(mid);
    y = ops::relu(mid);
  }
  CHECK_FALSE(mid_storage.expired());  // the relu node keeps its input for anomaly messages
}
