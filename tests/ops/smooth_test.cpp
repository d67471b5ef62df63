// sigmoid, tanh, silu, gelu (exact and tanh): float64 gradchecks, PyTorch golden values in float32
// and float64 (tests/golden/activation.json, from `/usr/bin/python3 tools/golden/make_golden.py`,
// torch 1.13), float16 in float16 out (also under autocast), the FP32 allow-list, and non-finite
// inputs as PyTorch.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "nn/activation.h"
#include "ops/activation/smooth.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

struct SmoothOp {
  const char* golden;  // the case name in activation.json
  std::function<Tensor(const Tensor&)> f;
};
const SmoothOp kOps[] = {
    {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }},
    {"tanh", [](const Tensor& x) { return ops::tanh(x); }},
    {"silu", [](const Tensor& x) { return ops::silu(x); }},
    {"gelu", [](const Tensor& x) { return ops::gelu(x); }},
    {"gelu_tanh", [](const Tensor& x) { return ops::gelu(x, ops::GeluApproximate::Tanh); }},
};
}  // namespace

TEST_CASE("ops: sigmoid/tanh/silu/gelu float64 gradcheck (2, 3, 4, 5)") {
  Generator g(31);
  Tensor x = leaf(Tensor::randn({2, 3, 4, 5}, g, kFloat64, 2.0));
  for (const SmoothOp& op : kOps) {
    SUBCASE(op.golden) {
      auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return op.f(in[0]); }, {x});
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: sigmoid/tanh/silu/gelu float32 and float64 (2, 3, 3, 4, 5) match PyTorch: y, dx") {
  for (const SmoothOp& op : kOps)
    for (const bool f64 : {false, true}) {
      const std::string name = std::string(op.golden) + (f64 ? "_f64" : "");
      SUBCASE(name.c_str()) {
        const GoldenCase c = load_golden("activation.json").at(name);
        const Dtype dt = f64 ? kFloat64 : kFloat32;
        Tensor x = leaf(c.input("x", dt));
        Tensor y = op.f(x);
        CHECK(y.dtype() == dt);
        y.backward(c.input("gy", dt));
        check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
        check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
      }
    }
}

TEST_CASE("ops: sigmoid/tanh/silu/gelu float16 (2, 3, 3, 4, 5) stay float16 under autocast; --fp32-op moves them") {
  for (const SmoothOp& op : kOps) {
    SUBCASE(op.golden) {
      const GoldenCase c = load_golden("activation.json").at(op.golden);
      amp::AutocastGuard ac;
      Tensor xh = leaf(c.input("x").cast_copy(kFloat16));
      Tensor y = op.f(xh);
      CHECK(y.dtype() == kFloat16);
      check_close(y, c.output("y"), tolerance_for(kFloat16), c.where() + " fp16 y");
      y.backward(c.input("gy"));
      CHECK(xh.grad().dtype() == kFloat16);
      check_close(xh.grad(), c.grad("x"), tolerance_for(kFloat16), c.where() + " fp16 dx");
      // On the FP32 list (an allow-list entry) the FP16 input is cast up and the result is FP32.
      const amp::OpKind kind = amp::op_kind_from_name(std::string(op.golden) == "gelu_tanh" ? "gelu" : op.golden);
      const bool prev = amp::set_op_fp32(kind, true);
      Tensor y32 = op.f(xh);
      amp::set_op_fp32(kind, prev);
      CHECK(y32.dtype() == kFloat32);
    }
  }
}

TEST_CASE("ops: sigmoid/tanh/silu/gelu of NaN and +-inf as PyTorch (float32 [5])") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // torch 1.13: y at (nan, inf, -inf, 0, 1e30) and dx for dy = 1; NaN written as nan.
  struct Expect {
    const char* name;
    std::vector<float> y, dx;
  };
  const Expect kExpect[] = {
      {"sigmoid", {nan, 1.f, 0.f, 0.5f, 1.f}, {nan, 0.f, 0.f, 0.25f, 0.f}},
      {"tanh", {nan, 1.f, -1.f, 0.f, 1.f}, {nan, 0.f, 0.f, 1.f, 0.f}},
      {"silu", {nan, inf, nan, 0.f, 1e30f}, {nan, nan, nan, 0.5f, 1.f}},
      {"gelu", {nan, inf, nan, 0.f, 1e30f}, {nan, nan, nan, 0.5f, 1.f}},
  };
  for (const Expect& e : kExpect) {
    SUBCASE(e.name) {
      Tensor x = leaf(Tensor::from_vector(std::vector<float>{nan, inf, -inf, 0.f, 1e30f}, {5}));
      const SmoothOp* op = nullptr;
      for (const SmoothOp& o : kOps)
        if (std::string(o.golden) == e.name) op = &o;
      REQUIRE(op);
      Tensor y = op->f(x);
      y.backward(Tensor::ones({5}));
      const std::vector<float> yv = y.to_float_vector(), gv = x.grad().to_float_vector();
      for (size_t i = 0; i < 5; ++i) {
        CAPTURE(i);
        if (std::isnan(e.y[i])) CHECK(std::isnan(yv[i]));
        else CHECK(yv[i] == e.y[i]);
        if (std::isnan(e.dx[i])) CHECK(std::isnan(gv[i]));
        else CHECK(gv[i] == doctest::Approx(e.dx[i]));
      }
    }
  }
}

TEST_CASE("ops: sigmoid of an int64 tensor is an error naming the op") {
  const Tensor x = Tensor::from_labels({1, 2}, {2});
  CHECK_THROWS_WITH_AS(ops::sigmoid(x), doctest::Contains("sigmoid"), Error);
}

TEST_CASE("nn: Sigmoid/Tanh/SiLU/GELU layers are the ops; GELU checks its approximate option") {
  Generator g(5);
  const Tensor x = Tensor::randn({2, 3, 4}, g);
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.to_float_vector() == b.to_float_vector() && a.shape() == b.shape();
  };
  CHECK(same(nn::Sigmoid()(x), ops::sigmoid(x)));
  CHECK(same(nn::Tanh()(x), ops::tanh(x)));
  CHECK(same(nn::SiLU()(x), ops::silu(x)));
  CHECK(same(nn::GELU()(x), ops::gelu(x)));
  CHECK(same(nn::GELU(nn::GELUOptions().approximate("tanh"))(x), ops::gelu(x, ops::GeluApproximate::Tanh)));
  CHECK(nn::GELU(nn::GELUOptions().approximate("tanh")).extra_repr() == "approximate='tanh'");
  CHECK_THROWS_WITH_AS(nn::GELU(nn::GELUOptions().approximate("erf")), doctest::Contains("approximate must be"), Error);
}
