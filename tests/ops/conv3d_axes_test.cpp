// Per-axis conv3d and conv_transpose3d (ops/conv/conv3d.h): kernels (kd, kh, kw), strides, paddings,
// dilations and output_padding that differ by axis, as nnU-Net's plans for anisotropic scans use
// ((1, 3, 3) kernels, (1, 2, 2) strides). Float32 fprop/dgrad/wgrad of the tiled GEMM paths (and the
// direct 3x3x3 kernels with per-axis padding) against a float64 loop over the definition, float64
// gradchecks, PyTorch golden values (tests/golden/conv_axes.json, from `/usr/bin/python3
// tools/golden/make_conv_axes_golden.py`, float64), the nn layers' per-axis options, and the errors.
#include <doctest/doctest.h>

#include "tests/check_error.h"

#include <array>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/error.h"
#include "nn/conv3d.h"
#include "ops/conv/conv3d.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

using Axes = std::array<int64_t, 3>;

Tensor leaf(Tensor t) { return t.set_requires_grad(true); }

std::string axes_str(const Axes& a) {
  return "(" + std::to_string(a[0]) + "," + std::to_string(a[1]) + "," + std::to_string(a[2]) + ")";
}

struct AxesCase {
  Shape x, w;  // w: (Cout, Cin, kd, kh, kw) for conv3d, (Cin, Cout, kd, kh, kw) for conv_transpose3d
  Axes stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1}, output_padding{0, 0, 0};
  bool bias = true;
  std::string name() const {
    return "x " + shape_str(x) + " w " + shape_str(w) + " s" + axes_str(stride) + " p" + axes_str(padding) + " d" +
           axes_str(dilation) + (output_padding == Axes{0, 0, 0} ? "" : " op" + axes_str(output_padding)) +
           (bias ? " bias" : " no bias");
  }
  ops::Conv3dParams params() const {
    return ops::Conv3dParams().stride(stride).padding(padding).dilation(dilation).output_padding(output_padding);
  }
};

// The definition, in double, per axis: for conv3d, y at (z, y, x) reads x at s*z + d*i - p on each
// axis; conv_transpose3d scatters x at (z, y, x) to y at the same positions (its adjoint). Every
// (low position, tap) pair whose high position lies in the volume is visited once.
struct Reference {
  std::vector<double> y, dx, dw, db;
  Shape y_shape;
};

