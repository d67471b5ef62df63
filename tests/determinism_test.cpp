// determinism_test.cpp - same seed, same bits. A few AdamW steps of a small UNet3d (FP32, and under
// autocast with a GradScaler) must leave bit-identical weights, running statistics and losses
// whatever the state around the computation:
//   - the CPU caching allocator on, off (cpu_set_cache_limit(0)), or warm with another run's blocks;
//   - the allocator's poison (core/allocator.h) at 0x00 and at 0xFF (a NaN in every float format):
//     a difference is an op reading memory it never wrote;
//   - the heap shifted (live malloc blocks of odd sizes), so that every std::vector an op takes lands
//     at another address modulo 32: a difference is a result that follows an address (an Eigen or
//     compiler loop peeling to an alignment boundary, which mixes scalar and vector exp);
//   - the instruments on (precision report, gradient statistics, anomaly mode): they only observe;
//   - 1 thread instead of 2 (omp_set_num_threads): every sum is cut by the problem's size, never by
//     the thread count, and its partials are added in a fixed order.
// The model (12, 24 / 48) on (1, 1, 8, 16, 24) reaches every CPU conv path of the U-Net: the direct
// kernels (wide, narrow and quad fprop blocks; wgrad rows at W 24, channels at W 12), the column GEMM
// (the (2, 4, 6) bottleneck, below the direct kernels' 128 outputs; the transposed convs) and, with
// 2 threads, their parallel loops.
// Op-level cases below pin the thread-count independence of conv3d, matmul, sum, group_norm,
// layer_norm, dropout and the elementwise losses directly.
#include <doctest/doctest.h>
#include <omp.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/grad_stats.h"
#include "amp/precision_report.h"
#include "autograd/anomaly.h"
#include "core/allocator.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"

using namespace halfgrad;

namespace {

// What one run varies; the defaults are the reference run.
struct RunSetup {
  std::string what = "reference";
  int threads = 2;
  bool cache = true;          // false: cpu_set_cache_limit(0) for the run
  bool warm_cache = false;    // the cache first filled by a run of another model (dirty blocks)
  int poison = -1;            // cpu_set_poison for the run
  bool shift_heap = false;    // odd-sized malloc blocks live during the run
  bool instruments = false;   // precision report + grad stats + anomaly mode
};

// Restores the allocator's limit and poison and the OpenMP thread count on scope exit.
class SettingsGuard {
 public:
  SettingsGuard() : limit_(cpu_cache_limit()), poison_(cpu_poison()), threads_(omp_get_max_threads()) {}
  ~SettingsGuard() {
    cpu_set_cache_limit(limit_);
    cpu_set_poison(poison_);
    omp_set_num_threads(threads_);
  }
  SettingsGuard(const SettingsGuard&) = delete;
  SettingsGuard& operator=(const SettingsGuard&) = delete;

 private:
  size_t limit_;
  int poison_;
  int threads_;
};

void append_bytes(std::vector<unsigned char>& out, const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  out.insert(out.end(), p, p + t.nbytes());
}

// The result of a run: the bytes of every loss, parameter and buffer, in order.
struct RunResult {
  std::vector<unsigned char> bytes;
  int64_t steps_taken = 0;
};

// (1, 1, 8, 16, 24) inputs and 3-class labels, the same for every run.
void make_batch(Tensor& x, Tensor& y) {
  Generator gen(2024);
  x = Tensor::randn({1, 1, 8, 16, 24}, gen);
  const std::vector<double> u = Tensor::uniform({1, 8, 16, 24}, 0.0, 3.0, gen, kFloat64).to_double_vector();
  y = Tensor::from_labels(std::vector<int64_t>(u.begin(), u.end()), {1, 8, 16, 24});
}

nn::UNet3dOptions model_options() { return nn::UNet3dOptions().channels({12, 24}).bottleneck(48); }

// 3 AdamW steps (lr 1e-2); with `amp`, the forward under autocast and a GradScaler (init scale 2^10).
RunResult train(const RunSetup& s, bool amp, const nn::UNet3dOptions& options = model_options()) {
  Tensor x, y;
  make_batch(x, y);
  Generator init(7);
  nn::UNet3d model(options, init);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions().lr(1e-2));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(amp).init_scale(1024));
  amp::PrecisionRecorder report;
  RunResult r;
  for (int64_t step = 1; step <= 3; ++step) {
    amp::PrecisionRecorder::Observe observe(s.instruments ? &report : nullptr);
    autograd::DetectAnomalyGuard anomaly(s.instruments);
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(amp);
      loss = ops::segmentation_loss(model(x).to(kFloat32), y);
    }
    append_bytes(r.bytes, loss);
    scaler.scale(loss).backward();
    if (s.instruments) {
      const std::vector<amp::GradStats> stats = amp::collect_grad_stats(model.named_parameters(), scaler.get_scale());
      REQUIRE(!stats.empty());
    }
    const double scale = scaler.get_scale();
    const bool stepped = scaler.step(opt);
    scaler.update();
    if (s.instruments) report.record_step(step, scale, !stepped, scaler.get_scale());
    r.steps_taken += stepped ? 1 : 0;
  }
  if (s.instruments) CHECK(report.observed_scopes() == 3);
  for (const auto& [name, p] : model.named_parameters()) append_bytes(r.bytes, p);
  for (const auto& [name, b] : model.named_buffers()) append_bytes(r.bytes, b);
  return r;
}

