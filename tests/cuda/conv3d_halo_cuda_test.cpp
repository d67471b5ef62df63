// The halo-tiled "same" 3x3x3 conv3d kernels (ops/conv/conv3d_fprop_halo_cuda.cu): conv3d's forward and
// input gradient (and conv_transpose3d's forward, through the same dgrad launcher) in FP16 and BF16,
// against the implicit GEMM they replace for these shapes (the oracle, forced by ForceImplicitGemm,
// conv_halo_path.h) and against the CPU op in float64 on the same rounded inputs.
//
// Tolerance, as tests/cuda/conv3d_cuda_test.cpp: relative error ||got - ref||_2 / ||ref||_2 of the whole
// tensor below 3e-3 (float16) and 2e-2 (bfloat16): FP32 accumulation of exact 16-bit products, one
// output rounding. Halo and implicit GEMM sum in different orders, so they are compared by the same
// tolerance, not bit for bit; the halo path against itself is compared bit for bit.
//
// Shapes: every instantiated kernel, forward and transposed (the dgrad's flipped-tap convention):
//   conv Cin -> Cout   fprop kernel            dgrad kernel (gathered Cout, N = Cin)
//   16 -> 16           mma <C 16, N 16>        mma <16, 16> transposed
//   32 -> 16           mma <32, 16>            mma <16, 32> transposed
//   16 -> 32           mma <16, 32>            mma <32, 16> transposed
//   32 -> 32           mma <32, 32>            mma <32, 32> transposed
//   1 -> 16, 1 -> 32   direct <16>, <32>       (N = 1: implicit GEMM)
//   16 -> 1            (N = 1: implicit GEMM)  direct <16> transposed
// on (2, C, 12, 10, 9) (tiles of 8^3 that stick out on every axis), (1, C, 3, 5, 4) (a volume smaller
// than one tile) and (1, C, 8, 8, 16) (whole tiles), with and without bias, NCDHW and NDHWC.
#include <cmath>
#include <string>
#include <vector>

#include "ops/conv/conv3d.h"
#include "ops/conv/conv_halo_path.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

struct HaloCase {
  int64_t n, cin, cout, d, h, w;
  bool bias;
  std::string name() const {
    return "n" + std::to_string(n) + " cin" + std::to_string(cin) + " cout" + std::to_string(cout) + " " +
           std::to_string(d) + "x" + std::to_string(h) + "x" + std::to_string(w) + (bias ? " bias" : "");
  }
  ops::conv::ConvGeometry geometry() const { return ops::conv::make_geometry(n, cin, cout, d, h, w, 3, 1, 1); }
};

struct Result {
  Tensor y, dx;
};

// conv3d(x, w, b, padding 1) and dx through backward (w does not require grad: no weight gradient).
Result run(const HaloCase& c, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy0, Device dev, Dtype dt,
           MemoryFormat fmt) {
  auto place = [&](const Tensor& t) {
    Tensor v = t.cast_copy(dt);
    return dev == Device::CUDA ? to_cuda(v, fmt) : v;
  };
  Tensor x = place(x0), w = place(w0), b = c.bias ? place(b0) : Tensor();
  x.set_requires_grad(true);
  Tensor y = ops::conv3d(x, w, b, ops::Conv3dParams().padding(1));
  y.backward(place(gy0));
  return {y, x.grad()};
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.to_double_vector() == b.to_double_vector(); }

void check_case(const HaloCase& c, uint64_t seed) {
  const ops::conv::ConvGeometry g = c.geometry();
  const Tensor x0 = random_tensor({c.n, c.cin, c.d, c.h, c.w}, seed);
  const Tensor w0 = random_tensor({c.cout, c.cin, 3, 3, 3}, seed + 1, kFloat32, 0.3);
  const Tensor b0 = random_tensor({c.cout}, seed + 2);
  const Tensor gy0 = random_tensor({c.n, c.cout, c.d, c.h, c.w}, seed + 3);
  for (Dtype dt : {kFloat16, kBFloat16}) {
    // The cases are chosen so that the halo path runs: fprop where Cout is 16 or 32, dgrad where Cin is.
    const bool fprop_halo = c.cout == 16 || c.cout == 32, dgrad_halo = c.cin == 16 || c.cin == 32;
    CHECK(ops::conv::halo_conv_applies(g, dt, /*dgrad=*/false) == fprop_halo);
    CHECK(ops::conv::halo_conv_applies(g, dt, /*dgrad=*/true) == dgrad_halo);
    CHECK_FALSE(ops::conv::halo_conv_applies(g, kFloat32, false));
    auto as_seen = [&](const Tensor& t) { return t.cast_copy(dt).cast_copy(kFloat64); };
    const Result ref = run(c, as_seen(x0), as_seen(w0), as_seen(b0), as_seen(gy0), Device::CPU, kFloat64,
                           MemoryFormat::Contiguous);
    const double tol = dt == kBFloat16 ? 2e-2 : 3e-3;
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      const std::string what =
          "conv3d halo " + c.name() + " " + dtype_name(dt) + (fmt == MemoryFormat::ChannelsLast3d ? " NDHWC" : " NCDHW");
      CAPTURE(what);
      const Result halo = run(c, x0, w0, b0, gy0, Device::CUDA, dt, fmt);
      Result oracle;
      {
        ops::conv::ForceImplicitGemm force;
        CHECK_FALSE(ops::conv::halo_conv_applies(g, dt, false));
        oracle = run(c, x0, w0, b0, gy0, Device::CUDA, dt, fmt);
      }
      CHECK(ops::conv::halo_conv_applies(g, dt, false) == fprop_halo);  // the guard restored the state
      CHECK(halo.y.dtype() == dt);
      CHECK(halo.y.memory_format() == fmt);
      CHECK(halo.dx.memory_format() == fmt);
      CHECK_MESSAGE(rel_error(halo.y, ref.y) < tol, what << " y vs CPU: " << rel_error(halo.y, ref.y));
      CHECK_MESSAGE(rel_error(halo.dx, ref.dx) < tol, what << " dx vs CPU: " << rel_error(halo.dx, ref.dx));
      CHECK_MESSAGE(rel_error(halo.y, oracle.y) < tol, what << " y vs implicit GEMM: " << rel_error(halo.y, oracle.y));
      CHECK_MESSAGE(rel_error(halo.dx, oracle.dx) < tol, what << " dx vs implicit GEMM: " << rel_error(halo.dx, oracle.dx));
      const Result again = run(c, x0, w0, b0, gy0, Device::CUDA, dt, fmt);
      CHECK_MESSAGE(same_bits(halo.y, again.y), what << ": y differs between two runs");
      CHECK_MESSAGE(same_bits(halo.dx, again.dx), what << ": dx differs between two runs");
    }
  }
}

}  // namespace

