// BFloat16 on CUDA against the CPU: the conversions (every bf16 pattern to float; random floats to
// bf16, bit for bit), fill and gradient accumulation; each op family (elementwise, activations,
// reduce, softmax, norms, max-pool, losses, shape, matmul/linear on the Tensor Core GEMM) in bf16,
// NCDHW and NDHWC, forward and gradients; the BF16 GEMM against an FP64 reference (the N/N, N/T and
// T/N layouts of the forward and its two gradients, sizes off the tile grid and one on the large
// tile); AdamW / SGD with bf16 parameters and FP32 masters; GradScaler's unscale of bf16 gradients in
// place. Skipped without a GPU. (Gradient accumulation, cuda::accumulate in bf16: the mul(x, x)
// case, whose input receives two gradients.)
#include <cmath>
#include <cstring>
#include <memory>
#include <limits>
#include <random>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous);
  const Tensor hb = b.copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous);
  return ha.dtype() == hb.dtype() && ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}
}  // namespace

CUDA_TEST_CASE("bf16 cuda: every bf16 pattern to float, and random floats to bf16, match the CPU bit for bit") {
  std::vector<bfloat16_bits> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b].bits = static_cast<uint16_t>(b);
  Tensor t = Tensor::empty({65536}, kBFloat16);
  std::memcpy(t.raw_data(), all.data(), t.nbytes());
  const Tensor f_cpu = t.cast_copy(kFloat32);
  const Tensor f_gpu = to_cuda(t).cast_copy(kFloat32).copy_to(Device::CPU);
  CHECK(std::memcmp(f_cpu.raw_data(), f_gpu.raw_data(), f_cpu.nbytes()) == 0);  // NaNs included: widening is exact

  std::mt19937 rng(3);
  std::vector<float> v(1 << 18);
  for (float& x : v) {
    const uint32_t u = static_cast<uint32_t>(rng());
    std::memcpy(&x, &u, 4);
    if (std::isnan(x)) x = 1.0f;  // NaN: the device keeps the sign, core/bfloat16.h does not (documented)
  }
  const Tensor src = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  CHECK(same_bits(src.cast_copy(kBFloat16), to_cuda(src).cast_copy(kBFloat16)));
  CHECK(same_bits(src.cast_copy(kFloat64).cast_copy(kBFloat16), to_cuda(src).cast_copy(kFloat64).cast_copy(kBFloat16)));
  CHECK(same_bits(Tensor::full({5}, 1.0 + 1.0 / 256, kBFloat16), Tensor::full({5}, 1.0 + 1.0 / 256, kBFloat16, Device::CUDA)));
  const Tensor h = src.cast_copy(kFloat16);
  CHECK(same_bits(h.cast_copy(kBFloat16), to_cuda(h).cast_copy(kBFloat16)));
}

