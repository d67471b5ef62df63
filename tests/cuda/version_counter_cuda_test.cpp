// Version counters on CUDA tensors (core/tensor.h): the CUDA paths of the in-place APIs bump them
// as the CPU ones do (fill_, copy_from, the fused SGD / AdamW steps, GradScaler::unscale_,
// clip_grad_norm_, backward's .grad accumulation, batch_norm's running statistics), and backward
// refuses a saved CUDA tensor written since the forward (conv3d channels-last FP16, relu, softmax,
// the fused loss). The CPU twin is tests/autograd/version_counter_test.cpp.
#include "tests/cuda/cuda_test.h"

#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/node.h"
#include "tests/check_error.h"
#include "core/error.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

using namespace halfgrad;
using testing::check_error;
using testing::random_tensor;
using testing::to_cuda;

CUDA_TEST_CASE("version cuda: float32 and float16 fill_, zero_, copy_from bump once; views share; copies start at 0") {
  for (Dtype dt : {kFloat32, kFloat16}) {
    CAPTURE(dtype_name(dt));
    Tensor t = Tensor::zeros({2, 3, 4, 4, 4}, dt, Device::CUDA, MemoryFormat::ChannelsLast3d);
    CHECK(t.version() == 0);
    (void)t.to_float_vector();
    CHECK(t.version() == 0);
    Tensor view = t.view_as_shape(t.shape());
    t.fill_(1.5);
    CHECK(view.version() == 1);
    view.zero_();
    CHECK(t.version() == 2);
    t.copy_from(random_tensor({2, 3, 4, 4, 4}, 1));  // host NCDHW float32 -> device NDHWC
    CHECK(t.version() == 3);
    CHECK(t.detach().version() == 3);
    CHECK(t.copy_to(Device::CPU).version() == 0);
    CHECK(t.format_copy(MemoryFormat::Contiguous).version() == 0);
    CHECK(Tensor::ones({4}, dt, Device::CUDA).version() == 0);
  }
}

CUDA_TEST_CASE("version cuda: fused SGD and AdamW steps (float32, float16 with master) bump parameters and state") {
  Tensor p32 = to_cuda(random_tensor({8, 4, 3, 3, 3}, 2), MemoryFormat::ChannelsLast3d).set_requires_grad(true);
  Tensor p16 = to_cuda(random_tensor({70}, 3, kFloat16)).set_requires_grad(true);
  Tensor none = to_cuda(random_tensor({5}, 4)).set_requires_grad(true);  // no gradient: untouched
  optim::SGD sgd({p32, p16, none}, optim::SGDOptions(0.1).momentum(0.9));
  p32.set_grad(to_cuda(random_tensor({8, 4, 3, 3, 3}, 5)));
  p16.set_grad(to_cuda(random_tensor({70}, 6, kFloat16)));
  sgd.step();
  sgd.step();
  CHECK(p32.version() == 2);
  CHECK(p16.version() == 2);
  CHECK(none.version() == 0);
  REQUIRE(sgd.param_state(p16) != nullptr);
  CHECK(sgd.param_state(p16)->master.version() == 1);  // made by step 1, written by step 2

  Tensor w = to_cuda(random_tensor({33}, 7)).set_requires_grad(true);
  optim::AdamW adamw({w}, optim::AdamWOptions(1e-3));
  w.set_grad(to_cuda(random_tensor({33}, 8)));
  adamw.step();
  adamw.step();
  adamw.step();
  CHECK(w.version() == 3);
  const auto* st = dynamic_cast<const optim::AdamWParamState*>(adamw.param_state(w));
  REQUIRE(st != nullptr);
  CHECK(st->exp_avg.version() == 2);
  CHECK(st->exp_avg_sq.version() == 2);
}

CUDA_TEST_CASE("version cuda: backward accumulation, GradScaler::unscale_ and clip_grad_norm_ bump float32 .grad") {
  Tensor p = to_cuda(random_tensor({64}, 9)).set_requires_grad(true);
  const Tensor c = to_cuda(random_tensor({64}, 19));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(8.0));
  scaler.scale(ops::sum(ops::mul(p, c))).backward();
  const Tensor g = p.grad();
  CHECK(g.version() == 0);  // the first contribution is a new tensor
  scaler.scale(ops::sum(ops::mul(p, c))).backward();
  CHECK(g.version() == 1);  // cuda::accumulate into it
  optim::SGD sgd({p}, optim::SGDOptions(0.1));
  scaler.unscale_(sgd);
  CHECK(g.version() == 2);
  optim::clip_grad_norm_({p}, 1e-3);
  CHECK(g.version() == 3);
  scaler.step(sgd);  // the fused step with the device found_inf flag: counted whatever the flag says
  CHECK(p.version() == 1);
}

