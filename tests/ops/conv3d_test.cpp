// conv3d and conv_transpose3d (ops/conv/): float64 gradchecks, a float64 loop reference for the tiled
// GEMM paths (stride-1 flipped dgrad, disjoint windows, overlapping windows, pointwise, tiles that
// straddle samples), PyTorch golden values (tests/golden/conv.json, from `/usr/bin/python3
// tools/golden/make_golden.py`), float16 and autocast dtypes, and the errors of ops/conv/conv3d.h.
#include <doctest/doctest.h>

#include "tests/check_error.h"

#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/error.h"
#include "ops/conv/conv3d.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

struct ConvCase {
  Shape x, w;
  int64_t stride, padding;
  bool bias;
  std::string name() const {
    return "x " + shape_str(x) + " w " + shape_str(w) + " s" + std::to_string(stride) + " p" +
           std::to_string(padding) + (bias ? " bias" : " no bias");
  }
};

// The convolution's loops, in double: y (and, given gy, dx, dw, db) of conv3d or conv_transpose3d.
struct Reference {
  std::vector<double> y, dx, dw, db;
  Shape y_shape;
};

Reference reference(const Tensor& xt, const Tensor& wt, const Tensor& bt, int64_t s, int64_t p, bool transposed,
                    const Tensor& gyt = Tensor()) {
  const Shape& xs = xt.shape();
  const Shape& ws = wt.shape();
  const int64_t N = xs[0], k = ws[2];
  const int64_t cin = transposed ? ws[0] : ws[1], cout = transposed ? ws[1] : ws[0];
  Shape ys{N, cout, 0, 0, 0};
  for (int d = 2; d < 5; ++d) ys[d] = transposed ? (xs[d] - 1) * s - 2 * p + k : (xs[d] + 2 * p - k) / s + 1;
  const std::vector<double> x = xt.to_double_vector(), w = wt.to_double_vector();
  const std::vector<double> b = bt.defined() ? bt.to_double_vector() : std::vector<double>(cout, 0.0);
  const std::vector<double> gy = gyt.defined() ? gyt.to_double_vector() : std::vector<double>(shape_numel(ys), 0.0);
  Reference r;
  r.y_shape = ys;
  r.y.assign(shape_numel(ys), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(cout, 0.0);
  // (low, high) = (the smaller, the larger volume); conv3d reads low = y from high = x, conv_transpose3d
  // scatters x (low) into y (high). Both visit every (high position, low position, tap) triple once.
  const Shape& hi = transposed ? ys : xs;
  const Shape& lo = transposed ? xs : ys;
  auto at = [](const Shape& sh, int64_t n, int64_t c, int64_t z, int64_t y, int64_t x) {
    return (((n * sh[1] + c) * sh[2] + z) * sh[3] + y) * sh[4] + x;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t z = 0; z < lo[2]; ++z)
          for (int64_t yy = 0; yy < lo[3]; ++yy)
            for (int64_t xx = 0; xx < lo[4]; ++xx)
              for (int64_t i = 0; i < k; ++i)
                for (int64_t j = 0; j < k; ++j)
                  for (int64_t l = 0; l < k; ++l) {
                    const int64_t zi = z * s + i - p, yi = yy * s + j - p, xi = xx * s + l - p;
                    if (zi < 0 || zi >= hi[2] || yi < 0 || yi >= hi[3] || xi < 0 || xi >= hi[4]) continue;
                    const int64_t wi = (((transposed ? c * cout + o : o * cin + c) * k + i) * k + j) * k + l;
                    if (!transposed) {
                      const int64_t xo = at(xs, n, c, zi, yi, xi), yo = at(ys, n, o, z, yy, xx);
                      r.y[yo] += w[wi] * x[xo];
                      r.dx[xo] += w[wi] * gy[yo];
                      r.dw[wi] += x[xo] * gy[yo];
                    } else {
                      const int64_t xo = at(xs, n, c, z, yy, xx), yo = at(ys, n, o, zi, yi, xi);
                      r.y[yo] += w[wi] * x[xo];
                      r.dx[xo] += w[wi] * gy[yo];
                      r.dw[wi] += x[xo] * gy[yo];
                    }
                  }
  const int64_t vol = shape_numel(ys) / (N * cout);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t v = 0; v < vol; ++v) {
        r.y[(n * cout + o) * vol + v] += b[o];
        r.db[o] += gy[(n * cout + o) * vol + v];
      }
  return r;
}