RunResult run(const RunSetup& s, bool amp) {
  SettingsGuard restore;
  omp_set_num_threads(s.threads);
  if (!s.cache) cpu_set_cache_limit(0);
  if (s.warm_cache) {
    cpu_empty_cache();
    (void)train(RunSetup(), !amp, nn::UNet3dOptions().channels({8, 16}).bottleneck(32));
  }
  cpu_set_poison(s.poison);
  std::vector<std::unique_ptr<char[]>> shift;
  if (s.shift_heap)
    for (int i = 0; i < 64; ++i) shift.emplace_back(new char[24 + 16 * (i % 7) + 8 * (i % 3)]);
  return train(s, amp);
}

// The first byte where two runs differ, as "byte i of n", or "" when equal.
std::string first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return "byte " + std::to_string(i) + " of " + std::to_string(a.size());
  return "";
}

void check_same_bits_across_setups(bool amp) {
  cpu_empty_cache();
  const RunResult ref = run(RunSetup(), amp);
  REQUIRE(ref.steps_taken >= 2);  // the optimizer really moved the weights
  // ...and a run does move them: the reference differs from the initial weights.
  {
    Generator init(7);
    nn::UNet3d fresh(model_options(), init);
    std::vector<unsigned char> w0;
    for (const auto& [name, p] : fresh.named_parameters()) append_bytes(w0, p);
    CHECK(std::memcmp(w0.data(), ref.bytes.data() + 3 * sizeof(float), w0.size()) != 0);
  }
  std::vector<RunSetup> setups(8);
  setups[0].what = "the reference again (cache now warm with its own blocks)";
  setups[1].what = "CPU cache off";
  setups[1].cache = false;
  setups[2].what = "CPU cache warm with another model's blocks";
  setups[2].warm_cache = true;
  setups[3].what = "poison 0x00";
  setups[3].poison = 0x00;
  setups[4].what = "poison 0xFF";
  setups[4].poison = 0xFF;
  setups[5].what = "heap shifted by odd-sized live blocks";
  setups[5].shift_heap = true;
  setups[6].what = "instruments on (precision report, grad stats, anomaly mode)";
  setups[6].instruments = true;
  setups[7].what = "1 thread";
  setups[7].threads = 1;
  for (const RunSetup& s : setups) {
    const RunResult r = run(s, amp);
    const std::string diff = first_difference(ref.bytes, r.bytes);
    CHECK_MESSAGE(diff.empty(), std::string(amp ? "autocast + GradScaler" : "FP32") << ": " << s.what
                                    << " changed the bits of the losses/weights/buffers (first difference at "
                                    << diff << ")");
  }
}

// Runs f with 1, 2 and 3 OpenMP threads and requires the bytes of its result to be equal.
template <typename F>
void check_thread_invariant(const char* what, F f) {
  SettingsGuard restore;
  std::vector<unsigned char> ref;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<unsigned char> got;
    for (const Tensor& t : f()) append_bytes(got, t);
    if (threads == 1) {
      ref = got;
      continue;
    }
    CHECK_MESSAGE(first_difference(ref, got).empty(), std::string(what) << ": " << threads << " threads differ from 1 thread at "
                                                           << first_difference(ref, got));
  }
}

