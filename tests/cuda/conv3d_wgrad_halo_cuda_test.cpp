// The halo-tiled conv3d weight gradient (ops/conv/conv3d_wgrad_halo_cuda.cu) against the implicit-GEMM
// wgrad it replaces for the "same" 3x3x3 layers (conv3d_wgrad_cuda.cu, forced through
// conv3d_wgrad_paths.h) and against the CPU conv3d in float64 on the same inputs (rounded to the
// dtype first, so the differences are the GPU's FP32 summation order and its one output rounding).
//
// Tolerances: against the CPU, the relative error ||got - ref||_2 / ||ref||_2 of conv3d_cuda_test.cpp
// (float16 3e-3, bfloat16 2e-2). Halo against implicit GEMM, elementwise: both round an FP32 sum of
// the same exact products once, so they differ by at most about one unit in the last place of the
// dtype (rtol 2^-9 for float16, 2^-6 for bfloat16) plus FP32 summation-order noise on elements that
// cancel (atol 1e-3 of the largest |dw|). Two runs of the halo kernel give the same bits.
//
// Shapes: the level-0 layers' channel pairs (16->16, 1->16, 32->16, and 16->32) on odd extents
// (2, 12, 10, 9) whose tiles (4 x 8 x 8) stick out on every axis, padded channels (8->8, 24->24),
// volumes smaller than one tile, and volumes with more tiles than blocks (each block's pipeline runs
// over several tiles; checked against the implicit GEMM only, the CPU reference would be slow).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/conv/conv3d.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"

#ifdef HALFGRAD_CUDA
#include "ops/conv/conv3d_cuda.h"
#include "ops/conv/conv3d_wgrad_paths.h"
#endif

using namespace halfgrad;
using namespace halfgrad::testing;

#ifdef HALFGRAD_CUDA
namespace {

using ops::conv::WgradPath;

struct WgradCase {
  int64_t n, cin, cout, d, h, w;
  std::string name() const {
    return "n" + std::to_string(n) + " cin" + std::to_string(cin) + " cout" + std::to_string(cout) + " " +
           std::to_string(d) + "x" + std::to_string(h) + "x" + std::to_string(w);
  }
};

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_double_vector()) m = std::max(m, std::fabs(v));
  return m;
}

// dw (Cout, Cin, 3, 3, 3) of the CPU conv3d (padding 1) in float64 on x0, gy0 as the dtype sees them.
Tensor cpu_wgrad(const WgradCase& c, const Tensor& x0, const Tensor& gy0, Dtype dt) {
  auto as_seen = [&](const Tensor& t) { return t.cast_copy(dt).cast_copy(kFloat64); };
  Tensor w = Tensor::zeros({c.cout, c.cin, 3, 3, 3}, kFloat64);
  w.set_requires_grad(true);
  Tensor y = ops::conv3d(as_seen(x0), w, Tensor(), ops::Conv3dParams().padding(1));
  y.backward(as_seen(gy0));
  return w.grad();
}