CUDA_TEST_CASE("conv3d cuda halo f16/bf16 NCDHW/NDHWC k3 s1 p1 fprop and dgrad: every kernel vs implicit GEMM and CPU float64") {
  const std::vector<HaloCase> cases = {
      // n cin cout  d   h   w  bias
      {2, 16, 16, 12, 10, 9, true},   // tiles stick out on every axis
      {2, 16, 16, 12, 10, 9, false},
      {1, 16, 16, 3, 5, 4, true},     // smaller than one tile
      {1, 16, 16, 8, 8, 16, false},   // whole tiles
      {2, 1, 16, 12, 10, 9, true},    // the first layer: direct kernel
      {1, 1, 16, 3, 5, 4, false},
      {1, 1, 32, 9, 8, 7, true},      // direct kernel, N = 32
      {2, 32, 16, 12, 10, 9, true},   // fprop C 32 N 16; dgrad C 16 N 32
      {1, 32, 16, 3, 5, 4, false},
      {2, 16, 32, 12, 10, 9, false},  // fprop C 16 N 32; dgrad C 32 N 16
      {1, 16, 32, 8, 8, 16, true},
      {1, 32, 32, 9, 10, 11, true},   // both C 32 N 32
      {2, 16, 1, 12, 10, 9, true},    // dgrad through the direct kernel (gathered Cout = 1), transposed taps
  };
  uint64_t seed = 5000;
  for (const HaloCase& c : cases) check_case(c, seed += 10);
}

CUDA_TEST_CASE("conv_transpose3d cuda halo f16/bf16 k3 s1 p1 with bias: the dgrad kernel's epilogue vs CPU float64") {
  // conv_transpose3d with kernel 3, stride 1, padding 1 is dgrad_with_bias of its adjoint convolution:
  // the halo kernel on the transposed gather, bias in the epilogue.
  for (Dtype dt : {kFloat16, kBFloat16}) {
    for (int64_t cout : {16, 32}) {
      const int64_t cin = 16;  // conv_transpose3d's input channels: the gathered ones (16 or 32)
      const Tensor x0 = random_tensor({2, cin, 7, 10, 9}, 70 + cout);
      const Tensor w0 = random_tensor({cin, cout, 3, 3, 3}, 71 + cout, kFloat32, 0.3);  // (Cin_t, Cout_t, k)
      const Tensor b0 = random_tensor({cout}, 72 + cout);
      const ops::conv::ConvGeometry adjoint = ops::conv::make_geometry(2, cout, cin, 7, 10, 9, 3, 1, 1);
      CHECK(ops::conv::halo_conv_applies(adjoint, dt, /*dgrad=*/true));
      auto as_seen = [&](const Tensor& t) { return t.cast_copy(dt).cast_copy(kFloat64); };
      const Tensor ref = ops::conv_transpose3d(as_seen(x0), as_seen(w0), as_seen(b0), ops::Conv3dParams().padding(1));
      const Tensor got = ops::conv_transpose3d(to_cuda(x0.cast_copy(dt), MemoryFormat::ChannelsLast3d),
                                               to_cuda(w0.cast_copy(dt)), to_cuda(b0.cast_copy(dt)),
                                               ops::Conv3dParams().padding(1));
      const double tol = dt == kBFloat16 ? 2e-2 : 3e-3;
      CHECK_MESSAGE(rel_error(got, ref) < tol, std::string(dtype_name(dt)) << " cout " << cout << ": " << rel_error(got, ref));
    }
  }
}
