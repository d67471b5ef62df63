// max_pool3d (ops/pool/): float64 gradchecks (cubic, per-axis and padded windows), PyTorch golden
// values (the max_pool3d cases of tests/golden/pool.json, from `/usr/bin/python3
// tools/golden/make_golden.py pool`), float16, ties, padding as -inf, and the errors of max_pool3d.h.
#include <doctest/doctest.h>

#include "tests/check_error.h"

#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/pool/max_pool3d.h"
#include "tests/golden.h"
#include "tests/ops/pool_cases.h"

using namespace halfgrad;
using namespace halfgrad::testing;

TEST_CASE("ops: max_pool3d float64 NCDHW gradcheck (small shapes)") {
  struct Case {
    Shape x;
    int64_t k, s;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 4, 6}, 2, 2},  // the U-Net's downsampling
      {{1, 1, 5, 7, 3}, 2, 2},  // odd extents: the last row is dropped
      {{1, 2, 5, 5, 6}, 3, 2},  // overlapping windows: dx accumulates
      {{2, 1, 3, 4, 4}, 2, 1},
      {{1, 2, 3, 3, 3}, 3, 3},  // one window per plane
  };
  for (const Case& c : cases) {
    SUBCASE(("x " + shape_str(c.x) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s)).c_str()) {
      Generator g(21);
      Tensor x = Tensor::randn(c.x, g, kFloat64).set_requires_grad(true);
      auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return ops::max_pool3d(in[0], c.k, c.s); }, {x});
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: max_pool3d float64 NCDHW gradcheck, per-axis windows and padding") {
  struct Case {
    Shape x;
    ExpandingArray<3> k, s, p;
  };
  const std::vector<Case> cases = {
      {{1, 2, 3, 4, 6}, {1, 2, 2}, {1, 2, 2}, 0},  // nnU-Net's in-plane-only pooling
      {{1, 2, 5, 6, 5}, 3, 2, 1},                  // padded, overlapping
      {{2, 1, 4, 7, 6}, {1, 3, 2}, {1, 2, 1}, {0, 1, 1}},
      {{1, 1, 3, 3, 4}, {2, 3, 2}, 1, {1, 1, 0}},  // stride 1 with padding
  };
  for (const Case& c : cases) {
    SUBCASE(("x " + shape_str(c.x) + " k" + c.k.str() + " s" + c.s.str() + " p" + c.p.str()).c_str()) {
      Generator g(22);
      Tensor x = Tensor::randn(c.x, g, kFloat64).set_requires_grad(true);
      auto r = autograd::gradcheck(
          [&](const std::vector<Tensor>& in) { return ops::max_pool3d(in[0], c.k, c.s, c.p); }, {x});
      CHECK_MESSAGE(r.ok, r.report);
    }
  }
}

TEST_CASE("ops: max_pool3d float32 / float64 NCDHW matches PyTorch golden values (pool.json max_pool3d cases)") {
  const GoldenFile file = load_golden("pool.json");
  int checked = 0;
  for (const std::string& name : file.case_names()) {
    if (file.at(name).op() != "max_pool3d") continue;
    ++checked;
    SUBCASE(name.c_str()) {
      const GoldenCase c = file.at(name);
      const Dtype dt = golden_dtype(c.params().at("dtype").get<std::string>());
      Tensor x = c.input("x", dt).set_requires_grad(true);
      Tensor y = run_pool_case(c, x);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y", dt), 0, 0, c.where() + " y");  // a max is exact
      check_close(x.grad(), c.grad("x", dt), tolerance_for(dt), c.where() + " dx");
    }
  }
  CHECK(checked == 6);  // the two cubic cases, three per-axis / padded ones and one float64 twin
}

