// Anomaly mode: the first op whose forward output or backward gradient is non-finite is named, with
// its inputs' dtypes, shapes and value ranges; off, nothing is checked.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autograd/anomaly.h"
#include "core/error.h"
#include "core/half.h"
#include "ops/conv/conv3d.h"
#include "ops/activation/activation.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm.h"
#include "ops/pool/max_pool3d.h"
#include "ops/reduce/reduce.h"

using namespace halfgrad;
using autograd::DetectAnomalyGuard;

namespace {

// The message of the halfgrad::Error `f` throws ("" if it does not throw).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("anomaly: summarize_values float16 [5] counts NaN and signed infs, range over finite values") {
  const uint16_t bits[] = {float_to_half_bits(-2.5f), float_to_half_bits(0.5f), 0x7c00, 0xfc00, 0x7e00};
  Tensor t = Tensor::empty({5}, kFloat16);
  for (int i = 0; i < 5; ++i) t.data<uint16_t>()[i] = bits[i];
  const autograd::ValueSummary s = autograd::summarize_values(t);
  CHECK(s.numel == 5);
  CHECK(s.nan == 1);
  CHECK(s.pos_inf == 1);
  CHECK(s.neg_inf == 1);
  CHECK(s.min == -2.5);
  CHECK(s.max == 0.5);
  CHECK_FALSE(s.finite());
  CHECK(autograd::describe_values(t) == "float16 [5], finite range [-2.5, 0.5], 1 NaN, 1 +inf, 1 -inf");
  CHECK(autograd::describe_values(Tensor()) == "undefined");
  CHECK(autograd::describe_values(Tensor::full({2}, NAN)) == "float32 [2], no finite value, 2 NaN, 0 +inf, 0 -inf");
}

TEST_CASE("anomaly: off by default, a NaN forward and backward pass silently") {
  CHECK_FALSE(autograd::anomaly_mode_enabled());
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1}, {2}).set_requires_grad(true);
  Tensor y = ops::log(x);  // log 0 = -inf
  CHECK(std::isinf(y.item_at(0)));
  ops::sum(y).backward();  // d log / dx at 0 = inf
  CHECK(std::isinf(x.grad().item_at(0)));
}

TEST_CASE("anomaly: forward of log float32 [2] producing -inf names the op and its finite input") {
  Tensor x = Tensor::from_vector(std::vector<float>{0, 4}, {2}).set_requires_grad(true);
  DetectAnomalyGuard anomaly;
  CHECK(autograd::anomaly_mode_enabled());
  const std::string msg = error_of([&] { ops::log(x); });
  CHECK(contains(msg, "anomaly mode: forward of log produced inf in its output float32 [2]"));
  CHECK(contains(msg, "1 -inf"));
  CHECK(contains(msg, "input 0 float32 [2], finite range [0, 4], 0 NaN"));
  CHECK(contains(msg, "Every input is finite, so log made the first non-finite value"));
}

TEST_CASE("anomaly: float16 [2] mul overflowing 65504 is caught, also under NoGradGuard") {
  Tensor a = Tensor::from_vector(std::vector<float>{300, 1}, {2}, kFloat16);
  Tensor b = Tensor::from_vector(std::vector<float>{300, 2}, {2}, kFloat16);
  DetectAnomalyGuard anomaly;
  NoGradGuard no_grad;  // nothing is recorded, but the forward check still runs
  const std::string msg = error_of([&] { ops::mul(a, b); });
  CHECK(contains(msg, "forward of mul produced inf in its output float16 [2]"));
  CHECK(contains(msg, "input 0 (a) float16 [2], finite range [1, 300]"));
  CHECK(contains(msg, "input 1 (b) float16 [2]"));
  CHECK(contains(msg, "float16 overflows to inf above 65504"));
  // The precision table's row names the op's list and how to move it to FP32.
  CHECK(contains(msg, "mul is on autocast's promote list"));
  CHECK(contains(msg, "amp::set_op_fp32(amp::OpKind::Mul, true) / --fp32-op mul"));
}

TEST_CASE("anomaly: a non-finite input that came from outside the tape is called upstream") {
  Tensor x = Tensor::from_vector(std::vector<float>{NAN, 1}, {2});
  DetectAnomalyGuard anomaly;
  const std::string msg = error_of([&] { ops::exp(x); });
  CHECK(contains(msg, "forward of exp produced NaN"));
  CHECK(contains(msg, "input 0 already held non-finite values"));
}

TEST_CASE("anomaly: backward of conv3d float16 (1,1,4,4,4) x (2,1,3,3,3) overflowing the weight gradient "
          "names input 1 (weight)") {
  // dW = sum over the 2x2x2 output positions of x * dy = 8 * 1000 * 1000 = 8e6 > 65504: inf in FP16,
  // while the forward (27 * 1000 * 0.01 = 270) and dX are finite.
  Tensor x = Tensor::full({1, 1, 4, 4, 4}, 1000.0, kFloat16);
  Tensor w = Tensor::full({2, 1, 3, 3, 3}, 0.01, kFloat16).set_requires_grad(true);
  DetectAnomalyGuard anomaly;
  Tensor y = ops::conv3d(x, w, Tensor());
  CHECK(y.dtype() == kFloat16);
  const std::string msg = error_of([&] { y.backward(Tensor::full(y.shape(), 1000.0, kFloat16)); });
  CHECK(contains(msg, "anomaly mode: backward of conv3d produced inf in input 1 (weight): float16 [2, 1, 3, 3, 3]"));
  CHECK(contains(msg, "from the finite incoming gradient float16 [1, 2, 2, 2, 2], finite range [1000, 1000]"));
  CHECK(contains(msg, "forward inputs: input 0 (input) float16 [1, 1, 4, 4, 4]"));
  CHECK(contains(msg, "Under GradScaler an inf/NaN gradient is expected"));
}

