// Split-K of the Tensor Core implicit GEMM (ops/conv/conv3d_fprop_cuda.cu, rule in conv_split_k.h):
// conv3d's forward and input gradient (through autograd's backward, so cuda_conv3d_dgrad's launcher)
// and conv_transpose3d's forward (the scatter epilogue and dgrad_with_bias' bias), FP16 and BF16,
// NCDHW and NDHWC, with bias, each computed
//   * unsplit (ForceSplitK(1): the single kernel, the oracle),
//   * by the rule (no ForceSplitK: on a 132-SM H200 the 256- and 128-channel layers split; checked
//     through a lower bound of the rule, the launcher's occupancy query being private),
//   * with forced slice counts, among them more slices than K-blocks (empty slices write zeros),
// against the CPU op in float64 on the same rounded inputs, against the oracle, and against itself on
// a second run, bit for bit (the slices are added in a fixed order).
//
// Tolerance, as tests/cuda/conv3d_cuda_test.cpp: relative error ||got - ref||_2 / ||ref||_2 of the
// whole tensor below 3e-3 (float16) and 2e-2 (bfloat16): FP32 accumulation of exact 16-bit products,
// one output rounding. Split and unsplit sum in different orders (per slice, then across slices), so
// they are compared by that tolerance, not bit for bit.
//
// Shapes (M = batch x volume; fprop N = Cout, K = 27 Cin; dgrad N = Cin, K = 27 Cout):
//   256 -> 256 at 4^3, batch 4:  M 256, 216 K-blocks both passes (the layer split-K is for)
//   128 -> 128 at 8^3, batch 4:  M 2048, 108 K-blocks
//   64 -> 64 at 16^3, batch 1:   M 4096, the 128 x 64 tile (32 tiles), 54 K-blocks
//   40 -> 24 at 3x5x7, batch 2:  M 210 (a short second row tile), fprop K 1080 = 33 blocks + 24 columns,
//                                dgrad K 648 = 20 blocks + 8; 40 slices: empty slices in both passes
//   17 -> 5 at 3x5x7, batch 2:   odd N (5 and 17: the element-wise partial stores), element gathers
//                                (C 17 and 5), 15 and 5 K-blocks; 16 slices: empty ones
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "ops/conv/conv3d.h"
#include "ops/conv/conv_split_k.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;
using namespace halfgrad::testing;
using halfgrad::ops::conv::ForceSplitK;

