// The fused Conv-BN-ReLU pair (ops/conv/conv_bn.h; kernels conv3d_fprop_halo_cuda.cu's BatchNorm variants
// and conv_bn_cuda.cu) against the unfused chain it replaces, conv3d -> batch_norm -> relu twice, run
// on CUDA under the same autocast (the oracle), and against that chain on the CPU in float64 on the same
// rounded inputs. FP16 and BF16 autocast, NDHWC input, the level-0 shapes of the U-Net.
//
// The fused backward (conv 2's halo dgrad with relu 1's mask and BN 1's reductions in its epilogue,
// conv_bn_cuda.h) is checked through the gradients of x, w1, gamma1 and beta1, which pass through it.
// What is compared: the output y, the running mean and variance of both BatchNorms, and the gradients
// of x, both conv weights, both gammas and both betas, after one backward with the same random dy.
// Tolerances (relative Frobenius error of the whole tensor, rel_error in cuda_test.h):
//   fused vs unfused CUDA: both convs run the same halo kernel on the same operands, so h1 is bit for
//     bit the same; the statistics are summed in another order (per-tile shifted sums vs the BN
//     kernel's shifted one-pass sums), which moves mean / invstd in their last FP32 bits and, through
//     them, an occasional activation by one 16-bit ulp: 3e-3 (FP16) and 2e-2 (BF16), the conv tests' bound.
//   CUDA vs CPU float64: every 16-bit rounding of h1, a1, h2 and y (and, in backward, of each gradient)
//     counts, and BatchNorm's backward subtracts two means: 2e-2 (FP16) and 8e-2 (BF16).
//   running statistics: atol 1e-4 + rtol 1e-3 against the unfused CUDA path, atol 1e-3 + rtol 2e-2 against float64.
// Also: the same bits on two runs, evaluation mode (running statistics), and a channel whose mean is
// 300 times its standard deviation (the statistics' cancellation test, on conv_bn_cuda.h directly).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autocast/autocast.h"
#include "nn/conv_bn_relu.h"
#include "ops/activation/activation.h"
#include "ops/conv/conv3d.h"
#include "ops/conv/conv_bn.h"
#include "ops/conv/conv_bn_cuda.h"
#include "ops/conv/conv_halo_path.h"
#include "ops/norm/norm.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

struct PairCase {
  int64_t n, cin, c1, c2, d, h, w;
  std::string name() const {
    return "n" + std::to_string(n) + " " + std::to_string(cin) + "->" + std::to_string(c1) + "->" + std::to_string(c2) +
           " " + std::to_string(d) + "x" + std::to_string(h) + "x" + std::to_string(w);
  }
};

// FP32 values of every input (the leaves a training step has) and the output gradient.
struct PairInputs {
  Tensor x, w1, w2, g1, b1, g2, b2, rm1, rv1, rm2, rv2, gy;
};

PairInputs make_inputs(const PairCase& c, uint64_t seed) {
  PairInputs in;
  in.x = random_tensor({c.n, c.cin, c.d, c.h, c.w}, seed);
  in.w1 = random_tensor({c.c1, c.cin, 3, 3, 3}, seed + 1, kFloat32, 0.1);
  in.w2 = random_tensor({c.c2, c.c1, 3, 3, 3}, seed + 2, kFloat32, 0.1);
  auto around = [&](int64_t C, uint64_t s, double centre, double spread) {
    std::vector<float> v = random_tensor({C}, s).to_float_vector();
    for (float& e : v) e = static_cast<float>(centre + spread * e);
    return Tensor::from_vector(v, {C}, kFloat32);
  };
  in.g1 = around(c.c1, seed + 3, 1.0, 0.2);
  in.b1 = around(c.c1, seed + 4, 0.0, 0.2);
  in.g2 = around(c.c2, seed + 5, 1.0, 0.2);
  in.b2 = around(c.c2, seed + 6, 0.0, 0.2);
  in.rm1 = around(c.c1, seed + 7, 0.0, 0.1);
  in.rv1 = around(c.c1, seed + 8, 1.5, 0.1);
  in.rm2 = around(c.c2, seed + 9, 0.0, 0.1);
  in.rv2 = around(c.c2, seed + 10, 1.5, 0.1);
  in.gy = random_tensor({c.n, c.c2, c.d, c.h, c.w}, seed + 11);
  return in;
}

struct PairResult {
  Tensor y, dx, dw1, dw2, dg1, db1, dg2, db2, rm1, rv1, rm2, rv2;
};

