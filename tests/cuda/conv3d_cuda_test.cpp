// conv3d and conv_transpose3d on CUDA (ops/conv/conv3d_cuda.h) against the CPU op in float64 on the
// same inputs: forward, and dx, dw, db through backward(). Every case runs float32 (FFMA kernels) and
// float16 (Tensor Core kernels), with NCDHW and NDHWC inputs. Inputs are fresh N(0, 1) values; for
// float16 they are rounded to half first and the reference sees the rounded values, so the only
// differences are the GPU's summation order and its output rounding.
//
// Tolerance, on the relative error ||got - ref||_2 / ||ref||_2 of each whole tensor:
//   float32: 1e-5 (FP32 products, FP32 sums of K <= 2000 terms: ~1e-7 * sqrt(K) ~ 5e-6 at worst)
//   float16: 3e-3 (FP32 accumulation of exact FP16 products; the output rounding to half is 2^-11
//            relative, ~3e-4 in norm; no sqrt(K) growth since accumulation is FP32)
// The size grid covers every kernel configuration: Cin 1/3/17 (element gathers) and 8/16/32 (16-byte
// gathers), Cout 3/8/16/24 and 48/80 (the 16, 32, 64 and 128-wide tiles), odd extents (5x7x6),
// stride 1 and 2, padding 0 and 1, kernel 1 and 3, batch 1-3, M over several blocks and wgrad splits;
// the per-axis grid covers nnU-Net's anisotropic (1, 3, 3) kernels and (1, 2, 2) strides, per-axis
// padding, dilation on one axis, output_padding, and the (1, 2, 2) scatter up-convolution.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "ops/conv/conv3d.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

struct ConvCase {
  int64_t n, cin, cout, d, h, w, k, s, p;
  bool bias;
  std::string name() const {
    return "n" + std::to_string(n) + " cin" + std::to_string(cin) + " cout" + std::to_string(cout) + " " +
           std::to_string(d) + "x" + std::to_string(h) + "x" + std::to_string(w) + " k" + std::to_string(k) + " s" +
           std::to_string(s) + " p" + std::to_string(p) + (bias ? " bias" : "");
  }
};

// The per-axis form every case runs as: kernel, stride, padding, dilation, output_padding by axis.
using Axes = std::array<int64_t, 3>;
struct AxesCase {
  int64_t n, cin, cout, d, h, w;
  Axes k, s, p, dil, op;
  bool bias;
  std::string name() const {
    auto str = [](const Axes& a) {
      return "(" + std::to_string(a[0]) + "," + std::to_string(a[1]) + "," + std::to_string(a[2]) + ")";
    };
    return "n" + std::to_string(n) + " cin" + std::to_string(cin) + " cout" + std::to_string(cout) + " " +
           std::to_string(d) + "x" + std::to_string(h) + "x" + std::to_string(w) + " k" + str(k) + " s" + str(s) +
           " p" + str(p) + " d" + str(dil) + " op" + str(op) + (bias ? " bias" : "");
  }
};
AxesCase axes_case(const ConvCase& c) {
  return {c.n, c.cin, c.cout, c.d, c.h, c.w, {c.k, c.k, c.k}, {c.s, c.s, c.s}, {c.p, c.p, c.p}, {1, 1, 1}, {0, 0, 0},
          c.bias};
}

struct Outputs {
  Tensor y, dx, dw, db;
};