TEST_CASE("anomaly: a non-finite gradient passed to backward() is caught at the first node") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  DetectAnomalyGuard anomaly;
  Tensor y = x * 2.0;
  const std::string msg = error_of([&] { y.backward(Tensor::from_vector(std::vector<float>{1, INFINITY}, {2})); });
  CHECK(contains(msg, "the gradient flowing into backward of affine holds inf: float32 [2]"));
}

TEST_CASE("anomaly: guards nest and restore; after the guard nothing is checked") {
  Tensor x = Tensor::from_vector(std::vector<float>{0}, {1});
  {
    DetectAnomalyGuard on;
    {
      DetectAnomalyGuard off(false);
      CHECK_FALSE(autograd::anomaly_mode_enabled());
      CHECK_NOTHROW(ops::log(x));
    }
    CHECK(autograd::anomaly_mode_enabled());
    CHECK_THROWS_AS(ops::log(x), Error);
  }
  CHECK_FALSE(autograd::anomaly_mode_enabled());
  CHECK_NOTHROW(ops::log(x));
}

TEST_CASE("anomaly: finite float32 training step passes unchanged") {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
  DetectAnomalyGuard anomaly;
  ops::sum(ops::log(x) * x).backward();  // d/dx (x log x) = log x + 1
  CHECK(x.grad().item_at(2) == doctest::Approx(std::log(3.0) + 1));
}

TEST_CASE("autograd: forward hooks see every op, recorded or not, and not ops run inside a hook") {
  std::vector<std::string> seen;
  const int id = autograd::add_forward_hook([&seen](const char* op, const Tensor& out, const std::vector<Tensor>& in) {
    seen.push_back(op);
    (void)ops::exp(out);  // an op inside a hook: not observed (no recursion)
  });
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor y = ops::log(x);
  {
    NoGradGuard no_grad;
    (void)ops::mul(y, y);
  }
  autograd::remove_forward_hook(id);
  (void)ops::exp(x);
  CHECK(seen == std::vector<std::string>{"log", "mul"});
}

// The U-Net's block order, conv3d -> batch_norm -> relu -> max_pool3d -> sum, with the NaN born in the
// batch_norm: output channel 1 of the conv has a zero weight, so it is constant (its bias), and eps 0
// makes its invstd 1/sqrt(0) = inf and (x - mean) * inf = 0 * inf = NaN (PyTorch gives the same NaN).
// relu and max_pool3d pass the NaN on; the error must name batch_norm, where it appeared.
TEST_CASE("anomaly: NaN first made by batch_norm float32 (1,2,4,4,4) eps 0 in a conv/bn/relu/pool chain names batch_norm") {
  Generator gen(3);
  Tensor x = Tensor::randn({1, 1, 4, 4, 4}, gen);
  Tensor w = Tensor::randn({2, 1, 3, 3, 3}, gen, kFloat32, 0.3);
  for (int64_t i = 27; i < 54; ++i) w.data<float>()[i] = 0.0f;  // output channel 1
  w.set_requires_grad(true);
  const Tensor b = Tensor::from_vector(std::vector<float>{0.1f, 0.2f}, {2});
  DetectAnomalyGuard anomaly;
  Tensor h = ops::conv3d(x, w, b, ops::Conv3dParams().padding(1));  // finite: no error here
  const std::string msg = error_of([&] {
    Tensor y = ops::batch_norm(h, Tensor(), Tensor(), Tensor(), Tensor(), ops::BatchNormParams().eps(0.0));
    ops::sum(ops::max_pool3d(ops::relu(y), 2, 2)).backward();
  });
  CHECK(contains(msg, "anomaly mode: forward of batch_norm produced NaN in its output float32 [1, 2, 4, 4, 4]"));
  CHECK(contains(msg, "64 NaN"));  // channel 1 only
  CHECK(contains(msg, "Every input is finite, so batch_norm made the first non-finite value"));
  CHECK(!contains(msg, "relu"));
  CHECK(!contains(msg, "max_pool3d"));
}

// A backward whose first non-finite gradient is made by batch_norm: the seed 1e37 passes sum and relu
// finite, and batch_norm's dx = w * invstd * (dy - ...) with invstd ~ 100 (std ~ 0.01) overflows float32.
TEST_CASE("anomaly: backward of batch_norm float32 (1,2,2,2,2) overflowing dx names batch_norm input 0, not sum or relu") {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = 0.01f * static_cast<float>((i * 7) % 5 - 2);
  Tensor x = Tensor::from_vector(v, {1, 2, 2, 2, 2}).set_requires_grad(true);
  DetectAnomalyGuard anomaly;
  Tensor loss = ops::sum(ops::relu(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor())));
  const std::string msg = error_of([&] { loss.backward(Tensor::scalar(1e37, kFloat32)); });
  CHECK(contains(msg, "anomaly mode: backward of batch_norm produced"));
  CHECK(contains(msg, "in input 0 (input): float32 [1, 2, 2, 2, 2]"));
  CHECK(contains(msg, "from the finite incoming gradient float32 [1, 2, 2, 2, 2]"));
  CHECK(!contains(msg, "backward of relu"));
  CHECK(!contains(msg, "backward of sum"));
}
