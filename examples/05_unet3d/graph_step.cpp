// graph_step.cpp - GraphStep and LaggedLoss (graph_step.h).
#include "examples/05_unet3d/graph_step.h"

#include "core/cuda/runtime.h"
#include "core/error.h"

namespace unet3d_app {

using namespace halfgrad;

GraphStep::GraphStep(std::function<Tensor(const Tensor&, const Tensor&)> body, std::function<void()> before_replay,
                     int64_t warmup)
    : body_(std::move(body)), before_replay_(std::move(before_replay)), warmup_(warmup) {
  HG_CHECK(warmup_ >= 1, "halfgrad-unet3d train --cuda-graph: at least one eager warm-up step, got " << warmup_);
}

Tensor GraphStep::step(const Tensor& x, const Tensor& y) {
  HG_CHECK(x.is_cuda() && y.is_cuda(), "halfgrad-unet3d train --cuda-graph: the batch must be on CUDA");
  const bool same = x_.defined() && x_.shape() == x.shape() && x_.dtype() == x.dtype() &&
                    x_.memory_format() == x.memory_format() && y_.shape() == y.shape() && y_.dtype() == y.dtype();
  if (!same) {  // a new shape: new static buffers, warm-up again, then a new capture
    graph_.reset();
    loss_ = Tensor();
    x_ = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
    y_ = Tensor::empty(y.shape(), y.dtype(), Device::CUDA, y.memory_format());
    eager_at_shape_ = 0;
  }
  x_.copy_from(x);  // queued before the step that reads it
  y_.copy_from(y);
  if (eager_at_shape_ < warmup_) {
    ++eager_at_shape_;
    return body_(x_, y_);
  }
  if (!graph_) {
    // The warm-up's activations sit free in the eager cache; the graph's pool needs its own, so give
    // the cached segments back first rather than hold both (one wait for the stream, once a shape).
    cuda::empty_cache();
    auto g = std::make_unique<cuda::Graph>();
    try {
      g->capture([&] { loss_ = body_(x_, y_); }, "halfgrad-unet3d's training step");
    } catch (const Error& e) {  // the host state of a half-captured step cannot be trusted: stop
      HG_FAIL("halfgrad-unet3d train --cuda-graph: the training step cannot be captured in a CUDA graph: "
              << e.what() << "; run with --no-cuda-graph");
    }
    graph_ = std::move(g);
    ++captures_;
  }
  before_replay_();
  graph_->replay();  // the first replay is the captured step itself: capturing runs nothing
  ++replays_;
  return loss_;
}

LaggedLoss::LaggedLoss() : host_(kSlots * sizeof(float)) {}

void LaggedLoss::push(const Tensor& loss) {
  HG_CHECK(pending_ < kSlots, "LaggedLoss::push: " << kSlots << " values pending; pop one first");
  HG_CHECK(loss.defined() && loss.is_cuda() && loss.dtype() == kFloat32 && loss.numel() == 1,
           "LaggedLoss::push: expected a 1-element float32 CUDA loss");
  float* slot = static_cast<float*>(host_.data()) + next_;
  cuda::main_stream_copy_d2h_async(slot, loss.raw_data(), sizeof(float));
  done_[next_].record_on_main();
  next_ = (next_ + 1) % kSlots;
  ++pending_;
}

double LaggedLoss::pop() {
  HG_CHECK(pending_ > 0, "LaggedLoss::pop: nothing pending");
  const int oldest = (next_ - pending_ + kSlots) % kSlots;
  done_[oldest].synchronize();
  --pending_;
  return static_cast<const float*>(host_.data())[oldest];
}

}  // namespace unet3d_app