Tensor run(bool transposed, const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p) {
  const auto params = ops::Conv3dParams().stride(s).padding(p);
  return transposed ? ops::conv_transpose3d(x, w, b, params) : ops::conv3d(x, w, b, params);
}

// Float32 forward and all three gradients against the double loops.
void check_against_reference(bool transposed, const ConvCase& cc, uint64_t seed) {
  Generator g(seed);
  Tensor x = leaf(Tensor::randn(cc.x, g));
  Tensor w = leaf(Tensor::randn(cc.w, g, kFloat32, 0.3));
  const int64_t cout = transposed ? cc.w[1] : cc.w[0];
  Tensor b = cc.bias ? leaf(Tensor::randn({cout}, g)) : Tensor();
  Tensor y = run(transposed, x, w, b, cc.stride, cc.padding);
  Tensor gy = Tensor::randn(y.shape(), g);
  const Reference r = reference(x, w, b, cc.stride, cc.padding, transposed, gy);
  REQUIRE(y.shape() == r.y_shape);
  y.backward(gy);
  const Tolerance tol{1e-4, 1e-4};  // float32 sums of up to a few thousand terms
  check_close(y, Tensor::from_vector(r.y, r.y_shape, kFloat64), tol, "y");
  check_close(x.grad(), Tensor::from_vector(r.dx, x.shape(), kFloat64), tol, "dx");
  check_close(w.grad(), Tensor::from_vector(r.dw, w.shape(), kFloat64), {1e-3, 1e-4}, "dw");
  if (cc.bias) check_close(b.grad(), Tensor::from_vector(r.db, b.shape(), kFloat64), {1e-3, 1e-4}, "db");
}

void check_gradcheck(bool transposed, const ConvCase& cc, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> in{leaf(Tensor::randn(cc.x, g, kFloat64)), leaf(Tensor::randn(cc.w, g, kFloat64, 0.5))};
  if (cc.bias) in.push_back(leaf(Tensor::randn({transposed ? cc.w[1] : cc.w[0]}, g, kFloat64)));
  auto r = autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return run(transposed, t[0], t[1], t.size() > 2 ? t[2] : Tensor(), cc.stride, cc.padding);
      },
      in);
  CHECK_MESSAGE(r.ok, r.report);
}

}  // namespace

TEST_CASE("ops: conv3d float64 NCDHW gradcheck x, weight, bias (small shapes)") {
  const std::vector<ConvCase> cases = {
      {{2, 2, 3, 4, 5}, {3, 2, 3, 3, 3}, 1, 1, true},   // the U-Net's 3x3x3, odd extents
      {{1, 1, 5, 4, 3}, {2, 1, 3, 3, 3}, 1, 0, false},  // Cin = 1, no padding
      {{2, 2, 5, 5, 6}, {2, 2, 3, 3, 3}, 2, 1, true},   // overlapping windows, stride 2
      {{1, 2, 5, 4, 5}, {3, 2, 3, 3, 3}, 2, 0, false},
      {{2, 3, 4, 4, 6}, {2, 3, 2, 2, 2}, 2, 0, true},   // disjoint windows (k = s)
      {{2, 3, 3, 2, 4}, {4, 3, 1, 1, 1}, 1, 0, true},   // pointwise (the U-Net head)
      {{1, 2, 3, 3, 2}, {2, 2, 1, 1, 1}, 1, 1, true},   // k = 1 with padding
      {{1, 2, 2, 3, 3}, {2, 2, 3, 3, 3}, 1, 2, false},  // padding k - 1: the flipped dgrad with no padding
      {{1, 1, 2, 2, 3}, {1, 1, 3, 3, 3}, 1, 3, true},   // padding > k - 1: the scatter-add dgrad
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SUBCASE(cases[i].name().c_str()) { check_gradcheck(false, cases[i], 100 + i); }
  }
}

