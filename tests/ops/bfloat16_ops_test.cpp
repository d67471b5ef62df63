// Every CPU op family takes BFloat16 as it takes Float16: the inputs are widened to FP32, the op
// computes in FP32, and the result is rounded once to bfloat16 (ops/common.h). Each case runs an op
// on bfloat16 inputs and on the same values in float32, and checks the bf16 output and the bf16
// input gradients against the FP32 ones within bfloat16's tolerance: the forward rounds once
// (|err| <= 2^-8 |ref| plus a little for the summed ops), the backward reads rounded saved tensors
// and rounds its result, so it gets 2^-6 of the gradient's scale.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "ops/ops.h"

using namespace halfgrad;

namespace {

struct OpCase {
  const char* name;
  std::vector<Shape> shapes;  // the floating inputs, each randn (or |randn| + 0.5 when positive)
  bool positive;
  std::function<Tensor(const std::vector<Tensor>&)> f;
};

const Tensor& labels_2x4x3x3x3() {
  static const Tensor t = [] {
    std::vector<int64_t> v(2 * 3 * 3 * 3);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + 3) % 4);
    return Tensor::from_labels(v, {2, 3, 3, 3});
  }();
  return t;
}

const Shape k5 = {2, 4, 3, 3, 3};  // (N, C, D, H, W)

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> c = {
      {"add", {k5, k5}, false, [](const auto& in) { return ops::add(in[0], in[1]); }},
      {"sub", {k5, {1, 4, 1, 1, 1}}, false, [](const auto& in) { return ops::sub(in[0], in[1]); }},
      {"mul", {k5, k5}, false, [](const auto& in) { return ops::mul(in[0], in[1]); }},
      {"div", {k5, k5}, true, [](const auto& in) { return ops::div(in[0], in[1]); }},
      {"affine", {k5}, false, [](const auto& in) { return ops::affine(in[0], 0.5, -1.0); }},
      {"neg", {k5}, false, [](const auto& in) { return ops::neg(in[0]); }},
      {"exp", {k5}, false, [](const auto& in) { return ops::exp(in[0]); }},
      {"log", {k5}, true, [](const auto& in) { return ops::log(in[0]); }},
      {"pow", {k5}, true, [](const auto& in) { return ops::pow(in[0], 2.5); }},
      {"relu", {k5}, false, [](const auto& in) { return ops::relu(in[0]); }},
      {"leaky_relu", {k5}, false, [](const auto& in) { return ops::leaky_relu(in[0], 0.1); }},
      {"sigmoid", {k5}, false, [](const auto& in) { return ops::sigmoid(in[0]); }},
      {"tanh", {k5}, false, [](const auto& in) { return ops::tanh(in[0]); }},
      {"silu", {k5}, false, [](const auto& in) { return ops::silu(in[0]); }},
      {"gelu", {k5}, false, [](const auto& in) { return ops::gelu(in[0]); }},
      {"sum(dims 2,3,4)", {k5}, false, [](const auto& in) { return ops::sum(in[0], {2, 3, 4}); }},
      {"mean", {k5}, false, [](const auto& in) { return ops::mean(in[0]); }},
      {"softmax(1)", {k5}, false, [](const auto& in) { return ops::softmax(in[0], 1); }},
      {"log_softmax(1)", {k5}, false, [](const auto& in) { return ops::log_softmax(in[0], 1); }},
      {"batch_norm", {k5}, false,
       [](const auto& in) {
         const Tensor w = Tensor::full({4}, 1.5), b = Tensor::full({4}, 0.25);  // FP32 affine, as the layers keep it
         return ops::batch_norm(in[0], Tensor(), Tensor(), w, b);
       }},
      {"instance_norm", {k5}, false, [](const auto& in) { return ops::instance_norm(in[0], Tensor(), Tensor()); }},
      {"max_pool3d", {{2, 4, 4, 4, 4}}, false, [](const auto& in) { return ops::max_pool3d(in[0], 2, 2); }},
      {"cross_entropy", {k5}, false, [](const auto& in) { return ops::cross_entropy(in[0], labels_2x4x3x3x3()); }},
      {"soft_dice_loss", {k5}, false, [](const auto& in) { return ops::soft_dice_loss(in[0], labels_2x4x3x3x3()); }},
      {"cat(1)", {k5, {2, 2, 3, 3, 3}}, false, [](const auto& in) { return ops::cat({in[0], in[1]}, 1); }},
      {"reshape", {k5}, false, [](const auto& in) { return ops::reshape(in[0], {8, 27}); }},
      {"matmul", {{5, 7}, {7, 3}}, false, [](const auto& in) { return ops::matmul(in[0], in[1]); }},
      {"linear", {{6, 8}, {5, 8}, {5}}, false, [](const auto& in) { return ops::linear(in[0], in[1], in[2]); }},
      {"conv3d", {{2, 3, 5, 5, 5}, {4, 3, 3, 3, 3}, {4}}, false,
       [](const auto& in) { return ops::conv3d(in[0], in[1], in[2], ops::Conv3dParams().padding(1)); }},
      {"conv_transpose3d", {{2, 3, 3, 3, 3}, {3, 2, 2, 2, 2}, {2}}, false,
       [](const auto& in) { return ops::conv_transpose3d(in[0], in[1], in[2], ops::Conv3dParams().stride(2)); }},
  };
  return c;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// |got - ref| <= atol_frac * max|ref| + rtol * |ref| elementwise.
