// graph_cuda_test.cpp - CUDA graphs (core/cuda/graph.h) and the training step without host
// synchronisation that they need (issue 11, item 3): capturable AdamW and GradScaler, the deferred
// label check, BufferSnapshot::restore_if, the graph-private memory pool.
// The main case trains a small AMP UNet3d twice from the same seed - once every step eager, once
// with the steps captured in a graph and replayed - through a schedule with a skipped step (an inf
// in a batch, inside the replays) and a batch-shape change (a new capture), and requires the same
// bits everywhere: losses, weights, BatchNorm buffers, AdamW moments and step counts, loss scale and
// growth tracker. The eager run is the readable oracle of the replayed one.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "nn/buffer_snapshot.h"
#include "nn/unet3d.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/deferred_label_check.h"
#include "ops/loss/loss.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;
using halfgrad::testing::check_error;

namespace {

std::vector<unsigned char> host_bytes(const Tensor& t) {
  const Tensor h = t.copy_to(Device::CPU).contiguous();
  const auto* p = static_cast<const unsigned char*>(h.raw_data());
  return std::vector<unsigned char>(p, p + h.nbytes());
}

// The model, optimizer and scaler of one run, and the step's static buffers: what a captured step
// reads (x, y) and writes (loss) must stay at one address for the graph's lifetime.
struct Run {
  explicit Run(bool capturable) {
    Generator init(7);
    model = std::make_unique<nn::UNet3d>(
        nn::UNet3dOptions().channels({4, 8}).bottleneck(16).norm(nn::NormKind::Batch), init);
    model->to(Device::CUDA);
    opt = std::make_unique<optim::AdamW>(model->parameters(),
                                         optim::AdamWOptions().lr(1e-3).capturable(capturable));
    // growth_interval 3: the scale grows inside the replays too.
    scaler = std::make_unique<amp::GradScaler>(
        amp::GradScalerOptions().init_scale(1024).growth_interval(3).capturable(capturable));
    buffers = std::make_unique<nn::BufferSnapshot>(*model);
  }
  std::unique_ptr<nn::UNet3d> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<nn::BufferSnapshot> buffers;
  Tensor x, y, loss;
};

// The batch of `step`: N(0, 1) images (N, 1, D, H, W) and labels in [0, 3); with `inf`, one voxel
// of the image is +inf (the forward overflows, GradScaler must skip the step).
void make_batch(int64_t step, const Shape& shape, bool inf, Tensor& x, Tensor& y) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  Tensor xh = Tensor::randn(shape, gen);
  if (inf) xh.data<float>()[xh.numel() / 2] = INFINITY;
  const Shape ls = {shape[0], shape[2], shape[3], shape[4]};
  const std::vector<double> u = Tensor::uniform(ls, 0.0, 3.0, gen, kFloat64).to_double_vector();
  x = xh.copy_to(Device::CUDA);
  y = Tensor::from_labels(std::vector<int64_t>(u.begin(), u.end()), ls).copy_to(Device::CUDA);
}

double lr_at(int64_t step) { return 1e-3 * (1.0 + 0.25 * static_cast<double>(step)); }

// One training step on run.x / run.y, with no host synchronisation when the run is capturable:
// the body that runs eagerly and the one a graph captures are this same function.
void step_body(Run& r) {
  r.opt->zero_grad();  // set_to_none: the backward makes the gradients (in the graph's pool when captured)
  r.buffers->capture();
  {
    amp::AutocastGuard autocast(true);
    r.loss = ops::segmentation_loss((*r.model)(r.x).to(kFloat32), r.y);
  }
  r.scaler->scale(r.loss).backward();
  r.scaler->step(*r.opt);
  r.buffers->restore_if(r.scaler->device_found_inf(*r.opt));
  r.scaler->update();
}

struct Phase {
  int64_t first, last;  // steps (1-based, inclusive)
  Shape shape;
  bool graph;           // replayed (else eager) in the graph run
};