// The op (conv3d or conv_transpose3d) forward and backward on copies of the given CPU values.
Outputs run(bool transposed, const AxesCase& c, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy0,
            Device dev, Dtype dt, MemoryFormat fmt) {
  auto place = [&](const Tensor& t) {
    Tensor v = t.cast_copy(dt);
    return dev == Device::CUDA ? to_cuda(v, fmt) : v;
  };
  Tensor x = place(x0), w = place(w0), b = c.bias ? place(b0) : Tensor();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (b.defined()) b.set_requires_grad(true);
  const auto p = ops::Conv3dParams().stride(c.s).padding(c.p).dilation(c.dil).output_padding(c.op);
  Tensor y = transposed ? ops::conv_transpose3d(x, w, b, p) : ops::conv3d(x, w, b, p);
  y.backward(place(gy0));
  return {y, x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

void check_case(bool transposed, const AxesCase& c, uint64_t seed) {
  const int64_t cw0 = transposed ? c.cin : c.cout, cw1 = transposed ? c.cout : c.cin;
  Shape out{c.n, c.cout, 0, 0, 0};
  const int64_t in[3] = {c.d, c.h, c.w};
  for (int i = 0; i < 3; ++i) {
    const int64_t span = c.dil[i] * (c.k[i] - 1) + 1;
    out[2 + i] = transposed ? (in[i] - 1) * c.s[i] - 2 * c.p[i] + span + c.op[i] : (in[i] + 2 * c.p[i] - span) / c.s[i] + 1;
  }
  const Tensor x0 = random_tensor({c.n, c.cin, c.d, c.h, c.w}, seed);
  const Tensor w0 = random_tensor({cw0, cw1, c.k[0], c.k[1], c.k[2]}, seed + 1, kFloat32, 0.3);
  const Tensor b0 = random_tensor({c.cout}, seed + 2);
  const Tensor gy0 = random_tensor(out, seed + 3);
  for (Dtype dt : {kFloat32, kFloat16, kBFloat16}) {
    // The reference sees exactly the values the GPU sees (rounded to half / bfloat16 for those).
    auto as_seen = [&](const Tensor& t) { return t.cast_copy(dt).cast_copy(kFloat64); };
    const Outputs ref = run(transposed, c, as_seen(x0), as_seen(w0), as_seen(b0), as_seen(gy0), Device::CPU, kFloat64,
                            MemoryFormat::Contiguous);
    // BF16 keeps 8 significant bits to FP16's 11: its outputs and gradients carry ~8x the rounding.
    const double tol = dt == kBFloat16 ? 2e-2 : dt == kFloat16 ? 3e-3 : 1e-5;
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      const std::string what = std::string(transposed ? "conv_transpose3d " : "conv3d ") + c.name() + " " +
                               dtype_name(dt) + (fmt == MemoryFormat::ChannelsLast3d ? " NDHWC" : " NCDHW");
      CAPTURE(what);
      const Outputs got = run(transposed, c, x0, w0, b0, gy0, Device::CUDA, dt, fmt);
      CHECK(got.y.is_cuda());
      CHECK(got.y.dtype() == dt);
      CHECK(got.y.memory_format() == fmt);
      CHECK(got.dx.memory_format() == fmt);
      CHECK_MESSAGE(rel_error(got.y, ref.y) < tol, what << " y: " << rel_error(got.y, ref.y));
      CHECK_MESSAGE(rel_error(got.dx, ref.dx) < tol, what << " dx: " << rel_error(got.dx, ref.dx));
      CHECK_MESSAGE(rel_error(got.dw, ref.dw) < tol, what << " dw: " << rel_error(got.dw, ref.dw));
      if (c.bias) CHECK_MESSAGE(rel_error(got.db, ref.db) < tol, what << " db: " << rel_error(got.db, ref.db));
    }
  }
}

}  // namespace