CUDA_TEST_CASE("bf16 cuda: op families in bf16 NCDHW/NDHWC match the CPU, forward and gradients") {
  const Shape s5 = {2, 3, 5, 6, 4};
  const Tensor labels = Tensor::from_labels(std::vector<int64_t>(2 * 5 * 6 * 4, 1), {2, 5, 6, 4});
  struct Case {
    const char* name;
    std::vector<Input> in;
    OpFn f;
    bool summed;
  };
  for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
    const std::vector<Case> cases = {
        {"add", {{s5, Values::Normal, fmt}, {s5, Values::Normal, fmt}}, [](const auto& x) { return ops::add(x[0], x[1]); }, false},
        {"mul", {{s5, Values::Normal, fmt}, {s5, Values::Normal, fmt}}, [](const auto& x) { return ops::mul(x[0], x[1]); }, false},
        {"mul(x, x)", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::mul(x[0], x[0]); }, false},
        {"div", {{s5, Values::Normal, fmt}, {s5, Values::Positive, fmt}}, [](const auto& x) { return ops::div(x[0], x[1]); }, false},
        {"exp", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::exp(x[0]); }, false},
        {"log", {{s5, Values::Positive, fmt}}, [](const auto& x) { return ops::log(x[0]); }, false},
        {"relu", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::relu(x[0]); }, false},
        {"leaky_relu", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::leaky_relu(x[0], 0.1); }, false},
        {"sigmoid", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::sigmoid(x[0]); }, false},
        {"gelu", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::gelu(x[0]); }, false},
        {"sum(2,3,4)", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::sum(x[0], {2, 3, 4}); }, true},
        {"mean", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::mean(x[0]); }, true},
        {"softmax(1)", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::softmax(x[0], 1); }, true},
        {"log_softmax(1)", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::log_softmax(x[0], 1); }, true},
        {"instance_norm", {{s5, Values::Normal, fmt}}, [](const auto& x) { return ops::instance_norm(x[0], Tensor(), Tensor()); }, true},
        {"batch_norm", {{s5, Values::Normal, fmt}},
         [](const auto& x) { return ops::batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor()); }, true},
        {"max_pool3d", {{{2, 3, 4, 6, 4}, Values::Normal, fmt}}, [](const auto& x) { return ops::max_pool3d(x[0], 2, 2); }, false},
        {"cross_entropy", {{s5, Values::Normal, fmt}},
         [&](const auto& x) { return ops::cross_entropy(x[0], x[0].is_cuda() ? to_cuda(labels) : labels); }, true},
        {"soft_dice_loss", {{s5, Values::Normal, fmt}},
         [&](const auto& x) { return ops::soft_dice_loss(x[0], x[0].is_cuda() ? to_cuda(labels) : labels); }, true},
        {"cat(1)", {{s5, Values::Normal, fmt}, {{2, 2, 5, 6, 4}, Values::Normal, fmt}},
         [](const auto& x) { return ops::cat({x[0], x[1]}, 1); }, false},
    };
    for (const Case& c : cases) {
      const std::string what = std::string(c.name) + " bf16 " + format_name(fmt);
      const Tolerance t = c.summed ? sum_tol(kBFloat16) : pointwise_tol(kBFloat16);
      compare_with_cpu(what, c.in, kBFloat16, c.f, t, sum_tol(kBFloat16));
    }
  }
  compare_with_cpu("matmul bf16 100x70x90", {{{100, 70}}, {{70, 90}}}, kBFloat16,
                   [](const auto& x) { return ops::matmul(x[0], x[1]); }, sum_tol(kBFloat16), sum_tol(kBFloat16));
  compare_with_cpu("linear bf16 17x33x5", {{{17, 33}}, {{5, 33}}, {{5}}}, kBFloat16,
                   [](const auto& x) { return ops::linear(x[0], x[1], x[2]); }, sum_tol(kBFloat16), sum_tol(kBFloat16));
}