// Trains through `phases`; returns every step's loss bytes, then the final state's bytes.
std::vector<unsigned char> train(bool use_graphs, int64_t inf_step, const std::vector<Phase>& phases,
                                 int64_t* captures) {
  Run r(/*capturable=*/true);
  ops::DeferredLabelCheck labels;
  std::vector<unsigned char> out;
  std::unique_ptr<cuda::Graph> graph;
  *captures = 0;
  for (const Phase& ph : phases) {
    // A new shape means a new graph, reading new static buffers.
    graph.reset();
    r.x = Tensor::zeros(ph.shape, kFloat32, Device::CUDA);
    r.y = Tensor::zeros({ph.shape[0], ph.shape[2], ph.shape[3], ph.shape[4]}, kInt64, Device::CUDA);
    for (int64_t step = ph.first; step <= ph.last; ++step) {
      Tensor xb, yb;
      make_batch(step, ph.shape, step == inf_step, xb, yb);
      r.x.copy_from(xb);  // into the static buffers, before the step reads them
      r.y.copy_from(yb);
      for (auto& g : r.opt->param_groups()) g.options().set_lr(lr_at(step));
      if (use_graphs && ph.graph) {
        if (!graph) {
          graph = std::make_unique<cuda::Graph>();
          graph->capture([&] { step_body(r); }, "the test's UNet3d step");
          ++*captures;
          CHECK(graph->num_nodes() > 50);  // the step's launches, now one
        }
        r.opt->stage_lr();  // the lr this replay reads
        graph->replay();
      } else {
        step_body(r);
      }
      const std::vector<unsigned char> l = host_bytes(r.loss);
      out.insert(out.end(), l.begin(), l.end());
    }
  }
  labels.check("the test's training");
  for (const auto& [name, p] : r.model->named_parameters()) {
    const std::vector<unsigned char> b = host_bytes(p);
    out.insert(out.end(), b.begin(), b.end());
    const auto* st = dynamic_cast<const optim::AdamWParamState*>(r.opt->param_state(p));
    REQUIRE(st != nullptr);
    for (const Tensor* t : {&st->exp_avg, &st->exp_avg_sq}) {
      const std::vector<unsigned char> m = host_bytes(*t);
      out.insert(out.end(), m.begin(), m.end());
    }
    const int64_t steps = st->steps();
    const auto* sp = reinterpret_cast<const unsigned char*>(&steps);
    out.insert(out.end(), sp, sp + sizeof(steps));
  }
  for (const auto& [name, b] : r.model->named_buffers()) {
    // num_batches_tracked (Int64, on the host) counts the forwards the host ran: replays run none
    // (nn/buffer_snapshot.h says why that is harmless); the statistics themselves must match.
    if (!b.is_cuda()) continue;
    const std::vector<unsigned char> v = host_bytes(b);
    out.insert(out.end(), v.begin(), v.end());
  }
  const double scale = r.scaler->get_scale();
  const int64_t tracker = r.scaler->get_growth_tracker(), skipped = r.scaler->skipped_steps();
  CHECK_MESSAGE(skipped == 1, "skipped steps " << skipped << " (the inf batch's only)");
  for (const auto* p : {reinterpret_cast<const unsigned char*>(&scale), reinterpret_cast<const unsigned char*>(&tracker)})
    out.insert(out.end(), p, p + 8);
  return out;
}

std::string first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return "byte " + std::to_string(i) + " of " + std::to_string(a.size());
  return "";
}

}  // namespace

CUDA_TEST_CASE("cuda graph: a capture that reads a result on the host or copies from it fails, naming the capture") {
  const Tensor t = Tensor::ones({4}, kFloat32, Device::CUDA);
  {
    cuda::Graph g;
    check_error([&] { g.capture([&] { (void)ops::mul(t, t).item_at(0); }, "a step that reads a value on the host"); },
                {"cuda::Graph::capture of 'a step that reads a value on the host'", "cuda::copy_d2h"});
    CHECK(!g.ready());
    CHECK(!cuda::capturing());
    check_error([&] { g.capture([&] { (void)Tensor::scalar(2.0).copy_to(Device::CUDA); }, "a host scalar"); },
                {"a host scalar", "host-to-device copy", "put the value in device memory"});
    check_error([&] { g.replay(); }, {"nothing was captured"});
  }
  // The stream and the allocator work eagerly afterwards.
  CHECK(ops::add(t, t).item_at(3) == 2.0);
}

CUDA_TEST_CASE("cuda graph: replays read the inputs' current values; the graph's memory is its own") {
  Tensor a = Tensor::full({3000}, 1.0, kFloat32, Device::CUDA);
  Tensor out;
  void* temp_address = nullptr;
  cuda::Graph g;
  g.capture([&] {
    const Tensor b = ops::mul(a, a);  // freed inside the capture: its block goes back to the graph's pool
    temp_address = b.raw_data();
    out = ops::add(b, a);
  }, "mul then add");
  REQUIRE(g.ready());
  CHECK(g.num_nodes() >= 2);
  CHECK(g.pool_reserved_bytes() > 0);
  a.fill_(3.0);  // eager, before the replay
  g.replay();
  CHECK(out.item_at(2999) == 12.0);  // 3 * 3 + 3
  a.fill_(-2.0);
  g.replay();
  CHECK(out.item_at(0) == 2.0);  // 4 - 2
  // Eager requests of the same sizes never get the graph's blocks (the temporary's nor the output's).
  const Tensor e1 = Tensor::empty({3000}, kFloat32, Device::CUDA), e2 = Tensor::empty({3000}, kFloat32, Device::CUDA);
  for (const Tensor* e : {&e1, &e2}) {
    CHECK(e->raw_data() != temp_address);
    CHECK(e->raw_data() != out.raw_data());
  }
}