CUDA_TEST_CASE("conv3d cuda f32/f16 NCDHW/NDHWC fprop dgrad wgrad: size grid vs CPU float64") {
  const std::vector<ConvCase> cases = {
      // n cin cout  d  h  w  k  s  p  bias
      {1, 1, 16, 5, 7, 6, 3, 1, 1, false},    // the U-Net's first layer (Cin = 1: element gather, K = 27)
      {2, 3, 8, 5, 7, 6, 3, 1, 1, true},
      {2, 8, 16, 6, 5, 7, 3, 1, 1, false},
      {1, 16, 24, 5, 7, 6, 3, 2, 1, true},    // stride 2 (dgrad with predicated taps)
      {3, 17, 3, 5, 6, 7, 3, 1, 0, true},     // odd channels both sides, padding 0
      {2, 32, 16, 4, 5, 6, 1, 1, 0, true},    // pointwise
      {1, 16, 3, 5, 7, 6, 1, 1, 0, true},     // the head (Cout = 3)
      {2, 8, 8, 6, 6, 7, 3, 2, 0, false},     // stride 2, padding 0
      {1, 32, 24, 7, 5, 6, 3, 1, 1, false},   // K = 864: 27 pipeline slices
      {1, 24, 48, 3, 4, 5, 3, 1, 1, true},    // 128x64 fprop tile, 64-row wgrad tile
      {1, 16, 80, 4, 5, 3, 3, 1, 1, true},    // 128x128 fprop tile, 128-row wgrad tile
      {1, 72, 8, 3, 3, 4, 3, 1, 1, false},    // dgrad N = 72 (128x128 tile), wgrad K = 1944
      {2, 8, 16, 12, 11, 13, 3, 1, 1, true},  // M = 3432: many blocks, several wgrad splits
  };
  uint64_t seed = 100;
  for (const ConvCase& c : cases) check_case(false, axes_case(c), seed += 10);
}

CUDA_TEST_CASE("conv_transpose3d cuda f32/f16 NCDHW/NDHWC k2s2 scatter GEMM and general dgrad path vs CPU float64") {
  const std::vector<ConvCase> cases = {
      {2, 16, 8, 3, 4, 5, 2, 2, 0, true},   // the U-Net's up-convolution
      {1, 8, 3, 2, 3, 2, 2, 2, 0, true},    // odd Cout in the scatter epilogue
      {1, 32, 16, 3, 3, 3, 2, 2, 0, false},
      {1, 8, 5, 3, 4, 3, 3, 2, 1, true},    // general: kernel 3 stride 2 padding 1
      {2, 3, 8, 4, 3, 5, 3, 1, 1, false},   // general, stride 1, Cin = 3
  };
  uint64_t seed = 900;
  for (const ConvCase& c : cases) check_case(true, axes_case(c), seed += 10);
}