CUDA_TEST_CASE("version cuda: batch_norm float16 NDHWC training bumps float32 running stats; evaluation does not") {
  Tensor x = to_cuda(random_tensor({2, 4, 4, 4, 4}, 10, kFloat16), MemoryFormat::ChannelsLast3d);
  Tensor rm = Tensor::zeros({4}, kFloat32, Device::CUDA), rv = Tensor::ones({4}, kFloat32, Device::CUDA);
  Tensor w = Tensor::ones({4}, kFloat32, Device::CUDA), b = Tensor::zeros({4}, kFloat32, Device::CUDA);
  ops::batch_norm(x, rm, rv, w, b, ops::BatchNormParams().training(true));
  CHECK(rm.version() == 1);
  CHECK(rv.version() == 1);
  ops::batch_norm(x, rm, rv, w, b, ops::BatchNormParams().training(false));
  CHECK(rm.version() == 1);
  CHECK(rv.version() == 1);
}

CUDA_TEST_CASE("version cuda: conv3d float16 NDHWC weight [16, 4, 3, 3, 3] modified after the forward throws") {
  Tensor x = to_cuda(random_tensor({1, 4, 6, 6, 6}, 11, kFloat16), MemoryFormat::ChannelsLast3d).set_requires_grad(true);
  Tensor w = to_cuda(random_tensor({16, 4, 3, 3, 3}, 12, kFloat16), MemoryFormat::ChannelsLast3d).set_requires_grad(true);
  Tensor loss = ops::sum(ops::conv3d(x, w, Tensor()));
  {
    NoGradGuard ng;
    w.fill_(0.0);
  }
  check_error([&] { loss.backward(); },
              {"conv3d backward: a tensor saved for gradient computation (input 1 'weight', [16, 4, 3, 3, 3] float16) "
               "has been modified by an in-place operation: it is at version 1, expected version 0"});
}

CUDA_TEST_CASE("version cuda: relu and softmax float32 outputs, and the fused loss's int64 target, are checked") {
  Tensor x = to_cuda(random_tensor({2, 3, 4, 4, 4}, 13)).set_requires_grad(true);
  Tensor y = ops::relu(x);
  Tensor loss = ops::sum(ops::mul(y, to_cuda(random_tensor({2, 3, 4, 4, 4}, 14))));
  y.fill_(0.0);
  check_error([&] { loss.backward(); }, {"relu backward", "the op's output, [2, 3, 4, 4, 4] float32", "version 1, expected version 0"});

  Tensor s = ops::softmax(x, 1);
  Tensor loss_s = ops::sum(ops::mul(s, to_cuda(random_tensor({2, 3, 4, 4, 4}, 15))));
  s.copy_from(random_tensor({2, 3, 4, 4, 4}, 16));
  check_error([&] { loss_s.backward(); }, {"softmax backward", "the op's output", "version 1, expected version 0"});

  std::vector<int64_t> lab(2 * 64);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<int64_t>(i % 3);
  Tensor target = Tensor::from_labels(lab, {2, 4, 4, 4}).copy_to(Device::CUDA);
  Tensor loss_l = ops::segmentation_loss(x, target);
  target.fill_(1);
  check_error([&] { loss_l.backward(); },
              {"segmentation_loss backward", "'target', [2, 4, 4, 4] int64", "version 1, expected version 0"});
}

CUDA_TEST_CASE("version cuda: autocast weight cache float32 [8, 4]: a weight written inside the region is cast again") {
  Tensor w = Tensor::ones({8, 4}, kFloat32, Device::CUDA).set_requires_grad(true);
  const Tensor x = Tensor::ones({2, 8}, kFloat32, Device::CUDA);
  amp::AutocastGuard on;
  Tensor y1 = ops::matmul(x, w);
  CHECK(y1.dtype() == kFloat16);
  CHECK(y1.item_at(0) == 8.0);
  {
    NoGradGuard ng;
    w.fill_(0.5);
  }
  Tensor y2 = ops::matmul(x, w);
  CHECK(y2.item_at(0) == 4.0);  // a stale FP16 copy of the ones would give 8
  ops::sum(y1).backward();      // y1's graph saved its own FP16 copy, unmodified
  CHECK(w.grad().item_at(0) == 2.0);
}