// Halo against the implicit GEMM (and the CPU where `with_cpu`), both dtypes, and bits twice.
void check_case(const WgradCase& c, uint64_t seed, bool with_cpu) {
  const Tensor x0 = random_tensor({c.n, c.cin, c.d, c.h, c.w}, seed);
  const Tensor gy0 = random_tensor({c.n, c.cout, c.d, c.h, c.w}, seed + 1);
  const auto g = ops::conv::make_geometry(c.n, c.cin, c.cout, c.d, c.h, c.w, 3, 1, 1);
  for (Dtype dt : {kFloat16, kBFloat16}) {
    const std::string what = "conv3d wgrad halo " + c.name() + " " + dtype_name(dt) + " NDHWC";
    CAPTURE(what);
    const Tensor x = to_cuda(x0.cast_copy(dt), MemoryFormat::ChannelsLast3d);
    const Tensor gy = to_cuda(gy0.cast_copy(dt), MemoryFormat::ChannelsLast3d);
    REQUIRE(ops::conv::cuda_conv3d_wgrad_auto_path(g, dt) == WgradPath::kHalo);
    const Tensor halo = ops::conv::cuda_conv3d_wgrad_on(g, x, gy, MemoryFormat::Contiguous, WgradPath::kHalo);
    const Tensor again = ops::conv::cuda_conv3d_wgrad_on(g, x, gy, MemoryFormat::Contiguous, WgradPath::kHalo);
    const Tensor igemm = ops::conv::cuda_conv3d_wgrad_on(g, x, gy, MemoryFormat::Contiguous, WgradPath::kImplicitGemm);
    const Tensor automatic = ops::conv::cuda_conv3d_wgrad(g, x, gy, MemoryFormat::Contiguous);
    CHECK(halo.dtype() == dt);
    CHECK(halo.shape() == Shape({c.cout, c.cin, 3, 3, 3}));
    CHECK_MESSAGE(halo.to_double_vector() == again.to_double_vector(), what << ": two runs differ");
    CHECK_MESSAGE(halo.to_double_vector() == automatic.to_double_vector(), what << ": the automatic path is not the halo kernel");
    const double rtol = dt == kBFloat16 ? 1.0 / 64 : 1.0 / 512;
    check_close(halo, igemm, rtol, 1e-3 * max_abs(igemm), what + " vs implicit GEMM");
    if (with_cpu) {
      const Tensor ref = cpu_wgrad(c, x0, gy0, dt);
      const double tol = dt == kBFloat16 ? 2e-2 : 3e-3;
      CHECK_MESSAGE(rel_error(halo, ref) < tol, what << " halo vs CPU: " << rel_error(halo, ref));
      CHECK_MESSAGE(rel_error(igemm, ref) < tol, what << " implicit GEMM vs CPU: " << rel_error(igemm, ref));
    }
  }
}

}  // namespace
#endif

CUDA_TEST_CASE("conv3d wgrad halo cuda f16/bf16 NDHWC 3x3x3 padding 1: level-0 channels, odd extents vs implicit GEMM and CPU float64") {
#ifdef HALFGRAD_CUDA
  const std::vector<WgradCase> cases = {
      // n cin cout  d   h  w
      {2, 16, 16, 12, 10, 9},  // the 16->16 layer; tiles stick out on every axis
      {2, 1, 16, 12, 10, 9},   // the first layer (Cin = 1: N = taps)
      {2, 32, 16, 12, 10, 9},  // the decoder's 32->16
      {2, 16, 32, 12, 10, 9},  // Cout = 32 (two MMA rows)
      {1, 1, 32, 5, 9, 7},     // Cin = 1, Cout = 32
      {1, 8, 8, 5, 9, 7},      // channels padded to 16 in shared memory
      {1, 24, 24, 6, 5, 17},   // channels padded to 32
      {1, 16, 16, 3, 5, 4},    // a volume smaller than one tile
      {1, 1, 16, 2, 3, 5},     // the same, Cin = 1
      {1, 32, 32, 1, 1, 1},    // one voxel: only the centre tap sees data
  };
  uint64_t seed = 5000;
  for (const WgradCase& c : cases) check_case(c, seed += 10, /*with_cpu=*/true);
#endif
}

CUDA_TEST_CASE("conv3d wgrad halo cuda f16/bf16 NDHWC: more tiles than blocks (persistent pipeline) vs implicit GEMM") {
#ifdef HALFGRAD_CUDA
  const std::vector<WgradCase> cases = {
      {8, 16, 16, 32, 32, 32},  // 1024 tiles: several per block on any GPU of <= 256 resident blocks
      {8, 1, 16, 32, 32, 32},
      {4, 32, 16, 32, 32, 33},  // 32->16, partial tiles in x
  };
  uint64_t seed = 6000;
  for (const WgradCase& c : cases) check_case(c, seed += 10, /*with_cpu=*/false);
#endif
}