Reference reference(const Tensor& xt, const Tensor& wt, const Tensor& bt, const AxesCase& c, bool transposed,
                    const Tensor& gyt) {
  const Shape& xs = xt.shape();
  const Shape& ws = wt.shape();
  const int64_t N = xs[0];
  const int64_t cin = transposed ? ws[0] : ws[1], cout = transposed ? ws[1] : ws[0];
  Shape ys{N, cout, 0, 0, 0};
  for (int a = 0; a < 3; ++a) {
    const int64_t span = c.dilation[a] * (ws[2 + a] - 1) + 1;
    ys[2 + a] = transposed ? (xs[2 + a] - 1) * c.stride[a] - 2 * c.padding[a] + span + c.output_padding[a]
                           : (xs[2 + a] + 2 * c.padding[a] - span) / c.stride[a] + 1;
  }
  const std::vector<double> x = xt.to_double_vector(), w = wt.to_double_vector(), gy = gyt.to_double_vector();
  const std::vector<double> b = bt.defined() ? bt.to_double_vector() : std::vector<double>(cout, 0.0);
  Reference r;
  r.y_shape = ys;
  r.y.assign(shape_numel(ys), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(cout, 0.0);
  const Shape& hi = transposed ? ys : xs;  // the volume read through the taps (conv3d) or written (transposed)
  const Shape& lo = transposed ? xs : ys;
  auto at = [](const Shape& sh, int64_t n, int64_t ch, int64_t z, int64_t y, int64_t x) {
    return (((n * sh[1] + ch) * sh[2] + z) * sh[3] + y) * sh[4] + x;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t ci = 0; ci < cin; ++ci)
        for (int64_t z = 0; z < lo[2]; ++z)
          for (int64_t yy = 0; yy < lo[3]; ++yy)
            for (int64_t xx = 0; xx < lo[4]; ++xx)
              for (int64_t i = 0; i < ws[2]; ++i)
                for (int64_t j = 0; j < ws[3]; ++j)
                  for (int64_t l = 0; l < ws[4]; ++l) {
                    const int64_t zi = z * c.stride[0] + i * c.dilation[0] - c.padding[0];
                    const int64_t yi = yy * c.stride[1] + j * c.dilation[1] - c.padding[1];
                    const int64_t xi = xx * c.stride[2] + l * c.dilation[2] - c.padding[2];
                    if (zi < 0 || zi >= hi[2] || yi < 0 || yi >= hi[3] || xi < 0 || xi >= hi[4]) continue;
                    const int64_t wi = (((transposed ? ci * cout + o : o * cin + ci) * ws[2] + i) * ws[3] + j) * ws[4] + l;
                    const int64_t xo = transposed ? at(xs, n, ci, z, yy, xx) : at(xs, n, ci, zi, yi, xi);
                    const int64_t yo = transposed ? at(ys, n, o, zi, yi, xi) : at(ys, n, o, z, yy, xx);
                    r.y[yo] += w[wi] * x[xo];
                    r.dx[xo] += w[wi] * gy[yo];
                    r.dw[wi] += x[xo] * gy[yo];
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

Tensor run(bool transposed, const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv3dParams& p) {
  return transposed ? ops::conv_transpose3d(x, w, b, p) : ops::conv3d(x, w, b, p);
}

// Float32 forward and the three gradients against the double loops.
void check_against_reference(bool transposed, const AxesCase& c, uint64_t seed) {
  Generator g(seed);
  Tensor x = leaf(Tensor::randn(c.x, g));
  Tensor w = leaf(Tensor::randn(c.w, g, kFloat32, 0.3));
  const int64_t cout = transposed ? c.w[1] : c.w[0];
  Tensor b = c.bias ? leaf(Tensor::randn({cout}, g)) : Tensor();
  Tensor y = run(transposed, x, w, b, c.params());
  Tensor gy = Tensor::randn(y.shape(), g);
  const Reference r = reference(x, w, b, c, transposed, gy);
  REQUIRE(y.shape() == r.y_shape);
  y.backward(gy);
  const Tolerance tol{1e-4, 1e-4};  // float32 sums of up to a few thousand terms
  check_close(y, Tensor::from_vector(r.y, r.y_shape, kFloat64), tol, "y");
  check_close(x.grad(), Tensor::from_vector(r.dx, x.shape(), kFloat64), tol, "dx");
  check_close(w.grad(), Tensor::from_vector(r.dw, w.shape(), kFloat64), {1e-3, 1e-4}, "dw");
  if (c.bias) check_close(b.grad(), Tensor::from_vector(r.db, b.shape(), kFloat64), {1e-3, 1e-4}, "db");
}

void check_gradcheck(bool transposed, const AxesCase& c, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> in{leaf(Tensor::randn(c.x, g, kFloat64)), leaf(Tensor::randn(c.w, g, kFloat64, 0.5))};
  if (c.bias) in.push_back(leaf(Tensor::randn({transposed ? c.w[1] : c.w[0]}, g, kFloat64)));
  auto r = autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return run(transposed, t[0], t[1], t.size() > 2 ? t[2] : Tensor(), c.params()); },
      in);
  CHECK_MESSAGE(r.ok, r.report);
}

Axes axes_param(const GoldenCase& c, const char* key) {
  const std::vector<int64_t> v = c.params().at(key).get<std::vector<int64_t>>();
  REQUIRE(v.size() == 3);
  return {v[0], v[1], v[2]};
}

}  // namespace