TEST_CASE("ops: conv_transpose3d float64 NCDHW gradcheck x, weight, bias (small shapes)") {
  const std::vector<ConvCase> cases = {
      {{2, 3, 2, 3, 2}, {3, 2, 2, 2, 2}, 2, 0, true},   // the U-Net's up-convolution k2 s2
      {{1, 1, 3, 2, 3}, {1, 2, 2, 2, 2}, 2, 0, false},  // Cin = 1
      {{2, 2, 3, 3, 4}, {2, 3, 3, 3, 3}, 1, 1, true},   // stride 1: runs as a convolution
      {{1, 2, 3, 2, 3}, {2, 2, 3, 3, 3}, 2, 1, true},   // overlapping windows, stride 2
      {{1, 2, 2, 3, 2}, {2, 1, 1, 1, 1}, 1, 0, false},  // pointwise
      {{1, 2, 2, 2, 3}, {2, 2, 2, 2, 2}, 3, 1, true},   // stride > kernel: gaps in the output
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SUBCASE(cases[i].name().c_str()) { check_gradcheck(true, cases[i], 200 + i); }
  }
}

TEST_CASE("ops: conv3d float32 NCDHW tiled paths vs float64 loops (tiles within and across samples)") {
  // Shapes big enough for several column tiles: tiles inside one sample and tiles that straddle two.
  const std::vector<ConvCase> cases = {
      {{2, 3, 12, 13, 14}, {5, 3, 3, 3, 3}, 1, 1, true},
      {{3, 4, 5, 5, 5}, {6, 4, 3, 3, 3}, 1, 1, false},
      {{2, 3, 11, 12, 13}, {4, 3, 3, 3, 3}, 2, 1, true},
      {{2, 4, 10, 12, 14}, {3, 4, 2, 2, 2}, 2, 0, true},
      {{3, 5, 9, 10, 11}, {3, 5, 1, 1, 1}, 1, 0, true},
      {{2, 2, 7, 6, 9}, {3, 2, 3, 3, 3}, 1, 4, true},
      // FP32 direct kernels (k 3, stride 1, >= 128 outputs): 16- and 8-channel fprop blocks with
      // zero-padded channels, rows a multiple of 8 wide (wgrad's rows kernel) or not (its channels
      // kernel), paddings 0..2.
      {{2, 3, 5, 6, 16}, {5, 3, 3, 3, 3}, 1, 1, true},
      {{1, 3, 4, 4, 8}, {2, 3, 3, 3, 3}, 1, 1, true},
      {{1, 2, 4, 5, 10}, {7, 2, 3, 3, 3}, 1, 0, true},
      {{2, 2, 3, 4, 6}, {3, 2, 3, 3, 3}, 1, 2, false},
      {{1, 2, 4, 5, 16}, {24, 2, 3, 3, 3}, 1, 1, true},  // a 16-channel block, then 8 more
      {{2, 3, 4, 4, 5}, {20, 3, 3, 3, 3}, 1, 1, false},  // 16 + 4 channels, rows too short for 8-wide
      {{1, 2, 3, 4, 20}, {8, 2, 3, 3, 3}, 1, 1, true},   // 8 channels, 11 outputs a call
      {{1, 3, 3, 4, 16}, {12, 3, 3, 3, 3}, 1, 1, false},  // 12 channels as 3 x 4 (rows of 16)
      {{1, 2, 2, 3, 32}, {12, 2, 3, 3, 3}, 1, 1, true},  // 12 channels as 8 + 4 (rows of 32)
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SUBCASE(cases[i].name().c_str()) { check_against_reference(false, cases[i], 300 + i); }
  }
}