namespace {

struct SplitCase {
  int64_t n, cin, cout, d, h, w;
  bool bias;
  std::vector<int> forced;  // slice counts to force, beside 1 and the rule's
  std::string name() const {
    return "n" + std::to_string(n) + " cin" + std::to_string(cin) + " cout" + std::to_string(cout) + " " +
           std::to_string(d) + "x" + std::to_string(h) + "x" + std::to_string(w) + (bias ? " bias" : "");
  }
};

struct Result {
  Tensor y, dx;
};

// conv3d(x, w, b, padding 1) and dx through backward (w does not require grad: no weight gradient).
Result run(const SplitCase& c, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy0, Device dev, Dtype dt,
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

// A lower bound of the rule's slice count for an M x N x K implicit GEMM on this GPU (tiles of 128
// rows, 16..128 columns): split_k_slices with a wave of one block per SM. The launcher's wave counts
// every resident block (>= 1 per SM) and the rule never gives fewer slices for a larger wave.
int rule_slices_at_least(int64_t M, int64_t N, int64_t K) {
  const int64_t bn = N <= 16 ? 16 : N <= 32 ? 32 : N <= 64 ? 64 : 128;
  const int64_t tiles = ((M + 127) / 128) * ((N + bn - 1) / bn);
  return ops::conv::split_k_slices(tiles, (K + 31) / 32, M, N, cuda::sm_count());
}

void check_case(const SplitCase& c, uint64_t seed) {
  const Tensor x0 = random_tensor({c.n, c.cin, c.d, c.h, c.w}, seed);
  const Tensor w0 = random_tensor({c.cout, c.cin, 3, 3, 3}, seed + 1, kFloat32, 0.3);
  const Tensor b0 = random_tensor({c.cout}, seed + 2);
  const Tensor gy0 = random_tensor({c.n, c.cout, c.d, c.h, c.w}, seed + 3);
  const int64_t M = c.n * c.d * c.h * c.w;
  const int fprop_rule = rule_slices_at_least(M, c.cout, 27 * c.cin), dgrad_rule = rule_slices_at_least(M, c.cin, 27 * c.cout);
  MESSAGE(c.name() << ": the rule splits fprop into >= " << fprop_rule << ", dgrad into >= " << dgrad_rule
                   << " slices on " << cuda::sm_count() << " SMs");
  for (Dtype dt : {kFloat16, kBFloat16}) {
    auto as_seen = [&](const Tensor& t) { return t.cast_copy(dt).cast_copy(kFloat64); };
    const Result ref = run(c, as_seen(x0), as_seen(w0), as_seen(b0), as_seen(gy0), Device::CPU, kFloat64,
                           MemoryFormat::Contiguous);
    const double tol = dt == kBFloat16 ? 2e-2 : 3e-3;
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      const std::string base =
          "conv3d split-K " + c.name() + " " + dtype_name(dt) + (fmt == MemoryFormat::ChannelsLast3d ? " NDHWC" : " NCDHW");
      Result oracle;
      {
        ForceSplitK unsplit(1);
        oracle = run(c, x0, w0, b0, gy0, Device::CUDA, dt, fmt);
      }
      CHECK_MESSAGE(rel_error(oracle.y, ref.y) < tol, base << " unsplit y vs CPU: " << rel_error(oracle.y, ref.y));
      CHECK_MESSAGE(rel_error(oracle.dx, ref.dx) < tol, base << " unsplit dx vs CPU: " << rel_error(oracle.dx, ref.dx));
      std::vector<int> counts = {0};  // 0: no ForceSplitK, the rule's count
      counts.insert(counts.end(), c.forced.begin(), c.forced.end());
      for (int slices : counts) {
        const std::string what = base + (slices == 0 ? " rule" : " " + std::to_string(slices) + " slices");
        CAPTURE(what);
        Result got, again;
        {
          std::optional<ForceSplitK> force;
          if (slices > 0) force.emplace(slices);
          got = run(c, x0, w0, b0, gy0, Device::CUDA, dt, fmt);
          again = run(c, x0, w0, b0, gy0, Device::CUDA, dt, fmt);
        }
        CHECK(got.y.dtype() == dt);
        CHECK(got.y.memory_format() == fmt);
        CHECK(got.dx.memory_format() == fmt);
        CHECK_MESSAGE(rel_error(got.y, ref.y) < tol, what << " y vs CPU: " << rel_error(got.y, ref.y));
        CHECK_MESSAGE(rel_error(got.dx, ref.dx) < tol, what << " dx vs CPU: " << rel_error(got.dx, ref.dx));
        CHECK_MESSAGE(rel_error(got.y, oracle.y) < tol, what << " y vs unsplit: " << rel_error(got.y, oracle.y));
        CHECK_MESSAGE(rel_error(got.dx, oracle.dx) < tol, what << " dx vs unsplit: " << rel_error(got.dx, oracle.dx));
        CHECK_MESSAGE(same_bits(got.y, again.y), what << ": y differs between two runs");
        CHECK_MESSAGE(same_bits(got.dx, again.dx), what << ": dx differs between two runs");
      }
    }
  }
}

}  // namespace

// One case per shape (each short enough for compute-sanitizer's racecheck, tools/gpu/sanitize_cases.sh);
// the seeds are those the shapes had in one loop (7110, 7120, ...).
// n cin cout d h w bias, forced slice counts.
CUDA_TEST_CASE("conv3d cuda split-K f16/bf16 NCDHW/NDHWC k3 p1 fprop and dgrad: 256 -> 256 at 4^3 batch 4 with bias: rule, "
               "2/7/27 slices, unsplit, CPU float64") {
  // The layer split-K is for does split by the rule on a GPU with room for it (an H200 has 132 SMs:
  // 33x its 4 tiles).
  if (cuda::sm_count() >= 32) CHECK(rule_slices_at_least(256, 256, 27 * 256) > 1);
  check_case({4, 256, 256, 4, 4, 4, true, {2, 7, 27}}, 7110);
}

CUDA_TEST_CASE("conv3d cuda split-K f16/bf16 NCDHW/NDHWC k3 p1 fprop and dgrad: 128 -> 128 at 8^3 batch 4 with bias: rule, "
               "3/8 slices, unsplit, CPU float64") {
  if (cuda::sm_count() >= 32) CHECK(rule_slices_at_least(2048, 128, 27 * 128) > 1);  // 8x its 16 tiles
  check_case({4, 128, 128, 8, 8, 8, true, {3, 8}}, 7120);
}