enum class Path { Fused, Unfused, CpuFloat64 };

// One forward and backward of the pair on `path`: CUDA paths under autocast to dt with FP32 leaves
// (x channels-last), the CPU path in float64 on the inputs rounded to dt (the values the GPU's convs see).
PairResult run_pair(const PairInputs& in, Path path, Dtype dt, bool training) {
  const bool cuda = path != Path::CpuFloat64;
  auto leaf = [&](const Tensor& t, bool round, bool grad) {
    Tensor v = cuda ? t.clone() : (round ? t.cast_copy(dt).cast_copy(kFloat64) : t.cast_copy(kFloat64));
    if (cuda) v = to_cuda(v, v.dim() == 5 ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous);
    if (grad) v.set_requires_grad(true);
    return v;
  };
  Tensor x = leaf(in.x, true, true), w1 = leaf(in.w1, true, true), w2 = leaf(in.w2, true, true);
  Tensor g1 = leaf(in.g1, false, true), b1 = leaf(in.b1, false, true), g2 = leaf(in.g2, false, true),
         b2 = leaf(in.b2, false, true);
  // Running statistics stay float32 on every path (batch_norm's buffers).
  auto buffer = [&](const Tensor& t) { return cuda ? to_cuda(t.clone()) : t.clone(); };
  Tensor rm1 = buffer(in.rm1), rv1 = buffer(in.rv1), rm2 = buffer(in.rm2), rv2 = buffer(in.rv2);
  const ops::BatchNormParams bn = ops::BatchNormParams().training(training);
  Tensor y;
  {
    amp::AutocastGuard autocast(amp::AutocastOptions().dtype(dt).enabled(cuda));
    if (path == Path::Fused) {
      const ops::ConvBnReluStage s1{w1, g1, b1, rm1, rv1, bn}, s2{w2, g2, b2, rm2, rv2, bn};
      REQUIRE(ops::conv_bn_relu_pair_fusable(x, s1, s2));
      y = ops::conv_bn_relu_pair(x, s1, s2);
    } else {
      const ops::Conv3dParams p = ops::Conv3dParams().padding(1);
      Tensor a1 = ops::relu(ops::batch_norm(ops::conv3d(x, w1, Tensor(), p), rm1, rv1, g1, b1, bn));
      y = ops::relu(ops::batch_norm(ops::conv3d(a1, w2, Tensor(), p), rm2, rv2, g2, b2, bn));
    }
  }
  Tensor gy = cuda ? to_cuda(in.gy.cast_copy(y.dtype()), MemoryFormat::ChannelsLast3d)
                   : in.gy.cast_copy(dt).cast_copy(kFloat64);
  y.backward(gy);
  return {y, x.grad(), w1.grad(), w2.grad(), g1.grad(), b1.grad(), g2.grad(), b2.grad(), rm1, rv1, rm2, rv2};
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.to_double_vector() == b.to_double_vector(); }

void check_rel(const Tensor& got, const Tensor& ref, double tol, const std::string& what) {
  REQUIRE_MESSAGE(got.defined(), (what + ": undefined"));
  const double e = rel_error(got.cast_copy(kFloat64), ref.cast_copy(kFloat64));
  CHECK_MESSAGE(e < tol, (what + ": relative error " + std::to_string(e) + " >= " + std::to_string(tol)));
}

void compare(const PairResult& got, const PairResult& ref, double tol, double stat_atol, double stat_rtol,
             const std::string& what) {
  check_rel(got.y, ref.y, tol, what + " y");
  check_rel(got.dx, ref.dx, tol, what + " dx");
  check_rel(got.dw1, ref.dw1, tol, what + " dw1");
  check_rel(got.dw2, ref.dw2, tol, what + " dw2");
  check_rel(got.dg1, ref.dg1, tol, what + " dgamma1");
  check_rel(got.db1, ref.db1, tol, what + " dbeta1");
  check_rel(got.dg2, ref.dg2, tol, what + " dgamma2");
  check_rel(got.db2, ref.db2, tol, what + " dbeta2");
  check_close(got.rm1, ref.rm1, stat_rtol, stat_atol, what + " running_mean 1");
  check_close(got.rv1, ref.rv1, stat_rtol, stat_atol, what + " running_var 1");
  check_close(got.rm2, ref.rm2, stat_rtol, stat_atol, what + " running_mean 2");
  check_close(got.rv2, ref.rv2, stat_rtol, stat_atol, what + " running_var 2");
}

