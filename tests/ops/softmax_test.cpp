// softmax and log_softmax: gradchecks (float64), PyTorch golden values (tests/golden/activation.json,
// from `/usr/bin/python3 tools/golden/make_golden.py`), both iteration paths (contiguous rows and
// position tiles) against a plain double reference, large logits, float16 / autocast dtypes, errors.
#include <doctest/doctest.h>

#include <cmath>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/softmax/softmax.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

// softmax / log_softmax of x along dim, in double, and the vjp with dy.
void reference_softmax(const Tensor& x, const Tensor& dy, int64_t dim, bool log, std::vector<double>& y,
                       std::vector<double>& dx) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t n = s[dim];
  const std::vector<double> v = x.to_double_vector(), g = dy.to_double_vector();
  y.assign(v.size(), 0);
  dx.assign(v.size(), 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t c) { return (o * n + c) * inner + i; };
      double m = -INFINITY, z = 0, sg = 0, sgy = 0;
      for (int64_t c = 0; c < n; ++c) m = std::max(m, v[at(c)]);
      for (int64_t c = 0; c < n; ++c) z += std::exp(v[at(c)] - m);
      for (int64_t c = 0; c < n; ++c) {
        const double p = std::exp(v[at(c)] - m) / z;
        y[at(c)] = log ? v[at(c)] - m - std::log(z) : p;
        sg += g[at(c)];
        sgy += g[at(c)] * p;
      }
      for (int64_t c = 0; c < n; ++c) {
        const double p = std::exp(v[at(c)] - m) / z;
        dx[at(c)] = log ? g[at(c)] - p * sg : p * (g[at(c)] - sgy);
      }
    }
}

}  // namespace

TEST_CASE("ops: softmax/log_softmax float64 gradcheck (2, 3, 2, 3, 4) along dims 1 and -1, (3, 5) along 0") {
  Generator g(31);
  struct Grid { Shape shape; int64_t dim; };
  for (const Grid& t : {Grid{{2, 3, 2, 3, 4}, 1}, Grid{{2, 3, 2, 3, 4}, -1}, Grid{{3, 5}, 0}}) {
    for (bool log : {false, true}) {
      SUBCASE(((log ? "log_softmax " : "softmax ") + shape_str(t.shape) + " dim " + std::to_string(t.dim)).c_str()) {
        Tensor x = leaf(Tensor::randn(t.shape, g, kFloat64, 2.0));
        auto r = autograd::gradcheck(
            [&](const std::vector<Tensor>& in) { return log ? ops::log_softmax(in[0], t.dim) : ops::softmax(in[0], t.dim); },
            {x});
        CHECK_MESSAGE(r.ok, r.report);
      }
    }
  }
}

TEST_CASE("ops: softmax/log_softmax float32/float64 (2, 3, 3, 4, 5) dim 1 match PyTorch: y, dx") {
  for (const char* name : {"softmax_dim1", "softmax_dim1_f64", "log_softmax_dim1", "log_softmax_dim1_f64"}) {
    SUBCASE(name) {
      const GoldenCase c = load_golden("activation.json").at(name);
      const Dtype dt = c.param<std::string>("dtype") == "float64" ? kFloat64 : kFloat32;
      Tensor x = leaf(c.input("x", dt));
      const int64_t dim = c.param<int64_t>("dim");
      Tensor y = c.op() == "softmax" ? ops::softmax(x, dim) : ops::log_softmax(x, dim);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
      check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
    }
  }
}

TEST_CASE("ops: softmax/log_softmax float32 rows and tiles match a double reference: (2, 3, 10, 70) dims 1, 3, 0") {
  // dim 1: inner 700 = one full 512-position tile and a partial one; dim 3: contiguous rows of 70;
  // dim 0: n = 2 with inner 2100.
  Generator g(32);
  Tensor x0 = Tensor::randn({2, 3, 10, 70}, g, kFloat32, 3.0);
  Tensor dy = Tensor::randn({2, 3, 10, 70}, g, kFloat32);
  for (int64_t dim : {1, 3, 0}) {
    for (bool log : {false, true}) {
      SUBCASE(((log ? "log_softmax dim " : "softmax dim ") + std::to_string(dim)).c_str()) {
        Tensor x = leaf(x0.clone());
        Tensor y = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
        y.backward(dy);
        std::vector<double> ry, rdx;
        reference_softmax(x0, dy, dim, log, ry, rdx);
        check_close(y, Tensor::from_vector(ry, x0.shape()), tolerance_for(kFloat32), "y");
        check_close(x.grad(), Tensor::from_vector(rdx, x0.shape()), tolerance_for(kFloat32), "dx");
      }
    }
  }
}

TEST_CASE("ops: softmax/log_softmax float32 (2, 3) with logits of 1e4 stay finite") {
  Tensor x = Tensor::from_vector(std::vector<float>{1e4f, 0.0f, -1e4f, 1e4f, 1e4f, 1e4f}, {2, 3});
  Tensor p = ops::softmax(x, 1), lp = ops::log_softmax(x, 1);
  const std::vector<float> pv = p.to_float_vector(), lv = lp.to_float_vector();
  CHECK(pv[0] == doctest::Approx(1.0));
  CHECK(pv[1] == 0.0f);
  CHECK(pv[3] == doctest::Approx(1.0 / 3));
  CHECK(lv[0] == doctest::Approx(0.0));
  CHECK(lv[2] == doctest::Approx(-2e4));
  CHECK(lv[4] == doctest::Approx(-std::log(3.0)));
}

TEST_CASE("ops: softmax/log_softmax float16 (2, 3, 3, 4, 5) dim 1: FP32 output under autocast, FP16 outside") {
  const GoldenCase c = load_golden("activation.json").at("softmax_dim1");
  Tensor x16 = c.input("x").cast_copy(kFloat16);
  SUBCASE("autocast") {
    amp::AutocastGuard ac;
    Tensor xh = leaf(x16.clone());
    Tensor y = ops::softmax(xh, 1);
    CHECK(y.dtype() == kFloat32);
    check_close(y, c.output("y"), tolerance_for(kFloat16), "softmax autocast y");
    y.backward(c.input("gy"));
    CHECK(xh.grad().dtype() == kFloat16);
    check_close(xh.grad(), c.grad("x"), tolerance_for(kFloat16), "softmax autocast dx");
    CHECK(ops::log_softmax(x16, 1).dtype() == kFloat32);
  }
  SUBCASE("no autocast") {
    Tensor y = ops::softmax(x16, 1);
    CHECK(y.dtype() == kFloat16);
    check_close(y, c.output("y"), tolerance_for(kFloat16), "softmax fp16 y");
    CHECK(ops::log_softmax(x16, 1).dtype() == kFloat16);
  }
}

TEST_CASE("ops: softmax/log_softmax bad dim names the op, the dim and the shape") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(ops::softmax(x, 2), doctest::Contains("softmax: dim 2 out of range for input of shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::log_softmax(x, -3),
                       doctest::Contains("log_softmax: dim -3 out of range for input of shape [2, 3]"), Error);
  CHECK_THROWS_WITH_AS(ops::softmax(Tensor::from_labels({1}, {1}), 0),
                       doctest::Contains("softmax: input must be a floating-point tensor"), Error);
}