CUDA_TEST_CASE("bf16 cuda: the BF16 Tensor Core GEMM against an FP64 reference, N/N, N/T, T/N, odd and tile sizes") {
  struct Mkn {
    int64_t m, k, n;
  };
  for (const Mkn& s : {Mkn{1, 1, 1}, Mkn{17, 33, 5}, Mkn{130, 300, 260}, Mkn{512, 256, 1024}}) {
    const Tensor a = random_tensor({s.m, s.k}, 11, kBFloat16), b = random_tensor({s.k, s.n}, 12, kBFloat16);
    // FP64 reference from the bf16 operands (exact in double): only the FP32 accumulation and the
    // final rounding to bf16 separate the GEMM from it.
    const Tensor ref = ops::matmul(a.cast_copy(kFloat64), b.cast_copy(kFloat64));
    const Tensor y = ops::matmul(to_cuda(a), to_cuda(b));
    REQUIRE(y.dtype() == kBFloat16);
    // |error| <= one bf16 rounding (2^-8 relative) + FP32 accumulation of k terms of size ~1.
    check_close(y.cast_copy(kFloat64), ref, 1.0 / 128, 1e-5 * static_cast<double>(s.k),
                "bf16 gemm " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n));
    // The transposed layouts run through backward: dA = dY B^T, dB = A^T dY.
    Tensor ag = to_cuda(a).set_requires_grad(true), bg = to_cuda(b).set_requires_grad(true);
    const Tensor dy = random_tensor({s.m, s.n}, 13, kBFloat16);
    ops::matmul(ag, bg).backward(to_cuda(dy));
    const std::vector<double> A = a.to_double_vector(), B = b.to_double_vector(), D = dy.to_double_vector();
    std::vector<double> da(s.m * s.k, 0.0), db(s.k * s.n, 0.0);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t kk = 0; kk < s.k; ++kk)
        for (int64_t j = 0; j < s.n; ++j) {
          da[i * s.k + kk] += D[i * s.n + j] * B[kk * s.n + j];  // dY B^T
          db[kk * s.n + j] += A[i * s.k + kk] * D[i * s.n + j];  // A^T dY
        }
    check_close(ag.grad().cast_copy(kFloat64), Tensor::from_vector(da, {s.m, s.k}, kFloat64), 1.0 / 128,
                1e-5 * static_cast<double>(s.n), "bf16 gemm dA (N x T)");
    check_close(bg.grad().cast_copy(kFloat64), Tensor::from_vector(db, {s.k, s.n}, kFloat64), 1.0 / 128,
                1e-5 * static_cast<double>(s.m), "bf16 gemm dB (T x N)");
  }
  {  // Under a BF16 autocast region FP32 operands run as bf16 on the Tensor Cores; grads back in FP32.
    amp::AutocastGuard bf(amp::AutocastOptions().dtype(kBFloat16));
    Tensor w = to_cuda(random_tensor({33, 5}, 4)).set_requires_grad(true);
    const Tensor y = ops::matmul(to_cuda(random_tensor({17, 33}, 5)), w);
    CHECK(y.dtype() == kBFloat16);
    ops::sum(y).backward();
    CHECK(w.grad().dtype() == kFloat32);
  }
}

CUDA_TEST_CASE("bf16 cuda: AdamW and SGD on bf16 parameters (FP32 masters) match the CPU; GradScaler unscales bf16 in place") {
  const Shape s = {3, 4, 5};
  for (int which = 0; which < 2; ++which) {
    Tensor pc = random_tensor(s, 21, kBFloat16).set_requires_grad(true);
    Tensor pg = to_cuda(pc.detach()).set_requires_grad(true);
    std::unique_ptr<optim::Optimizer> oc, og;
    if (which == 0) {
      oc = std::make_unique<optim::AdamW>(std::vector<Tensor>{pc}, optim::AdamWOptions().lr(1e-2));
      og = std::make_unique<optim::AdamW>(std::vector<Tensor>{pg}, optim::AdamWOptions().lr(1e-2));
    } else {
      oc = std::make_unique<optim::SGD>(std::vector<Tensor>{pc}, optim::SGDOptions(1e-2).momentum(0.9));
      og = std::make_unique<optim::SGD>(std::vector<Tensor>{pg}, optim::SGDOptions(1e-2).momentum(0.9));
    }
    for (int t = 0; t < 20; ++t) {
      const Tensor g = random_tensor(s, 100 + t, kBFloat16);
      pc.set_grad(g);
      pg.set_grad(to_cuda(g));
      oc->step();
      og->step();
    }
    CHECK(pg.dtype() == kBFloat16);
    // FP32 masters updated in the same order: the bf16 parameters agree to one bf16 rounding.
    check_close(pg, pc, 1.0 / 128, 1e-6, which == 0 ? "AdamW bf16 params" : "SGD bf16 params");
  }
  Tensor p = to_cuda(Tensor::zeros({4}, kBFloat16)).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(256));
  const Tensor G = Tensor::from_vector(std::vector<float>{0.5f, -3.0f, 1e-20f, 7.0f}, {4}, kBFloat16);
  scaler.scale(ops::sum(ops::mul(p, to_cuda(G)))).backward();
  scaler.unscale_(opt);
  CHECK(p.grad().dtype() == kBFloat16);
  CHECK(same_bits(p.grad(), G));  // a power-of-two scale: exact
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(scaler.bf16_note_written());
}