// Against float64 the fused path may be as far off as the unfused CUDA chain is (both round a1, y1
// and y2 to the 16-bit type; the reference rounds only the inputs), and not much further: each
// result's error must stay within 1.25x the unfused chain's own error plus `slack` (the fused vs
// unfused tolerance), and under `bound`.
// (The first H200 run measured 0.022-0.030 in FP16 for both paths on the 9x10x11 cases.)
void compare_to_float64(const PairResult& fused, const PairResult& unfused, const PairResult& ref, double slack,
                        double bound, const std::string& what) {
  const std::pair<const char*, const Tensor PairResult::*> fields[] = {
      {"y", &PairResult::y},         {"dx", &PairResult::dx},       {"dw1", &PairResult::dw1},
      {"dw2", &PairResult::dw2},     {"dgamma1", &PairResult::dg1}, {"dbeta1", &PairResult::db1},
      {"dgamma2", &PairResult::dg2}, {"dbeta2", &PairResult::db2}};
  for (const auto& [name, field] : fields) {
    REQUIRE_MESSAGE((fused.*field).defined(), (what + " " + name + ": undefined"));
    const double ef = rel_error((fused.*field).cast_copy(kFloat64), (ref.*field).cast_copy(kFloat64));
    const double eu = rel_error((unfused.*field).cast_copy(kFloat64), (ref.*field).cast_copy(kFloat64));
    CHECK_MESSAGE((ef <= 1.25 * eu + slack && ef < bound),
                  (what + " " + name + ": relative error vs float64 " + std::to_string(ef) + ", the unfused chain's " +
                   std::to_string(eu) + " (allowed 1.25x + " + std::to_string(slack) + ", under " + std::to_string(bound) + ")"));
  }
}

const PairCase kLevel0Cases[] = {
    {2, 1, 16, 16, 9, 10, 11},   // the encoder's level-0 block: 1 -> 16 (direct kernel with statistics) -> 16
    {2, 16, 16, 16, 9, 10, 11},  // 16 -> 16 -> 16
    {2, 32, 16, 16, 9, 10, 11},  // the decoder's level-0 block: cat(up, skip) 32 -> 16 -> 16
    {2, 16, 32, 32, 9, 10, 11},  // the encoder's level-1 block: 16 -> 32 -> 32
    {1, 16, 16, 16, 3, 5, 4},    // a volume smaller than one 8^3 tile
};

}  // namespace

CUDA_TEST_CASE("conv_bn_relu_pair cuda f16 bf16 NDHWC training: fused vs unfused CUDA and CPU float64") {
  uint64_t seed = 100;
  for (const PairCase& c : kLevel0Cases) {
    seed += 20;
    SUBCASE(c.name().c_str()) {
      const PairInputs in = make_inputs(c, seed);
      const PairResult cpu = run_pair(in, Path::CpuFloat64, kFloat16, /*training=*/true);
      for (Dtype dt : {kFloat16, kBFloat16}) {
        const std::string what = c.name() + " " + dtype_name(dt);
        const PairResult fused = run_pair(in, Path::Fused, dt, true);
        const PairResult unfused = run_pair(in, Path::Unfused, dt, true);
        CHECK(fused.y.dtype() == dt);
        CHECK(fused.y.memory_format() == MemoryFormat::ChannelsLast3d);
        CHECK(fused.dw1.dtype() == kFloat32);
        compare(fused, unfused, dt == kBFloat16 ? 2e-2 : 3e-3, 1e-4, 1e-3, what + " fused vs unfused");
        // The float64 reference rounds the inputs to FP16: for BF16 runs it is a looser comparison.
        const PairResult cpu_dt = dt == kFloat16 ? cpu : run_pair(in, Path::CpuFloat64, dt, true);
        compare_to_float64(fused, unfused, cpu_dt, dt == kBFloat16 ? 2e-2 : 3e-3, dt == kBFloat16 ? 8e-2 : 5e-2,
                           what + " fused vs CPU float64");
        check_close(fused.rm1, cpu_dt.rm1, 2e-2, 1e-3, what + " fused vs CPU float64 running_mean 1");
        check_close(fused.rv1, cpu_dt.rv1, 2e-2, 1e-3, what + " fused vs CPU float64 running_var 1");
        check_close(fused.rm2, cpu_dt.rm2, 2e-2, 1e-3, what + " fused vs CPU float64 running_mean 2");
        check_close(fused.rv2, cpu_dt.rv2, 2e-2, 1e-3, what + " fused vs CPU float64 running_var 2");
      }
    }
  }
}

