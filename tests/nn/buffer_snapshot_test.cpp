// nn::BufferSnapshot (nn/buffer_snapshot.h): a step GradScaler skips changes nothing but the loss
// scale. A forward whose FP16 convolution overflows (input 1e5 > FP16's 65504 under autocast) folds
// inf/NaN batch statistics into BatchNorm's running statistics (pytorch#115500); restoring the
// snapshot when scaler.step reports the skip leaves them bit for bit as before, while a normal step
// still updates them. Run on the CPU and, where a GPU is usable, on CUDA.
#include "nn/buffer_snapshot.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "tests/cuda/cuda_test_case.h"

using namespace halfgrad;

namespace {

std::shared_ptr<nn::Sequential> conv_bn(Device device) {
  Generator gen(11);
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 1), gen));
  s->push_back(std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(2)));
  s->to(device);
  return s;
}

std::vector<std::vector<double>> buffer_values(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& kv : m.named_buffers()) out.push_back(kv.second.to_double_vector());
  return out;
}

bool all_finite(const std::vector<std::vector<double>>& v) {
  for (const auto& b : v)
    for (double d : b)
      if (!std::isfinite(d)) return false;
  return true;
}

// One training step under autocast (FP16 conv); returns whether scaler.step ran the optimizer.
bool train_step(nn::Module& m, optim::SGD& opt, amp::GradScaler& scaler, nn::BufferSnapshot* snap, double x_value,
                Device device) {
  Generator g(3);
  Tensor x = Tensor::uniform({2, 1, 2, 2, 2}, 0.5, 1.0, g);
  x = ops::mul(x, Tensor::scalar(x_value)).detach();
  x = x.copy_to(device);
  if (snap) snap->capture();
  opt.zero_grad();
  Tensor loss;
  {
    amp::AutocastGuard autocast;
    loss = ops::mean(m(x)).to(kFloat32);
  }
  scaler.scale(loss).backward();
  const bool stepped = scaler.step(opt);
  if (!stepped && snap) snap->restore();
  scaler.update();
  return stepped;
}

void check_skip_rule(Device device) {
  SUBCASE("without the snapshot the overflowing forward leaves the running statistics non-finite") {
    auto m = conv_bn(device);
    optim::SGD opt(m->parameters(), optim::SGDOptions(0.1));
    amp::GradScaler scaler;
    CHECK_FALSE(train_step(*m, opt, scaler, nullptr, 1e5, device));
    CHECK_FALSE(all_finite(buffer_values(*m)));  // the behaviour of pytorch#115500
  }
  SUBCASE("with the snapshot a skipped step leaves them exactly as before; a normal step updates them") {
    auto m = conv_bn(device);
    optim::SGD opt(m->parameters(), optim::SGDOptions(0.1));
    amp::GradScaler scaler;
    nn::BufferSnapshot snap(*m);
    CHECK(snap.size() == 3);                                   // running_mean, running_var, num_batches_tracked
    CHECK(snap.nbytes() == 2 * 4 + 2 * 4 + 8);
    REQUIRE(train_step(*m, opt, scaler, &snap, 1.0, device));  // a normal step first: stats move off 0 / 1
    const auto before = buffer_values(*m);
    const double scale_before = scaler.get_scale();
    CHECK_FALSE(train_step(*m, opt, scaler, &snap, 1e5, device));  // overflows in the FP16 conv: skipped
    CHECK(scaler.get_scale() == scale_before / 2);                  // the one thing a skip changes
    CHECK(buffer_values(*m) == before);                             // bit for bit, num_batches_tracked too
    REQUIRE(train_step(*m, opt, scaler, &snap, 1.0, device));
    const auto after = buffer_values(*m);
    CHECK(all_finite(after));
    CHECK(after != before);
    CHECK(after[2][0] == before[2][0] + 1);  // num_batches_tracked counts the normal step only
  }
}

}  // namespace

TEST_CASE("nn BufferSnapshot cpu: a step GradScaler skips leaves BatchNorm's running statistics as before") {
  check_skip_rule(Device::CPU);
}

CUDA_TEST_CASE("nn BufferSnapshot cuda: a step GradScaler skips leaves BatchNorm's running statistics as before") {
  check_skip_rule(Device::CUDA);
}

TEST_CASE("nn BufferSnapshot: a module whose buffers changed dtype is refused, naming the buffer") {
  auto m = conv_bn(Device::CPU);
  nn::BufferSnapshot snap(*m);
  m->to(kFloat16);
  CHECK_THROWS_WITH_AS(snap.restore(), doctest::Contains("buffer '1.running_mean' is now [2] float16"), Error);
  nn::Sequential empty;
  nn::BufferSnapshot none(empty);
  none.capture();
  none.restore();
  CHECK(none.nbytes() == 0);
}