TEST_CASE("ops: conv_transpose3d float32 NCDHW tiled paths vs float64 loops") {
  const std::vector<ConvCase> cases = {
      {{2, 8, 6, 7, 8}, {8, 4, 2, 2, 2}, 2, 0, true},
      {{3, 6, 3, 4, 5}, {6, 3, 2, 2, 2}, 2, 0, false},
      {{2, 3, 9, 10, 11}, {3, 4, 3, 3, 3}, 1, 1, true},
      {{2, 3, 5, 6, 7}, {3, 2, 3, 3, 3}, 2, 1, true},
      {{2, 3, 4, 4, 8}, {3, 2, 3, 3, 3}, 1, 1, true},  // stride 1, rows of 8: the direct kernels
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SUBCASE(cases[i].name().c_str()) { check_against_reference(true, cases[i], 400 + i); }
  }
}

TEST_CASE("ops: conv3d and conv_transpose3d float32 NCDHW multi-threaded paths (>= 1M multiply-adds) vs float64 loops") {
  // Problems above kMinParallelMacs (ops/conv/vol2col.h) split over the threads: column tiles, some
  // straddling two samples; per-thread wgrad partials; the overlapping-window dgrad's shared GEMM rows.
  struct Case {
    bool transposed;
    ConvCase c;
  };
  const std::vector<Case> cases = {
      {false, {{2, 4, 8, 8, 16}, {16, 4, 3, 3, 3}, 1, 1, false}},  // direct: 16-channel fprop, rows wgrad
      {false, {{2, 3, 12, 13, 14}, {5, 3, 3, 3, 3}, 1, 1, true}},  // direct: 8-channel fprop, channels wgrad
      {false, {{3, 8, 12, 12, 12}, {16, 8, 3, 3, 3}, 2, 1, true}},  // GEMM, overlapping windows
      {false, {{3, 32, 8, 8, 9}, {32, 32, 1, 1, 1}, 1, 0, true}},   // GEMM, pointwise
      {true, {{2, 16, 8, 8, 10}, {16, 8, 2, 2, 2}, 2, 0, true}},    // GEMM, disjoint windows (k2 s2)
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = std::string(cases[i].transposed ? "conv_transpose3d " : "conv3d ") + cases[i].c.name();
    SUBCASE(name.c_str()) { check_against_reference(cases[i].transposed, cases[i].c, 500 + i); }
  }
}

TEST_CASE("ops: conv3d and conv_transpose3d float32/float64 NCDHW match PyTorch golden values (conv.json)") {
  const GoldenFile file = load_golden("conv.json");
  for (const std::string& name : file.case_names()) {
    SUBCASE(name.c_str()) {
      const GoldenCase c = file.at(name);
      const Dtype dt = golden_dtype(c.params().at("dtype").get<std::string>());
      Tensor x = leaf(c.input("x", dt));
      Tensor w = leaf(c.input("weight", dt));
      Tensor b = c.has_input("bias") ? leaf(c.input("bias", dt)) : Tensor();
      const bool transposed = c.op() == "conv_transpose3d";
      REQUIRE((transposed || c.op() == "conv3d"));
      Tensor y = run(transposed, x, w, b, c.param<int64_t>("stride"), c.param<int64_t>("padding"));
      CHECK(y.dtype() == dt);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y", dt), tolerance_for(dt), c.where() + " y");
      check_close(x.grad(), c.grad("x", dt), tolerance_for(dt), c.where() + " dx");
      check_close(w.grad(), c.grad("weight", dt), tolerance_for(dt), c.where() + " dweight");
      if (b.defined()) check_close(b.grad(), c.grad("bias", dt), tolerance_for(dt), c.where() + " dbias");
    }
  }
}