CUDA_TEST_CASE("conv_bn_relu_pair cuda f16 bf16 NDHWC evaluation (running statistics): fused vs unfused and CPU float64") {
  const PairCase c{2, 32, 16, 16, 9, 10, 11};
  const PairInputs in = make_inputs(c, 7);
  for (Dtype dt : {kFloat16, kBFloat16}) {
    const std::string what = c.name() + " eval " + dtype_name(dt);
    const PairResult fused = run_pair(in, Path::Fused, dt, /*training=*/false);
    const PairResult unfused = run_pair(in, Path::Unfused, dt, false);
    const PairResult cpu = run_pair(in, Path::CpuFloat64, dt, false);
    compare(fused, unfused, dt == kBFloat16 ? 2e-2 : 3e-3, 0.0, 0.0, what + " fused vs unfused");
    compare_to_float64(fused, unfused, cpu, dt == kBFloat16 ? 2e-2 : 3e-3, dt == kBFloat16 ? 8e-2 : 5e-2,
                       what + " fused vs CPU float64");
    // Evaluation leaves the running statistics as they were, bit for bit.
    CHECK(same_bits(fused.rm1, in.rm1));
    CHECK(same_bits(fused.rv2, in.rv2));
  }
}

CUDA_TEST_CASE("conv_bn_relu_pair cuda f16 NDHWC: same bits on two runs") {
  const PairCase c{2, 16, 32, 32, 9, 10, 11};
  const PairInputs in = make_inputs(c, 11);
  const PairResult a = run_pair(in, Path::Fused, kFloat16, true), b = run_pair(in, Path::Fused, kFloat16, true);
  CHECK(same_bits(a.y, b.y));
  CHECK(same_bits(a.dx, b.dx));
  CHECK(same_bits(a.dw1, b.dw1));
  CHECK(same_bits(a.dw2, b.dw2));
  CHECK(same_bits(a.dg1, b.dg1));
  CHECK(same_bits(a.db2, b.db2));
  CHECK(same_bits(a.rm1, b.rm1));
  CHECK(same_bits(a.rv1, b.rv1));
  CHECK(same_bits(a.rv2, b.rv2));
}

// The statistics of a channel whose mean (300) is 300 times its standard deviation: the conv is made
// pointwise (only the centre tap is nonzero) so that channel 0 of y is x's channel 0, 300 + N(0, 1),
// rounded to FP16 (ulp 0.25 there). The fused statistics must match the float64 mean and biased
// variance of the y values the kernel wrote; a plain FP32 sum of squares (sumsq / M - mean^2, 9e4 - 1)
// would be off by ~1e-2 relative in the variance, the test allows 1e-4.
CUDA_TEST_CASE("conv_bn_relu cuda f16 NDHWC: statistics of a channel with mean 300 std 1") {
#if defined(HALFGRAD_CUDA)  // the launchers of conv_bn_cuda.h exist only in a CUDA build (the case skips elsewhere)
  namespace conv = ops::conv;
  const int64_t n = 2, C = 16, d = 9, h = 10, w = 11;
  std::vector<float> xv = random_tensor({n, C, d, h, w}, 5).to_float_vector();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t v = 0; v < d * h * w; ++v) xv[(i * C + 0) * d * h * w + v] += 300.f;
  const Tensor x = to_cuda(Tensor::from_vector(xv, {n, C, d, h, w}, kFloat32).cast_copy(kFloat16), MemoryFormat::ChannelsLast3d);
  std::vector<float> wv(C * C * 27, 0.f);
  for (int64_t co = 0; co < C; ++co) wv[(co * C + co) * 27 + 13] = 1.f;  // identity at the centre tap
  const Tensor wt = to_cuda(Tensor::from_vector(wv, {C, C, 3, 3, 3}, kFloat16));
  conv::BnCudaState bn;
  bn.running_mean = to_cuda(Tensor::zeros({C}));
  bn.running_var = to_cuda(Tensor::ones({C}));
  const conv::ConvGeometry g = conv::make_geometry(n, C, C, d, h, w, 3, 1, 1);
  REQUIRE(conv::conv_bn_halo_applies(g, kFloat16));
  const conv::ConvBnCudaForward f = conv::cuda_conv3d_bn_fprop(g, x, wt, Tensor(), bn);
  // float64 statistics of what was written (two-pass)
  const std::vector<double> y = f.y.format_copy(MemoryFormat::Contiguous).to_double_vector();
  const std::vector<double> saved = f.saved.to_double_vector();
  const int64_t S = d * h * w, M = n * S;
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t v = 0; v < S; ++v) mean += y[(i * C + c) * S + v];
    mean /= M;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t v = 0; v < S; ++v) var += (y[(i * C + c) * S + v] - mean) * (y[(i * C + c) * S + v] - mean);
    var /= M;
    const double invstd = 1.0 / std::sqrt(var + 1e-5);
    CHECK_MESSAGE(std::fabs(saved[c] - mean) <= 1e-6 * std::fabs(mean) + 1e-6,
                  ("channel " + std::to_string(c) + " mean " + std::to_string(saved[c]) + " vs " + std::to_string(mean)));
    CHECK_MESSAGE(std::fabs(saved[C + c] - invstd) <= 1e-4 * invstd,
                  ("channel " + std::to_string(c) + " invstd " + std::to_string(saved[C + c]) + " vs " + std::to_string(invstd)));
  }
  CHECK(std::fabs(saved[0] - 300.0) < 0.2);  // channel 0 really is the large-mean one