CUDA_TEST_CASE("conv3d wgrad halo cuda: unsupported problems take the implicit GEMM; forcing the halo kernel is an error naming the op") {
#ifdef HALFGRAD_CUDA
  using ops::conv::make_geometry;
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 16, 16, 8, 8, 8, 3, 1, 1), kFloat32) == WgradPath::kImplicitGemm);
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 16, 16, 8, 8, 8, 3, 2, 1), kFloat16) == WgradPath::kImplicitGemm);
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 16, 16, 8, 8, 8, 3, 1, 0), kFloat16) == WgradPath::kImplicitGemm);
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 3, 16, 8, 8, 8, 3, 1, 1), kFloat16) == WgradPath::kImplicitGemm);
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 64, 16, 8, 8, 8, 3, 1, 1), kFloat16) == WgradPath::kImplicitGemm);
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 16, 48, 8, 8, 8, 3, 1, 1), kFloat16) == WgradPath::kImplicitGemm);
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 16, 12, 8, 8, 8, 3, 1, 1), kBFloat16) == WgradPath::kImplicitGemm);
  CHECK(ops::conv::cuda_conv3d_wgrad_auto_path(make_geometry(1, 16, 16, 8, 8, 8, 1, 1, 0), kFloat16) == WgradPath::kImplicitGemm);
  const auto g = make_geometry(1, 3, 16, 6, 6, 6, 3, 1, 1);
  const Tensor x = to_cuda(random_tensor({1, 3, 6, 6, 6}, 1).cast_copy(kFloat16), MemoryFormat::ChannelsLast3d);
  const Tensor gy = to_cuda(random_tensor({1, 16, 6, 6, 6}, 2).cast_copy(kFloat16), MemoryFormat::ChannelsLast3d);
  check_error([&] { ops::conv::cuda_conv3d_wgrad_on(g, x, gy, MemoryFormat::Contiguous, WgradPath::kHalo); },
              {"conv3d backward (weight gradient)", "halo wgrad", "Cin 3"});
  const Tensor x32 = to_cuda(random_tensor({1, 3, 6, 6, 6}, 1), MemoryFormat::ChannelsLast3d);
  const Tensor gy32 = to_cuda(random_tensor({1, 16, 6, 6, 6}, 2), MemoryFormat::ChannelsLast3d);
  check_error([&] { ops::conv::cuda_conv3d_wgrad_on(g, x32, gy32, MemoryFormat::Contiguous, WgradPath::kHalo); },
              {"conv3d backward (weight gradient)", "halo wgrad", "float32"});
#endif
}

CUDA_TEST_CASE("conv_transpose3d cuda f16/bf16 NDHWC k3 s1 p1 16->8: the weight gradient with x and dy swapped runs the halo kernel, vs CPU float64") {
#ifdef HALFGRAD_CUDA
  // conv_transpose3d's dw is wgrad of its adjoint conv3d G (Cin_G = 8 = Cout_t, Cout_G = 16 = Cin_t)
  // with its output gradient as G's input (conv3d.cpp): the same "same" 3x3x3 geometry.
  REQUIRE(ops::conv::cuda_conv3d_wgrad_auto_path(ops::conv::make_geometry(2, 8, 16, 5, 6, 7, 3, 1, 1), kFloat16) ==
          WgradPath::kHalo);
  const Tensor x0 = random_tensor({2, 16, 5, 6, 7}, 71);
  const Tensor w0 = random_tensor({16, 8, 3, 3, 3}, 72, kFloat32, 0.3);
  const Tensor gy0 = random_tensor({2, 8, 5, 6, 7}, 73);
  const auto p = ops::Conv3dParams().padding(1);
  for (Dtype dt : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    auto as_seen = [&](const Tensor& t) { return t.cast_copy(dt).cast_copy(kFloat64); };
    Tensor wr = as_seen(w0);
    wr.set_requires_grad(true);
    ops::conv_transpose3d(as_seen(x0), wr, Tensor(), p).backward(as_seen(gy0));
    Tensor w = to_cuda(w0.cast_copy(dt));
    w.set_requires_grad(true);
    ops::conv_transpose3d(to_cuda(x0.cast_copy(dt), MemoryFormat::ChannelsLast3d), w, Tensor(), p)
        .backward(to_cuda(gy0.cast_copy(dt), MemoryFormat::ChannelsLast3d));
    const double tol = dt == kBFloat16 ? 2e-2 : 3e-3;
    CHECK_MESSAGE(rel_error(w.grad(), wr.grad()) < tol, std::string(dtype_name(dt)) << " dw: " << rel_error(w.grad(), wr.grad()));
  }
#endif
}