TEST_CASE("ops: conv3d and conv_transpose3d float16 and autocast NCDHW [2, 4, 6, 7, 8] vs float32") {
  // Inputs are half-representable, so the float32 run sees the same operands and the FP16 results
  // differ from it only by the final rounding to half (FP32 accumulation in both).
  for (bool transposed : {false, true}) {
    SUBCASE(transposed ? "conv_transpose3d k2 s2" : "conv3d k3 s1 p1") {
      Generator g(7);
      const Shape xs{2, 4, 6, 7, 8};
      const Shape ws = transposed ? Shape{4, 3, 2, 2, 2} : Shape{3, 4, 3, 3, 3};
      const int64_t s = transposed ? 2 : 1, p = transposed ? 0 : 1;
      auto half_exact = [](Tensor t) { return t.cast_copy(kFloat16).cast_copy(kFloat32); };
      const Tensor x32 = half_exact(Tensor::randn(xs, g)), w32 = half_exact(Tensor::randn(ws, g, kFloat32, 0.3));
      const Tensor b32 = half_exact(Tensor::randn({3}, g));

      Tensor xr = leaf(x32.clone()), wr = leaf(w32.clone()), br = leaf(b32.clone());
      Tensor yr = run(transposed, xr, wr, br, s, p);
      const Tensor gy = half_exact(Tensor::randn(yr.shape(), g));
      yr.backward(gy);

      SUBCASE("float16 tensors") {
        Tensor x = leaf(x32.cast_copy(kFloat16)), w = leaf(w32.cast_copy(kFloat16)), b = leaf(b32.cast_copy(kFloat16));
        Tensor y = run(transposed, x, w, b, s, p);
        CHECK(y.dtype() == kFloat16);
        y.backward(gy.cast_copy(kFloat16));
        CHECK(w.grad().dtype() == kFloat16);
        check_close(y, yr, tolerance_for(kFloat16), "y");
        check_close(x.grad(), xr.grad(), tolerance_for(kFloat16), "dx");
        check_close(w.grad(), wr.grad(), tolerance_for(kFloat16), "dw");
        check_close(b.grad(), br.grad(), tolerance_for(kFloat16), "db");
      }
      SUBCASE("float32 leaves under AutocastGuard") {
        Tensor x = leaf(x32.clone()), w = leaf(w32.clone()), b = leaf(b32.clone());
        Tensor y;
        {
          amp::AutocastGuard ac;
          y = run(transposed, x, w, b, s, p);
        }
        CHECK(y.dtype() == kFloat16);
        y.backward(gy.cast_copy(kFloat16));
        CHECK(x.grad().dtype() == kFloat32);
        CHECK(w.grad().dtype() == kFloat32);
        CHECK(b.grad().dtype() == kFloat32);
        check_close(y, yr, tolerance_for(kFloat16), "y");
        check_close(x.grad(), xr.grad(), tolerance_for(kFloat16), "dx");
        check_close(w.grad(), wr.grad(), tolerance_for(kFloat16), "dw");
        check_close(b.grad(), br.grad(), tolerance_for(kFloat16), "db");
      }
    }
  }
}

TEST_CASE("ops: conv3d float32 NCDHW [1, 2, 4, 4, 4] gradients only for inputs that require them") {
  Generator g(9);
  Tensor x = Tensor::randn({1, 2, 4, 4, 4}, g);
  Tensor w = leaf(Tensor::randn({3, 2, 3, 3, 3}, g));
  Tensor y = ops::conv3d(x, w, Tensor(), ops::Conv3dParams().padding(1));
  y.backward(Tensor::ones(y.shape()));
  CHECK_FALSE(x.grad().defined());
  CHECK(w.grad().defined());
  NoGradGuard ng;
  CHECK_FALSE(ops::conv3d(x, w, Tensor()).requires_grad());
}