CUDA_TEST_CASE("conv3d cuda split-K f16/bf16 NCDHW/NDHWC k3 p1 fprop and dgrad: 64 -> 64 at 16^3 with bias (128 x 64 tile): "
               "rule, 2 slices, unsplit, CPU float64") {
  check_case({1, 64, 64, 16, 16, 16, true, {2}}, 7130);
}

CUDA_TEST_CASE("conv3d cuda split-K f16/bf16 NCDHW/NDHWC k3 p1 fprop and dgrad: 40 -> 24 at 3x5x7 with bias (short tile, "
               "empty slices): rule, 2/3/7/40 slices, unsplit, CPU float64") {
  check_case({2, 40, 24, 3, 5, 7, true, {2, 3, 7, 40}}, 7140);
}

CUDA_TEST_CASE("conv3d cuda split-K f16/bf16 NCDHW/NDHWC k3 p1 fprop and dgrad: 40 -> 24 at 3x5x7 without bias: rule, "
               "5 slices, unsplit, CPU float64") {
  check_case({2, 40, 24, 3, 5, 7, false, {5}}, 7150);
}

CUDA_TEST_CASE("conv3d cuda split-K f16/bf16 NCDHW/NDHWC k3 p1 fprop and dgrad: 17 -> 5 at 3x5x7 with bias (odd N, "
               "element gathers): rule, 2/3/16 slices, unsplit, CPU float64") {
  check_case({2, 17, 5, 3, 5, 7, true, {2, 3, 16}}, 7160);
}

CUDA_TEST_CASE("conv_transpose3d cuda split-K f16/bf16 with bias: scatter epilogue (k2 s2) and dgrad_with_bias (k3 s2 p1) vs CPU float64") {
  struct TransposedCase {
    int64_t cin, cout, k, s, p;
    std::vector<int> forced;
  };
  // (Cin_t, Cout_t): k2 s2 is one pointwise GEMM, K = Cin_t = 96 (3 K-blocks), N = 8 Cout_t, scattered;
  // k3 s2 p1 the transposed gather (per-axis, stride 2), K = 27 Cin_t = 1296 (41 K-blocks), N = Cout_t.
  const std::vector<TransposedCase> cases = {{96, 40, 2, 2, 0, {2, 3, 5}}, {48, 24, 3, 2, 1, {3, 50}}};
  for (const TransposedCase& c : cases) {
    const Tensor x0 = random_tensor({2, c.cin, 3, 4, 5}, 80 + c.k);
    const Tensor w0 = random_tensor({c.cin, c.cout, c.k, c.k, c.k}, 81 + c.k, kFloat32, 0.3);
    const Tensor b0 = random_tensor({c.cout}, 82 + c.k);
    const auto params = ops::Conv3dParams().stride(c.s).padding(c.p);
    for (Dtype dt : {kFloat16, kBFloat16}) {
      auto as_seen = [&](const Tensor& t) { return t.cast_copy(dt).cast_copy(kFloat64); };
      const Tensor ref = ops::conv_transpose3d(as_seen(x0), as_seen(w0), as_seen(b0), params);
      auto gpu = [&] {
        return ops::conv_transpose3d(to_cuda(x0.cast_copy(dt), MemoryFormat::ChannelsLast3d), to_cuda(w0.cast_copy(dt)),
                                     to_cuda(b0.cast_copy(dt)), params);
      };
      const double tol = dt == kBFloat16 ? 2e-2 : 3e-3;
      Tensor oracle;
      {
        ForceSplitK unsplit(1);
        oracle = gpu();
      }
      const std::string base = "conv_transpose3d split-K k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " " + dtype_name(dt);
      CHECK_MESSAGE(rel_error(oracle, ref) < tol, base << " unsplit vs CPU: " << rel_error(oracle, ref));
      for (int slices : c.forced) {
        const std::string what = base + " " + std::to_string(slices) + " slices";
        ForceSplitK force(slices);
        const Tensor got = gpu(), again = gpu();
        CHECK_MESSAGE(rel_error(got, ref) < tol, what << " vs CPU: " << rel_error(got, ref));
        CHECK_MESSAGE(rel_error(got, oracle) < tol, what << " vs unsplit: " << rel_error(got, oracle));
        CHECK_MESSAGE(same_bits(got, again), what << ": differs between two runs");
      }
    }
  }
}
