// graph_step.h - train --cuda-graph: halfgrad-unet3d's whole training step (zero_grad, forward, loss,
// scaled backward, unscale, AdamW, the BatchNorm restore of a skipped step, the scaler update)
// captured once in a CUDA graph (core/cuda/graph.h) and replayed, plus the one-step-late read of the
// loss that lets the host keep its per-step bookkeeping without waiting for the GPU.
//
// The step the graph holds is Trainer::step() (trainer.h) without hooks, run on static input and
// label buffers: each batch is copied into them (device to device, queued before the replay), because
// a replay reads the addresses the capture saw. What changes from step to step lives on the device: the lr (AdamW::stage_lr before
// each replay), AdamW's step counts, the loss scale and growth tracker, the found_inf flag, the label
// check (ops::DeferredLabelCheck). So the optimizer and the scaler must be capturable.
// Per batch shape: the first `warmup` steps run eagerly (they create the optimizer state and anything
// else made lazily; a capture would re-create it on every replay), the next one is captured and
// replayed, and every later one replayed (the eager cache's free segments are given back before the
// capture, so that the warm-up's activations and the graph's are not both held). A batch of another
// shape starts over (new static buffers,
// new warm-up, new capture); halfgrad-unet3d's training batches all have one shape, so it captures once.
// An eager step and a replayed one give the same bits (tests/cuda/graph_cuda_test.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "core/cuda/graph.h"
#include "core/cuda/streams.h"
#include "core/tensor.h"

namespace unet3d_app {

class GraphStep {
 public:
  /// body(x, y): one whole step on the static buffers x, y; returns the loss (0-d FP32 CUDA tensor).
  /// before_replay(): run on the host before each replay (the optimizer's stage_lr).
  GraphStep(std::function<halfgrad::Tensor(const halfgrad::Tensor&, const halfgrad::Tensor&)> body,
            std::function<void()> before_replay, int64_t warmup);
  /// One step on the batch (x, y: CUDA tensors), as described at the top. Returns the step's loss,
  /// a device tensor whose value is there once the step has run (the host does not wait).
  halfgrad::Tensor step(const halfgrad::Tensor& x, const halfgrad::Tensor& y);
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  /// Nodes of the current graph: the launches one replay stands for (0 before a capture).
  size_t nodes() const { return graph_ ? graph_->num_nodes() : 0; }
  /// Device memory the current graph's private pool holds, beside the eager cache's (0 before a capture).
  size_t pool_bytes() const { return graph_ ? graph_->pool_reserved_bytes() : 0; }

 private:
  std::function<halfgrad::Tensor(const halfgrad::Tensor&, const halfgrad::Tensor&)> body_;
  std::function<void()> before_replay_;
  int64_t warmup_;
  halfgrad::Tensor x_, y_, loss_;  // the static buffers, and the captured step's loss
  int64_t eager_at_shape_ = 0;
  std::unique_ptr<halfgrad::cuda::Graph> graph_;
  int64_t captures_ = 0, replays_ = 0;
};

/// Per-step losses read on the host one step late: push(loss) queues a copy of the 0-d FP32 CUDA loss
/// into pinned memory and an event after it; pop() waits for the oldest pushed value, which by then
/// is one step old, so the GPU is already running the next step and does not wait for the host.
class LaggedLoss {
 public:
  LaggedLoss();
  void push(const halfgrad::Tensor& loss);
  /// Values pushed and not yet popped (0, 1 or 2).
  int pending() const { return pending_; }
  /// The oldest pending value. Throws if none.
  double pop();

 private:
  static constexpr int kSlots = 2;
  halfgrad::cuda::PinnedBuffer host_;  // kSlots floats
  halfgrad::cuda::Event done_[kSlots];
  int next_ = 0, pending_ = 0;
};

}  // namespace unet3d_app