TEST_CASE("ops: max_pool3d float32 NCDHW [1, 1, 1, 2, 3] padding counts as -inf, never the maximum") {
  // Every value negative: a zero padding would win; -inf padding never does.
  Tensor x = Tensor::from_vector(std::vector<float>{-6, -5, -4, -3, -2, -1}, {1, 1, 1, 2, 3}).set_requires_grad(true);
  Tensor y = ops::max_pool3d(x, {1, 2, 2}, 1, {0, 1, 1});  // output (1, 3, 4)
  CHECK(y.shape() == Shape{1, 1, 1, 3, 4});
  const std::vector<float> want = {-6, -5, -4, -4, -3, -2, -1, -1, -3, -2, -1, -1};
  CHECK(y.to_float_vector() == want);
  y.backward(Tensor::ones(y.shape()));
  // dx counts how many windows chose each element.
  CHECK(x.grad().to_float_vector() == std::vector<float>{1, 1, 2, 2, 2, 4});
}

TEST_CASE("ops: max_pool3d float16 NCDHW [2, 3, 6, 5, 7] k2 s2 equals float32 on the same values") {
  Generator g(3);
  const Tensor x32 = Tensor::randn({2, 3, 6, 5, 7}, g).cast_copy(kFloat16).cast_copy(kFloat32);
  Tensor xr = x32.clone().set_requires_grad(true);
  Tensor x16 = x32.cast_copy(kFloat16).set_requires_grad(true);
  Tensor yr = ops::max_pool3d(xr, 2, 2), y16 = ops::max_pool3d(x16, 2, 2);
  CHECK(y16.dtype() == kFloat16);
  const Tensor gy = Tensor::randn(yr.shape(), g).cast_copy(kFloat16).cast_copy(kFloat32);
  yr.backward(gy);
  y16.backward(gy.cast_copy(kFloat16));
  CHECK(x16.grad().dtype() == kFloat16);
  check_close(y16, yr, 0, 0, "y");
  check_close(x16.grad(), xr.grad(), 0, 0, "dx");  // disjoint windows: each dx is one dy, exact
}

TEST_CASE("ops: max_pool3d float32 NCDHW [1, 1, 2, 2, 4] ties go to the first maximum, NaN propagates") {
  std::vector<float> v(16, 1.0f);
  v[7] = NAN;  // second window (x 2..3) of the plane holds a NaN
  Tensor x = Tensor::from_vector(v, {1, 1, 2, 2, 4}).set_requires_grad(true);
  Tensor y = ops::max_pool3d(x, 2, 2);
  CHECK(y.item_at(0) == 1.0);
  CHECK(std::isnan(y.item_at(1)));
  y.backward(Tensor::ones(y.shape()));
  const std::vector<float> dx = x.grad().to_float_vector();
  CHECK(dx[0] == 1.0f);  // first of the eight equal values
  CHECK(dx[1] == 0.0f);
  CHECK(dx[7] == 1.0f);  // the NaN
}

TEST_CASE("ops: max_pool3d errors name the op and the shapes") {
  const Tensor x = Tensor::zeros({2, 3, 4, 4, 4});
  SUBCASE("input not 5-D") {
    check_error([&] { ops::max_pool3d(Tensor::zeros({3, 4, 4, 4}), 2, 2); }, {"max_pool3d", "5-D", "[3, 4, 4, 4]"});
  }
  SUBCASE("kernel or stride < 1") {
    check_error([&] { ops::max_pool3d(x, 0, 2); }, {"max_pool3d", "kernel", "[2, 3, 4, 4, 4]"});
    check_error([&] { ops::max_pool3d(x, 2, 0); }, {"max_pool3d", "stride", "[2, 3, 4, 4, 4]"});
  }
  SUBCASE("padding above kernel / 2") {
    check_error([&] { ops::max_pool3d(x, 2, 2, 2); }, {"max_pool3d", "padding", "kernel_size / 2"});
    check_error([&] { ops::max_pool3d(x, {1, 3, 3}, 1, {1, 1, 1}); }, {"max_pool3d", "padding 1", "(1, 3, 3)"});
  }
  SUBCASE("window larger than the input") {
    check_error([&] { ops::max_pool3d(Tensor::zeros({2, 3, 4, 1, 4}), 2, 2); }, {"max_pool3d", "[2, 3, 4, 1, 4]"});
  }
}