TEST_CASE("ops: conv3d float32 NCDHW per-axis kernel/stride/padding/dilation vs float64 loops") {
  const std::vector<AxesCase> cases = {
      // nnU-Net's in-plane block of an anisotropic plan: (1, 3, 3), padding (0, 1, 1)
      {{2, 3, 4, 7, 6}, {4, 3, 1, 3, 3}, {1, 1, 1}, {0, 1, 1}},
      // its in-plane downsampling: (1, 3, 3) kernel, (1, 2, 2) stride (overlapping windows in H, W)
      {{2, 3, 4, 9, 8}, {5, 3, 1, 3, 3}, {1, 2, 2}, {0, 1, 1}},
      // (3, 1, 1) through-plane kernel, stride 2 on D only, no bias
      {{1, 2, 7, 3, 4}, {3, 2, 3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}, false},
      // dilation 2 on one axis (D), per-axis padding keeping the extents
      {{1, 2, 7, 5, 6}, {3, 2, 3, 1, 3}, {1, 1, 1}, {2, 0, 1}, {2, 1, 1}},
      // dilation on H with stride on W, padding on D only
      {{2, 2, 5, 8, 7}, {2, 2, 2, 3, 2}, {1, 1, 3}, {1, 0, 0}, {1, 2, 1}},
      // a 3x3x3 kernel with per-axis padding (0, 1, 1): the direct kernels (>= 128 outputs, stride 1)
      {{2, 3, 6, 8, 7}, {8, 3, 3, 3, 3}, {1, 1, 1}, {0, 1, 1}},
      // a 3x3x3 kernel with dilation 2 on W: the GEMM path, not the direct kernels
      {{1, 2, 5, 6, 9}, {4, 2, 3, 3, 3}, {1, 1, 1}, {1, 1, 2}, {1, 1, 2}},
      // disjoint windows per axis (kernel <= stride): the parallel-tiles dgrad
      {{2, 3, 4, 6, 8}, {4, 3, 1, 2, 2}, {1, 2, 2}, {0, 0, 0}},
      // large enough for the multi-threaded paths (>= 1M multiply-adds), overlapping and stride > 1
      {{2, 8, 6, 20, 18}, {16, 8, 1, 3, 3}, {1, 2, 2}, {0, 1, 1}},
      {{2, 8, 8, 16, 16}, {16, 8, 3, 3, 1}, {1, 1, 1}, {1, 1, 0}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SUBCASE(cases[i].name().c_str()) { check_against_reference(false, cases[i], 700 + i); }
  }
}

TEST_CASE("ops: conv_transpose3d float32 NCDHW per-axis kernel/stride/padding/dilation/output_padding vs float64 loops") {
  const std::vector<AxesCase> cases = {
      // nnU-Net's in-plane upsampling: kernel == stride == (1, 2, 2)
      {{2, 4, 3, 3, 4}, {4, 3, 1, 2, 2}, {1, 2, 2}, {0, 0, 0}},
      // (1, 3, 3) stride (1, 2, 2) padding (0, 1, 1) output_padding (0, 1, 1): doubles H and W exactly
      {{1, 3, 3, 4, 5}, {3, 2, 1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, {0, 1, 1}},
      // stride 1 with output_padding 1 < dilation 2 on D (the flipped-kernel dgrad does not apply)
      {{1, 3, 3, 4, 3}, {3, 2, 2, 3, 3}, {1, 2, 2}, {1, 1, 0}, {2, 1, 1}, {1, 1, 1}},
      // stride 1 everywhere, per-axis padding: the flipped-kernel path per axis
      {{2, 2, 4, 5, 6}, {2, 3, 3, 1, 3}, {1, 1, 1}, {1, 0, 2}, {1, 1, 1}, {0, 0, 0}, false},
      // multi-threaded (>= 1M multiply-adds): (1, 2, 2) up-convolution of 32 channels
      {{2, 32, 4, 16, 16}, {32, 16, 1, 2, 2}, {1, 2, 2}, {0, 0, 0}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SUBCASE(cases[i].name().c_str()) { check_against_reference(true, cases[i], 800 + i); }
  }
}

TEST_CASE("ops: conv3d and conv_transpose3d float64 NCDHW per-axis gradcheck x, weight, bias") {
  const std::vector<AxesCase> conv = {
      {{1, 2, 3, 5, 4}, {2, 2, 1, 3, 3}, {1, 2, 2}, {0, 1, 1}},
      {{1, 2, 5, 3, 4}, {2, 2, 3, 1, 2}, {2, 1, 1}, {2, 0, 1}, {2, 1, 1}},
      {{2, 1, 3, 4, 5}, {2, 1, 3, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, false},
  };
  const std::vector<AxesCase> transposed = {
      {{1, 2, 2, 3, 3}, {2, 2, 1, 2, 2}, {1, 2, 2}, {0, 0, 0}},
      {{1, 2, 2, 3, 2}, {2, 2, 2, 3, 3}, {1, 2, 2}, {1, 1, 0}, {2, 1, 1}, {1, 1, 1}},
  };
  for (size_t i = 0; i < conv.size(); ++i) {
    SUBCASE(("conv3d " + conv[i].name()).c_str()) { check_gradcheck(false, conv[i], 900 + i); }
  }
  for (size_t i = 0; i < transposed.size(); ++i) {
    SUBCASE(("conv_transpose3d " + transposed[i].name()).c_str()) { check_gradcheck(true, transposed[i], 950 + i); }
  }
}

TEST_CASE("ops: conv3d and conv_transpose3d float64 NCDHW per-axis match PyTorch golden values (conv_axes.json)") {
  const GoldenFile file = load_golden("conv_axes.json");
  REQUIRE(file.case_names().size() == 5);
  for (const std::string& name : file.case_names()) {
    SUBCASE(name.c_str()) {
      const GoldenCase c = file.at(name);
      REQUIRE(c.params().at("dtype").get<std::string>() == "float64");
      Tensor x = leaf(c.input("x", kFloat64));
      Tensor w = leaf(c.input("weight", kFloat64));
      Tensor b = c.has_input("bias") ? leaf(c.input("bias", kFloat64)) : Tensor();
      const bool transposed = c.op() == "conv_transpose3d";
      REQUIRE((transposed || c.op() == "conv3d"));
      const auto p = ops::Conv3dParams()
                         .stride(axes_param(c, "stride"))
                         .padding(axes_param(c, "padding"))
                         .dilation(axes_param(c, "dilation"))
                         .output_padding(axes_param(c, "output_padding"));
      Tensor y = run(transposed, x, w, b, p);
      y.backward(c.input("gy", kFloat64));
      const Tolerance tol = tolerance_for(kFloat64);
      check_close(y, c.output("y", kFloat64), tol, c.where() + " y");
      check_close(x.grad(), c.grad("x", kFloat64), tol, c.where() + " dx");
      check_close(w.grad(), c.grad("weight", kFloat64), tol, c.where() + " dweight");
      if (b.defined()) check_close(b.grad(), c.grad("bias", kFloat64), tol, c.where() + " dbias");
    }
  }
}

TEST_CASE("nn: Conv3d and ConvTranspose3d float32 per-axis options: weight shapes, output shapes, extra_repr") {
  Generator gen(3);
  nn::Conv3d conv(nn::Conv3dOptions(2, 4, {1, 3, 3}).stride({1, 2, 2}).padding({0, 1, 1}), gen);
  CHECK(conv.weight.shape() == Shape{4, 2, 1, 3, 3});
  CHECK(conv.options.kernel_size() == ExpandingArray<3>({1, 3, 3}));
  CHECK(conv.options.stride()[1] == 2);
  CHECK(conv.forward(Tensor::zeros({1, 2, 5, 8, 7})).shape() == Shape{1, 4, 5, 4, 4});
  CHECK(conv.extra_repr() == "2, 4, kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), bias=true");

  nn::Conv3d dilated(nn::Conv3dOptions(1, 1, 3).dilation({2, 1, 1}).padding({2, 1, 1}).bias(false), gen);
  CHECK(dilated.forward(Tensor::zeros({1, 1, 6, 5, 4})).shape() == Shape{1, 1, 6, 5, 4});
  CHECK(dilated.extra_repr() == "1, 1, kernel_size=3, stride=1, padding=(2, 1, 1), dilation=(2, 1, 1), bias=false");

  nn::ConvTranspose3d up(nn::ConvTranspose3dOptions(4, 2, {1, 3, 3}).stride({1, 2, 2}).padding({0, 1, 1}).output_padding({0, 1, 1}),
                         gen);
  CHECK(up.weight.shape() == Shape{4, 2, 1, 3, 3});
  CHECK(up.forward(Tensor::zeros({1, 4, 3, 4, 5})).shape() == Shape{1, 2, 3, 8, 10});
  CHECK(up.extra_repr() ==
        "4, 2, kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), output_padding=(0, 1, 1), bias=true");
}

TEST_CASE("nn: Conv3d and ConvTranspose3d per-axis option errors name the layer") {
  check_error([] { nn::Conv3dOptions(1, 1, {1, 3}); }, {"ExpandingArray<3>", "expected 3 values, got 2"});
  check_error([] { nn::Conv3d(nn::Conv3dOptions(1, 1, {1, 0, 3})); }, {"Conv3d", "kernel_size", "(1, 0, 3)"});
  check_error([] { nn::Conv3d(nn::Conv3dOptions(1, 1, 3).stride({1, 0, 1})); }, {"Conv3d", "stride", "(1, 0, 1)"});
  check_error([] { nn::Conv3d(nn::Conv3dOptions(1, 1, 3).padding({0, -1, 0})); }, {"Conv3d", "padding", "(0, -1, 0)"});
  check_error([] { nn::Conv3d(nn::Conv3dOptions(1, 1, 3).dilation(0)); }, {"Conv3d", "dilation", ">= 1"});
  check_error([] { nn::ConvTranspose3d(nn::ConvTranspose3dOptions(1, 1, 2).stride(2).output_padding({0, 2, 0})); },
              {"ConvTranspose3d", "output_padding", "(0, 2, 0)", "smaller than the stride"});
}

TEST_CASE("ops: conv3d and conv_transpose3d per-axis errors name the op and the shapes") {
  const Tensor x = Tensor::zeros({2, 3, 4, 6, 6});
  const Tensor w = Tensor::zeros({5, 3, 1, 3, 3}), wt = Tensor::zeros({3, 5, 1, 2, 2});
  using ops::Conv3dParams;
  SUBCASE("a list of the wrong length") {
    check_error([] { Conv3dParams().stride({1, 2}); }, {"ExpandingArray<3>", "expected 3 values, got 2"});
    check_error([] { Conv3dParams().padding({0, 1, 1, 1}); }, {"ExpandingArray<3>", "expected 3 values, got 4"});
  }
  SUBCASE("stride 0 on one axis") {
    check_error([&] { ops::conv3d(x, w, Tensor(), Conv3dParams().stride({1, 0, 2})); },
                {"conv3d", "stride", "(1, 0, 2)", "[2, 3, 4, 6, 6]", "[5, 3, 1, 3, 3]"});
    check_error([&] { ops::conv_transpose3d(x, wt, Tensor(), Conv3dParams().stride({0, 2, 2})); },
                {"conv_transpose3d", "stride", "(0, 2, 2)", "[3, 5, 1, 2, 2]"});
  }
  SUBCASE("negative padding") {
    check_error([&] { ops::conv3d(x, w, Tensor(), Conv3dParams().padding({0, -1, 1})); },
                {"conv3d", "padding", "(0, -1, 1)", "[2, 3, 4, 6, 6]"});
  }
  SUBCASE("dilation 0") {
    check_error([&] { ops::conv3d(x, w, Tensor(), Conv3dParams().dilation({1, 1, 0})); },
                {"conv3d", "dilation", "(1, 1, 0)", "[5, 3, 1, 3, 3]"});
    check_error([&] { ops::conv_transpose3d(x, wt, Tensor(), Conv3dParams().dilation(0)); },
                {"conv_transpose3d", "dilation", ">= 1"});
  }
  SUBCASE("output_padding: conv_transpose3d only, below stride or dilation") {
    check_error([&] { ops::conv3d(x, w, Tensor(), Conv3dParams().output_padding({0, 1, 1})); },
                {"conv3d", "output_padding", "conv_transpose3d only", "[2, 3, 4, 6, 6]"});
    check_error([&] { ops::conv_transpose3d(x, wt, Tensor(), Conv3dParams().stride({1, 2, 2}).output_padding({1, 1, 1})); },
                {"conv_transpose3d", "output_padding 1", "stride (1, 2, 2)", "[3, 5, 1, 2, 2]"});
    check_error([&] { ops::conv_transpose3d(x, wt, Tensor(), Conv3dParams().output_padding(-1)); },
                {"conv_transpose3d", "output_padding", ">= 0"});
  }
  SUBCASE("an axis whose output extent is < 1") {
    check_error([&] { ops::conv3d(x, Tensor::zeros({5, 3, 5, 3, 3}), Tensor(), Conv3dParams().padding({0, 1, 1})); },
                {"conv3d", "output extents", "[2, 5, 0, 6, 6]", "padding (0, 1, 1)"});
    check_error([&] { ops::conv3d(x, w, Tensor(), Conv3dParams().dilation({3, 4, 1})); },
                {"conv3d", "output extents", "dilation (3, 4, 1)"});
  }
}