CUDA_TEST_CASE("cuda graph: the AMP UNet3d step replayed equals the eager step bit for bit (skip, re-capture)") {
  // Steps 1-2 eager warm-up at 16^3; 3-6 replayed, step 4 with an inf (skipped on the device, its
  // BatchNorm statistics restored on the device); 7 eager at a new shape; 8-9 replayed from a new
  // capture. The reference runs all nine eagerly.
  const std::vector<Phase> phases = {{1, 2, {1, 1, 16, 16, 16}, false},
                                     {3, 6, {1, 1, 16, 16, 16}, true},
                                     {7, 7, {2, 1, 16, 16, 8}, false},
                                     {8, 9, {2, 1, 16, 16, 8}, true}};
  int64_t eager_captures = 0, graph_captures = 0;
  const std::vector<unsigned char> eager = train(false, 4, phases, &eager_captures);
  const std::vector<unsigned char> replayed = train(true, 4, phases, &graph_captures);
  CHECK(eager_captures == 0);
  CHECK(graph_captures == 2);  // one per shape
  const std::string diff = first_difference(eager, replayed);
  CHECK_MESSAGE(diff.empty(), "graph replay vs eager: first difference at " << diff);
}

CUDA_TEST_CASE("capturable AdamW + GradScaler on CUDA: the eager results of the host-scalar path, and a device skip") {
  // The capturable path computes AdamW's scalars on the device (CUDA's pow): equal to the host's
  // float scalars but for a rare last-bit tie, so 5 steps agree to a few ulps.
  const std::vector<Phase> phases = {{1, 5, {1, 1, 16, 16, 16}, false}};
  std::vector<std::vector<float>> weights;
  for (bool capturable : {false, true}) {
    Run r(capturable);
    std::vector<bool> stepped;
    for (int64_t step = 1; step <= 5; ++step) {
      make_batch(step, phases[0].shape, step == 3, r.x, r.y);
      for (auto& g : r.opt->param_groups()) g.options().set_lr(lr_at(step));
      r.opt->zero_grad();
      r.buffers->capture();
      {
        amp::AutocastGuard autocast(true);
        r.loss = ops::segmentation_loss((*r.model)(r.x).to(kFloat32), r.y);
      }
      r.scaler->scale(r.loss).backward();
      if (capturable) {
        r.scaler->step(*r.opt);
        r.buffers->restore_if(r.scaler->device_found_inf(*r.opt));
      } else if (!r.scaler->step(*r.opt)) {
        r.buffers->restore();
      }
      r.scaler->update();
      stepped.push_back(!r.scaler->found_inf());
    }
    CHECK(stepped == std::vector<bool>{true, true, false, true, true});
    CHECK(r.scaler->skipped_steps() == 1);
    CHECK(r.scaler->get_scale() == 512.0);  // 1024, halved at step 3; the 2 clean steps after it do not grow it
    for (const auto& [name, p] : r.model->named_parameters()) {
      const auto* st = dynamic_cast<const optim::AdamWParamState*>(r.opt->param_state(p));
      REQUIRE(st != nullptr);
      CHECK(st->steps() == 4);
    }
    std::vector<float> w;
    for (const auto& [name, p] : r.model->named_parameters()) {
      const std::vector<float> v = p.to_float_vector();
      w.insert(w.end(), v.begin(), v.end());
    }
    for (const auto& [name, b] : r.model->named_buffers()) {
      if (!b.is_cuda()) continue;  // num_batches_tracked
      const std::vector<double> v = b.to_double_vector();
      for (double d : v) CHECK(std::isfinite(d));  // the skipped step's statistics were put back
    }
    weights.push_back(w);
  }
  REQUIRE(weights[0].size() == weights[1].size());
  double worst = 0;
  for (size_t i = 0; i < weights[0].size(); ++i)
    worst = std::max(worst, std::fabs(double(weights[0][i]) - weights[1][i]) / (1e-6 + std::fabs(double(weights[0][i]))));
  CHECK_MESSAGE(worst < 1e-5, "capturable vs host-scalar AdamW: worst relative difference " << worst);
  // For the record (README's --cuda-graph vs --no-cuda-graph): usually the very same bits.
  const std::string record = std::string("capturable vs host-scalar AdamW after 5 steps: ") +
                             (worst == 0 ? "bit-identical weights" : "weights differ, worst relative " + std::to_string(worst));
  MESSAGE(record);
}

CUDA_TEST_CASE("DeferredLabelCheck: a bad CUDA label is not read back by the loss, and check() throws naming it") {
  Generator gen(3);
  const Tensor logits = Tensor::randn({1, 3, 4, 4, 4}, gen).copy_to(Device::CUDA);
  std::vector<int64_t> lab(64, 1);
  lab[37] = 5;  // outside [0, 3)
  const Tensor y = Tensor::from_labels(lab, {1, 4, 4, 4}).copy_to(Device::CUDA);
  check_error([&] { (void)ops::segmentation_loss(logits, y); }, {"segmentation_loss", "5"});  // without the guard
  ops::DeferredLabelCheck deferred;
  (void)ops::segmentation_loss(logits, y);  // no throw, no wait
  check_error([&] { deferred.check("epoch 1"); }, {"epoch 1", "flat index 37"});
  deferred.check("epoch 2");  // cleared by the failed check
  const Tensor good = Tensor::from_labels(std::vector<int64_t>(64, 2), {1, 4, 4, 4}).copy_to(Device::CUDA);
  (void)ops::segmentation_loss(logits, good);
  deferred.check("epoch 3");
}