#endif
}

CUDA_TEST_CASE("conv_bn_relu_pair cuda: falls back (not fusable) outside FP16/BF16 autocast, on 64 channels and under ForceImplicitGemm") {
  const PairCase c{1, 16, 16, 16, 8, 8, 8};
  const PairInputs in = make_inputs(c, 3);
  const Tensor x = to_cuda(in.x, MemoryFormat::ChannelsLast3d);
  const ops::ConvBnReluStage s1{to_cuda(in.w1), to_cuda(in.g1), to_cuda(in.b1), to_cuda(in.rm1), to_cuda(in.rv1), {}};
  const ops::ConvBnReluStage s2{to_cuda(in.w2), to_cuda(in.g2), to_cuda(in.b2), to_cuda(in.rm2), to_cuda(in.rv2), {}};
  CHECK_FALSE(ops::conv_bn_relu_pair_fusable(x, s1, s2));  // no autocast: FP32 convs
  CHECK_THROWS_AS(ops::conv_bn_relu_pair(x, s1, s2), Error);
  amp::AutocastGuard autocast;
  CHECK(ops::conv_bn_relu_pair_fusable(x, s1, s2));
  {
    ops::conv::ForceImplicitGemm oracle;  // the tests' switch to the unfused kernels
    CHECK_FALSE(ops::conv_bn_relu_pair_fusable(x, s1, s2));
  }
  CHECK_FALSE(ops::conv_bn_relu_pair_fusable(in.x, s1, s2));  // a CPU input
  const Tensor w64 = to_cuda(random_tensor({64, 16, 3, 3, 3}, 9));
  const ops::ConvBnReluStage wide{w64, Tensor(), Tensor(), Tensor(), Tensor(), {}};
  CHECK_FALSE(ops::conv_bn_relu_pair_fusable(x, s1, wide));
}

// The module the U-Net uses: fused on CUDA under autocast for 16/32 channels, with the plain block's
// results (within the fused-vs-unfused tolerance) and bookkeeping (num_batches_tracked).
CUDA_TEST_CASE("nn::ConvBnReluPair cuda f16 NDHWC training: fused forward matches the Sequential path") {
  Generator ga(21), gb(21), gx(22);
  nn::ConvBnReluPair fused(32, 16, ga), plain(32, 16, gb);
  fused.to(Device::CUDA);
  plain.to(Device::CUDA);
  const Tensor x = to_cuda(Tensor::randn({2, 32, 9, 10, 11}, gx), MemoryFormat::ChannelsLast3d);
  amp::AutocastGuard autocast;
  REQUIRE(fused.fused_for(x));
  Tensor yf = fused(x), yp;
  {
    ops::conv::ForceImplicitGemm oracle;  // plain: the unfused chain (its convs on the implicit GEMM)
    REQUIRE_FALSE(plain.fused_for(x));
    yp = plain(x);
  }
  // Two convs on different kernels (halo vs implicit GEMM: another summation order each) and two BNs:
  // twice the single conv's 3e-3.
  check_rel(yf, yp, 6e-3, "ConvBnReluPair fused vs Sequential");
  const auto bf = fused.named_buffers(), bp = plain.named_buffers();
  for (size_t i = 0; i < bf.size(); ++i) {
    if (bf[i].second.dtype() == kInt64) CHECK(bf[i].second.to_double_vector() == bp[i].second.to_double_vector());
    else check_close(bf[i].second, bp[i].second, 1e-3, 1e-4, bf[i].first);
  }
}