// conv3d forward (kernel, stride and padding per axis), then dx, dw and db by backward of sum(y * g).
std::vector<Tensor> conv_fwd_bwd(const Shape& xs, int64_t cout, ExpandingArray<3> k, ExpandingArray<3> stride,
                                 ExpandingArray<3> pad, Dtype dt) {
  Generator gen(99);
  Tensor x = Tensor::randn(xs, gen, dt).set_requires_grad(true);
  Tensor w = Tensor::randn({cout, xs[1], k[0], k[1], k[2]}, gen, dt, 0.2).set_requires_grad(true);
  Tensor b = Tensor::randn({cout}, gen, dt).set_requires_grad(true);
  Tensor y = ops::conv3d(x, w, b, ops::Conv3dParams().stride(stride).padding(pad));
  Tensor g = Tensor::randn(y.shape(), gen, dt);
  ops::sum(ops::mul(y, g)).backward();
  return {y, x.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST_CASE("determinism: UNet3d (12,24 / 48) f32, 3 AdamW steps on (1,1,8,16,24): bit-identical across cache, "
          "poison, heap shift, instruments and 1 vs 2 threads") {
  check_same_bits_across_setups(false);
}

TEST_CASE("determinism: UNet3d (12,24 / 48) autocast f16 + GradScaler, 3 AdamW steps on (1,1,8,16,24): "
          "bit-identical across cache, poison, heap shift, instruments and 1 vs 2 threads") {
  check_same_bits_across_setups(true);
}

TEST_CASE("determinism: conv3d f32 fprop/dgrad/wgrad bits do not depend on the thread count (1, 2, 3)") {
  // Direct kernels: wgrad rows (W a multiple of 8) and channels (W = 6); fprop wide (16), narrow + quad (12).
  check_thread_invariant("conv3d direct (2,8,8,16,16)->16", [] { return conv_fwd_bwd({2, 8, 8, 16, 16}, 16, 3, 1, 1, kFloat32); });
  check_thread_invariant("conv3d direct (2,12,6,6,6)->12", [] { return conv_fwd_bwd({2, 12, 6, 6, 6}, 12, 3, 1, 1, kFloat32); });
  // Column GEMM: fewer than 128 outputs (a U-Net bottleneck), k2 s2 (disjoint windows), k3 s2 (overlapping).
  check_thread_invariant("conv3d gemm (2,48,2,2,2)->48", [] { return conv_fwd_bwd({2, 48, 2, 2, 2}, 48, 3, 1, 1, kFloat32); });
  check_thread_invariant("conv3d gemm k2 s2 (2,16,8,8,8)->24", [] { return conv_fwd_bwd({2, 16, 8, 8, 8}, 24, 2, 2, 0, kFloat32); });
  check_thread_invariant("conv3d gemm k3 s2 (2,16,9,9,9)->16", [] { return conv_fwd_bwd({2, 16, 9, 9, 9}, 16, 3, 2, 1, kFloat32); });
  check_thread_invariant("conv3d gemm f64 (1,8,8,8,8)->8", [] { return conv_fwd_bwd({1, 8, 8, 8, 8}, 8, 3, 1, 1, kFloat64); });
  // Per-axis (nnU-Net's anisotropic plans): (1,3,3) stride (1,2,2) (overlapping in H, W), (1,3,3) stride 1.
  check_thread_invariant("conv3d gemm k(1,3,3) s(1,2,2) (2,16,6,17,16)->16",
                         [] { return conv_fwd_bwd({2, 16, 6, 17, 16}, 16, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, kFloat32); });
  check_thread_invariant("conv3d gemm k(1,3,3) (2,8,6,16,16)->16",
                         [] { return conv_fwd_bwd({2, 8, 6, 16, 16}, 16, {1, 3, 3}, 1, {0, 1, 1}, kFloat32); });
}

TEST_CASE("determinism: matmul f32 (300,200)x(200,130) and sum f32 of 2^20 values do not depend on the thread count") {
  check_thread_invariant("matmul", [] {
    Generator gen(5);
    Tensor a = Tensor::randn({300, 200}, gen).set_requires_grad(true);
    Tensor b = Tensor::randn({200, 130}, gen).set_requires_grad(true);
    Tensor y = ops::matmul(a, b);
    ops::sum(ops::mul(y, Tensor::randn(y.shape(), gen))).backward();
    return std::vector<Tensor>{y, a.grad(), b.grad()};
  });
  check_thread_invariant("sum", [] {
    Generator gen(6);
    Tensor x = Tensor::randn({1 << 20}, gen);
    return std::vector<Tensor>{ops::sum(x), ops::mean(x)};
  });
}

TEST_CASE("determinism: group_norm, layer_norm, dropout and the elementwise losses f32 do not depend on the thread count") {
  // 2^18 values or more: above parallel_worth's threshold, so 2 and 3 threads split the loops.
  auto norm_case = [](bool layer) {
    Generator gen(7);
    Tensor x = Tensor::randn({4, 16, 8, 32, 32}, gen).set_requires_grad(true);
    const Shape ps = layer ? Shape{32, 32} : Shape{16};
    Tensor w = Tensor::randn(ps, gen).set_requires_grad(true), b = Tensor::randn(ps, gen).set_requires_grad(true);
    Tensor y = layer ? ops::layer_norm(x, {32, 32}, w, b) : ops::group_norm(x, 4, w, b);
    ops::sum(ops::mul(y, Tensor::randn(y.shape(), gen))).backward();
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
  };
  check_thread_invariant("group_norm", [&] { return norm_case(false); });
  check_thread_invariant("layer_norm", [&] { return norm_case(true); });
  check_thread_invariant("dropout + losses", [] {
    Generator gen(8);
    Tensor x = Tensor::randn({1 << 19}, gen).set_requires_grad(true);
    const Tensor t = Tensor::uniform({1 << 19}, 0.0, 1.0, gen);
    Tensor d = ops::dropout(x, 0.3, true, gen);
    Tensor l = ops::mse_loss(d, t) + ops::l1_loss(x, t, ops::Reduction::Sum) + ops::binary_cross_entropy_with_logits(x, t);
    l.backward();
    return std::vector<Tensor>{d, l, x.grad()};
  });
}