CUDA_TEST_CASE("conv3d cuda f32/f16 NCDHW/NDHWC per-axis kernel/stride/padding/dilation: anisotropic grid vs CPU float64") {
  const std::vector<AxesCase> cases = {
      // n cin cout  d  h  w   kernel     stride     padding    dilation   output_padding
      {2, 16, 32, 4, 9, 8, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, true},   // nnU-Net in-plane conv
      {2, 16, 32, 4, 9, 8, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, false},  // in-plane downsampling
      {1, 1, 16, 5, 9, 7, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, false},   // Cin = 1, K = 9
      {1, 8, 24, 7, 5, 6, {3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}, true},    // through-plane, stride on D
      {1, 8, 16, 7, 5, 6, {3, 1, 3}, {1, 1, 1}, {2, 0, 1}, {2, 1, 1}, {0, 0, 0}, true},    // dilation 2 on D
      {2, 3, 8, 5, 8, 7, {2, 3, 2}, {1, 1, 3}, {1, 0, 0}, {1, 2, 1}, {0, 0, 0}, false},    // dilation on H, stride on W
      {1, 17, 80, 3, 6, 5, {3, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, true},   // cubic kernel, per-axis padding
      {1, 8, 16, 7, 6, 5, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, true},   // cubic, dilated: not Cubic3
      {1, 8, 16, 7, 6, 5, {3, 3, 3}, {1, 1, 2}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, false},  // cubic, stride 2 on W only
      {2, 32, 48, 3, 12, 11, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, true}, // 128x64 tiles, wgrad splits
  };
  uint64_t seed = 2000;
  for (const AxesCase& c : cases) check_case(false, c, seed += 10);
}

CUDA_TEST_CASE("conv_transpose3d cuda f32/f16 NCDHW/NDHWC per-axis: (1,2,2) scatter GEMM, output_padding, dilation vs CPU float64") {
  const std::vector<AxesCase> cases = {
      {2, 32, 16, 3, 4, 5, {1, 2, 2}, {1, 2, 2}, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, true},   // nnU-Net's in-plane upsampling
      {1, 8, 3, 2, 3, 2, {2, 2, 1}, {2, 2, 1}, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, true},     // scatter, odd Cout
      {1, 8, 5, 3, 4, 5, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, {0, 1, 1}, true},     // output_padding (0, 1, 1)
      {1, 16, 8, 3, 4, 3, {2, 3, 3}, {1, 2, 2}, {1, 1, 0}, {2, 1, 1}, {1, 1, 1}, false},   // op 1 < dilation 2 on D
      {1, 8, 8, 2, 3, 3, {1, 2, 2}, {1, 2, 2}, {0, 0, 0}, {1, 1, 1}, {0, 1, 0}, true},     // kernel == stride + op: general path
  };
  uint64_t seed = 3000;
  for (const AxesCase& c : cases) check_case(true, c, seed += 10);
}

CUDA_TEST_CASE("conv3d cuda autocast: FP32 NDHWC model runs in FP16, FP32 weight gradient through the cast") {
  const ConvCase c{2, 16, 16, 6, 5, 7, 3, 1, 1, true};
  const Tensor x0 = random_tensor({c.n, c.cin, c.d, c.h, c.w}, 7);
  const Tensor w0 = random_tensor({c.cout, c.cin, 3, 3, 3}, 8, kFloat32, 0.3);
  const Tensor b0 = random_tensor({c.cout}, 9);
  const Tensor gy0 = random_tensor({c.n, c.cout, c.d, c.h, c.w}, 10);
  Tensor x = to_cuda(x0, MemoryFormat::ChannelsLast3d), w = to_cuda(w0), b = to_cuda(b0);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y;
  {
    amp::AutocastGuard guard;
    y = ops::conv3d(x, w, b, ops::Conv3dParams().padding(1));
  }
  CHECK(y.dtype() == kFloat16);
  CHECK(y.is_channels_last());
  y.backward(to_cuda(gy0.cast_copy(kFloat16), MemoryFormat::ChannelsLast3d));
  CHECK(w.grad().dtype() == kFloat32);
  auto h = [](const Tensor& t) { return t.cast_copy(kFloat16).cast_copy(kFloat64); };
  Tensor xr = h(x0), wr = h(w0).set_requires_grad(true), br = h(b0).set_requires_grad(true);
  Tensor yr = ops::conv3d(xr, wr, br, ops::Conv3dParams().padding(1));
  yr.backward(h(gy0));
  CHECK(rel_error(y, yr) < 3e-3);
  CHECK(rel_error(w.grad(), wr.grad()) < 3e-3);
  CHECK(rel_error(b.grad(), br.grad()) < 3e-3);
}

CUDA_TEST_CASE("conv3d cuda: operands on different devices are an error naming the op") {
  const Tensor x = to_cuda(random_tensor({1, 2, 4, 4, 4}, 1));
  const Tensor w = random_tensor({3, 2, 3, 3, 3}, 2);
  check_error([&] { ops::conv3d(x, w, Tensor()); }, {"conv3d", "weight", "cpu", "cuda"});
  check_error([&] { ops::conv3d(x, to_cuda(w), random_tensor({3}, 3)); }, {"conv3d", "bias"});
  const Tensor wt = random_tensor({2, 3, 2, 2, 2}, 4);
  check_error([&] { ops::conv_transpose3d(x, wt, Tensor(), ops::Conv3dParams().stride(2)); }, {"conv_transpose3d", "weight"});
}