void check_close(const std::string& what, const Tensor& got, const Tensor& ref, double atol_frac, double rtol) {
  REQUIRE_MESSAGE(got.shape() == ref.shape(), what);
  const std::vector<double> g = got.to_double_vector(), r = ref.to_double_vector();
  const double atol = atol_frac * max_abs(r) + 1e-30;
  int64_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - r[i]) <= atol + rtol * std::fabs(r[i]))) {
      if (bad++ == 0) first = i;
    }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << g.size() << " elements off; first [" << first << "] "
                               << (g.empty() ? 0.0 : g[first]) << " vs " << (r.empty() ? 0.0 : r[first]));
}

}  // namespace

TEST_CASE("ops: every op family takes bfloat16 on the CPU and matches float32 within bf16 tolerance") {
  for (const OpCase& c : cases()) {
    CAPTURE(c.name);
    Generator gen(1234);
    std::vector<Tensor> xb, xf;
    for (const Shape& s : c.shapes) {
      Tensor x = Tensor::randn(s, gen, kFloat32);
      if (c.positive) x = ops::affine(ops::relu(x), 1.0, 0.5).detach();
      const Tensor b = x.cast_copy(kBFloat16);
      xb.push_back(b.detach().set_requires_grad(true));
      xf.push_back(b.cast_copy(kFloat32).set_requires_grad(true));  // the same values, in FP32
    }
    const Tensor yb = c.f(xb), yf = c.f(xf);
    CHECK_MESSAGE(yb.dtype() == kBFloat16, c.name << " gave " << dtype_name(yb.dtype()));
    check_close(std::string(c.name) + " forward", yb, yf, 1.0 / 1024, 1.0 / 128);

    const Tensor seed = Tensor::randn(yf.shape(), gen, kFloat32).cast_copy(kBFloat16);
    yb.backward(seed);
    yf.backward(seed.cast_copy(kFloat32));
    for (size_t i = 0; i < xb.size(); ++i) {
      REQUIRE(xb[i].grad().defined());
      CHECK(xb[i].grad().dtype() == kBFloat16);
      check_close(std::string(c.name) + " grad of input " + std::to_string(i), xb[i].grad(), xf[i].grad(), 1.0 / 64,
                  1.0 / 64);
    }
  }
}

TEST_CASE("ops: bfloat16 with float16 or float32 operands promotes as PyTorch (bf16 + f16 -> f32)") {
  const Tensor b = Tensor::full({3}, 1.5, kBFloat16), h = Tensor::full({3}, 0.25, kFloat16);
  const Tensor f = Tensor::full({3}, 2.0, kFloat32);
  CHECK(ops::add(b, h).dtype() == kFloat32);
  CHECK(ops::add(b, h).item_at(0) == 1.75);
  CHECK(ops::mul(b, f).dtype() == kFloat32);
  CHECK(ops::add(b, b).dtype() == kBFloat16);
  CHECK(ops::cat({b, h}, 0).dtype() == kFloat32);
}

TEST_CASE("ops: bfloat16 keeps values beyond FP16's range (exp(20), 1e-10)") {
  const Tensor x = Tensor::from_vector(std::vector<float>{20.0f, -23.0f}, {2}, kBFloat16);
  const Tensor y = ops::exp(x);
  CHECK(y.dtype() == kBFloat16);
  CHECK(std::isfinite(y.item_at(0)));  // 4.85e8: inf in FP16
  CHECK(y.item_at(0) == doctest::Approx(std::exp(20.0)).epsilon(1.0 / 128));
  CHECK(y.item_at(1) > 0);  // 1.03e-10: zero in FP16
}