TEST_CASE("ops: conv3d and conv_transpose3d errors name the op and the shapes") {
  const Tensor x = Tensor::zeros({2, 3, 4, 4, 4});
  const Tensor w = Tensor::zeros({5, 3, 3, 3, 3});   // conv3d (Cout 5, Cin 3)
  const Tensor wt = Tensor::zeros({3, 5, 2, 2, 2});  // conv_transpose3d (Cin 3, Cout 5)
  const Tensor b = Tensor::zeros({5});
  using ops::Conv3dParams;
  SUBCASE("input not 5-D") {
    check_error([&] { ops::conv3d(Tensor::zeros({3, 4, 4, 4}), w, b); }, {"conv3d", "input", "5-D", "[3, 4, 4, 4]"});
    check_error([&] { ops::conv_transpose3d(Tensor::zeros({3, 4, 4, 4}), wt, b); },
                {"conv_transpose3d", "input", "[3, 4, 4, 4]"});
  }
  SUBCASE("weight not 5-D") {
    check_error([&] { ops::conv3d(x, Tensor::zeros({5, 3, 3, 3}), b); }, {"conv3d", "weight", "5-D", "[5, 3, 3, 3]"});
    check_error([&] { ops::conv_transpose3d(x, Tensor::zeros({3, 5, 2}), b); },
                {"conv_transpose3d", "weight", "[3, 5, 2]"});
  }
  SUBCASE("channel mismatch") {
    check_error([&] { ops::conv3d(x, Tensor::zeros({5, 4, 3, 3, 3}), b); },
                {"conv3d", "[2, 3, 4, 4, 4]", "[5, 4, 3, 3, 3]", "channels"});
    check_error([&] { ops::conv_transpose3d(x, Tensor::zeros({4, 5, 2, 2, 2}), b); },
                {"conv_transpose3d", "[2, 3, 4, 4, 4]", "[4, 5, 2, 2, 2]", "channels"});
  }
  SUBCASE("empty kernel (non-cubic kernels are per-axis: tests/ops/conv3d_axes_test.cpp)") {
    check_error([&] { ops::conv3d(x, Tensor::zeros({5, 3, 3, 3, 0}), b); }, {"conv3d", "[5, 3, 3, 3, 0]", "non-empty"});
    check_error([&] { ops::conv3d(x, Tensor::zeros({5, 3, 0, 0, 0}), b); }, {"conv3d", "[5, 3, 0, 0, 0]", "non-empty"});
    check_error([&] { ops::conv_transpose3d(x, Tensor::zeros({3, 5, 2, 0, 2}), b); },
                {"conv_transpose3d", "[3, 5, 2, 0, 2]", "non-empty"});
  }
  SUBCASE("bias of the wrong length") {
    check_error([&] { ops::conv3d(x, w, Tensor::zeros({4})); }, {"conv3d", "bias", "[4]", "5", "[5, 3, 3, 3, 3]"});
    check_error([&] { ops::conv_transpose3d(x, wt, Tensor::zeros({3})); },
                {"conv_transpose3d", "bias", "[3]", "5", "[3, 5, 2, 2, 2]"});
  }
  SUBCASE("output extent < 1") {
    check_error([&] { ops::conv3d(Tensor::zeros({2, 3, 2, 4, 4}), w, b); },
                {"conv3d", "output extents", "[2, 3, 2, 4, 4]", "[5, 3, 3, 3, 3]"});
    check_error([&] { ops::conv_transpose3d(Tensor::zeros({2, 3, 1, 4, 4}), Tensor::zeros({3, 5, 1, 1, 1}), b,
                                            Conv3dParams().padding(1)); },
                {"conv_transpose3d", "output extents", "[2, 3, 1, 4, 4]"});
  }
  SUBCASE("stride < 1") {
    check_error([&] { ops::conv3d(x, w, b, Conv3dParams().stride(0)); }, {"conv3d", "stride", "[2, 3, 4, 4, 4]"});
    check_error([&] { ops::conv_transpose3d(x, wt, b, Conv3dParams().stride(0)); },
                {"conv_transpose3d", "stride", "[3, 5, 2, 2, 2]"});
  }
  SUBCASE("padding < 0") {
    check_error([&] { ops::conv3d(x, w, b, Conv3dParams().padding(-1)); }, {"conv3d", "padding", "[5, 3, 3, 3, 3]"});
    check_error([&] { ops::conv_transpose3d(x, wt, b, Conv3dParams().padding(-1)); },
                {"conv_transpose3d", "padding", "[2, 3, 4, 4, 4]"});
  }
  SUBCASE("integer input") {
    check_error([&] { ops::conv3d(Tensor::zeros({2, 3, 4, 4, 4}, kInt64), w, b); }, {"conv3d", "input", "int64"});
  }
}
