// determinism_cuda_test.cpp - same seed, same bits on the GPU: the CUDA twin of tests/determinism_test.cpp.
// A few AdamW steps of a small UNet3d on CUDA (FP32, and autocast + GradScaler; NCDHW and
// channels-last activations) must leave bit-identical weights, running statistics and losses
// whatever the CUDA caching allocator's state:
//   - emptied first (every block a fresh cudaMalloc), or pre-filled with another run's dirty blocks;
//   - fragmented: blocks of many sizes held live and others left cached, so that the run's tensors
//     get other addresses;
//   - the allocator's poison (core/cuda/runtime.h) at 0x00 and 0xFF: a kernel reading device memory
//     it never wrote shows as a difference;
//   - the instruments on (precision report, gradient statistics, anomaly mode).
// The CUDA kernels sum in fixed orders (no atomics in any reduction), so a difference is a bug.
#include <cstring>
#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/grad_stats.h"
#include "amp/precision_report.h"
#include "autograd/anomaly.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"
#include "nn/unet3d.h"
#include "ops/ops.h"
#include "optim/adamw.h"

using namespace halfgrad;

namespace {

struct CudaRunSetup {
  std::string what = "reference";
  bool empty_cache = false;  // cuda::empty_cache() first
  bool prefill = false;      // the cache first filled by a run of another model
  bool fragment = false;     // blocks of assorted sizes held live, others cached, during the run
  int poison = -1;           // cuda::set_poison for the run
  bool instruments = false;  // precision report + grad stats + anomaly mode
};

void append_host_bytes(std::vector<unsigned char>& out, const Tensor& t) {
  const Tensor h = t.copy_to(Device::CPU).contiguous();
  const auto* p = static_cast<const unsigned char*>(h.raw_data());
  out.insert(out.end(), p, p + h.nbytes());
}

// 3 AdamW steps of UNet3d (12, 24 / 48) on (1, 1, 8, 16, 24) in `format`; with `amp`, autocast
// and a GradScaler (init scale 2^10). Returns the bytes of the losses, parameters and buffers.
std::vector<unsigned char> train_cuda(const CudaRunSetup& s, bool amp, MemoryFormat format,
                                      const nn::UNet3dOptions& options) {
  Generator gen(2024);
  Tensor x = Tensor::randn({1, 1, 8, 16, 24}, gen);
  const std::vector<double> u = Tensor::uniform({1, 8, 16, 24}, 0.0, 3.0, gen, kFloat64).to_double_vector();
  Tensor y = Tensor::from_labels(std::vector<int64_t>(u.begin(), u.end()), {1, 8, 16, 24}).copy_to(Device::CUDA);
  x = testing::to_cuda(x, format);
  Generator init(7);
  nn::UNet3d model(options, init);
  model.to(Device::CUDA);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions().lr(1e-2));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(amp).init_scale(1024));
  amp::PrecisionRecorder report;
  std::vector<unsigned char> bytes;
  int64_t stepped_count = 0;
  for (int64_t step = 1; step <= 3; ++step) {
    amp::PrecisionRecorder::Observe observe(s.instruments ? &report : nullptr);
    autograd::DetectAnomalyGuard anomaly(s.instruments);
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(amp);
      loss = ops::segmentation_loss(model(x).to(kFloat32), y);
    }
    append_host_bytes(bytes, loss);
    scaler.scale(loss).backward();
    if (s.instruments) REQUIRE(!amp::collect_grad_stats(model.named_parameters(), scaler.get_scale()).empty());
    const double scale = scaler.get_scale();
    const bool stepped = scaler.step(opt);
    scaler.update();
    if (s.instruments) report.record_step(step, scale, !stepped, scaler.get_scale());
    stepped_count += stepped ? 1 : 0;
  }
  CHECK(stepped_count >= 2);
  for (const auto& [name, p] : model.named_parameters()) append_host_bytes(bytes, p);
  for (const auto& [name, b] : model.named_buffers()) append_host_bytes(bytes, b);
  return bytes;
}

nn::UNet3dOptions model_options() { return nn::UNet3dOptions().channels({12, 24}).bottleneck(48); }

std::vector<unsigned char> run_cuda(const CudaRunSetup& s, bool amp, MemoryFormat format) {
  struct PoisonGuard {
    int prev = cuda::poison();
    ~PoisonGuard() { cuda::set_poison(prev); }
  } restore;
  if (s.empty_cache) cuda::empty_cache();
  if (s.prefill) (void)train_cuda(CudaRunSetup(), !amp, format, nn::UNet3dOptions().channels({8, 16}).bottleneck(32));
  std::vector<Tensor> held;
  if (s.fragment) {
    // Every other block of assorted sizes stays live (its address taken from the run), the rest are
    // released dirty (NaN) into the cache, where the run's requests of those sizes find them.
    for (int64_t i = 0; i < 48; ++i) {
      Tensor t = Tensor::full({1000 + 4099 * i}, NAN, kFloat32, Device::CUDA);
      if (i % 2 == 0) held.push_back(t);
    }
  }
  cuda::set_poison(s.poison);
  return train_cuda(s, amp, format, model_options());
}

std::string first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return "byte " + std::to_string(i) + " of " + std::to_string(a.size());
  return "";
}

// The setups, each case checking some of them against its own reference run (so that a case stays
// short enough for compute-sanitizer's racecheck, tools/gpu/sanitize_cases.sh: under it one FP32 run
// of this U-Net takes over two minutes on the H200).
enum Setup { kWarm, kEmptied, kPrefilled, kFragmented, kPoison00, kPoisonFF, kInstruments };

CudaRunSetup setup(Setup which) {
  CudaRunSetup s;
  switch (which) {
    case kWarm: s.what = "the reference again (cache warm with its own blocks)"; break;
    case kEmptied: s.what = "cuda::empty_cache() first"; s.empty_cache = true; break;
    case kPrefilled: s.what = "cache pre-filled by another model's run"; s.prefill = true; break;
    case kFragmented: s.what = "cache fragmented (assorted live and cached NaN blocks)"; s.fragment = true; break;
    case kPoison00: s.what = "poison 0x00"; s.poison = 0x00; break;
    case kPoisonFF: s.what = "poison 0xFF"; s.poison = 0xFF; break;
    case kInstruments: s.what = "instruments on (precision report, grad stats, anomaly mode)"; s.instruments = true; break;
  }
  return s;
}

void check_cuda_same_bits(bool amp, MemoryFormat format, const std::vector<Setup>& which) {
  cuda::empty_cache();
  const std::vector<unsigned char> ref = run_cuda(CudaRunSetup(), amp, format);
  for (Setup w : which) {
    const CudaRunSetup s = setup(w);
    const std::string diff = first_difference(ref, run_cuda(s, amp, format));
    CHECK_MESSAGE(diff.empty(), std::string(amp ? "autocast + GradScaler" : "FP32") << ", "
                                    << (format == MemoryFormat::ChannelsLast3d ? "NDHWC" : "NCDHW") << ": " << s.what
                                    << " changed the bits (first difference at " << diff << ")");
  }
}

}  // namespace

// UNet3d (12, 24 / 48), 3 AdamW steps: FP32 NCDHW, one setup a case; autocast f16 + GradScaler, NCDHW
// and NDHWC, the cache's state (warm, emptied), its layout (pre-filled, fragmented), and poison and
// instruments.
CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) f32 NCDHW, 3 AdamW steps: bit-identical with the cache warm") {
  check_cuda_same_bits(false, MemoryFormat::Contiguous, {kWarm});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) f32 NCDHW, 3 AdamW steps: bit-identical with the cache emptied") {
  check_cuda_same_bits(false, MemoryFormat::Contiguous, {kEmptied});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) f32 NCDHW, 3 AdamW steps: bit-identical with the cache pre-filled") {
  check_cuda_same_bits(false, MemoryFormat::Contiguous, {kPrefilled});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) f32 NCDHW, 3 AdamW steps: bit-identical with the cache fragmented") {
  check_cuda_same_bits(false, MemoryFormat::Contiguous, {kFragmented});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) f32 NCDHW, 3 AdamW steps: bit-identical under poison 0x00") {
  check_cuda_same_bits(false, MemoryFormat::Contiguous, {kPoison00});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) f32 NCDHW, 3 AdamW steps: bit-identical under poison 0xFF") {
  check_cuda_same_bits(false, MemoryFormat::Contiguous, {kPoisonFF});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) f32 NCDHW, 3 AdamW steps: bit-identical with the instruments on") {
  check_cuda_same_bits(false, MemoryFormat::Contiguous, {kInstruments});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) autocast f16 + GradScaler NCDHW, 3 AdamW steps: bit-identical with "
               "the cache warm or emptied") {
  check_cuda_same_bits(true, MemoryFormat::Contiguous, {kWarm, kEmptied});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) autocast f16 + GradScaler NDHWC, 3 AdamW steps: bit-identical with "
               "the cache warm or emptied") {
  check_cuda_same_bits(true, MemoryFormat::ChannelsLast3d, {kWarm, kEmptied});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) autocast f16 + GradScaler NCDHW, 3 AdamW steps: bit-identical with "
               "the cache pre-filled or fragmented") {
  check_cuda_same_bits(true, MemoryFormat::Contiguous, {kPrefilled, kFragmented});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) autocast f16 + GradScaler NDHWC, 3 AdamW steps: bit-identical with "
               "the cache pre-filled or fragmented") {
  check_cuda_same_bits(true, MemoryFormat::ChannelsLast3d, {kPrefilled, kFragmented});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) autocast f16 + GradScaler NCDHW, 3 AdamW steps: bit-identical under "
               "poison 0x00/0xFF and instruments") {
  check_cuda_same_bits(true, MemoryFormat::Contiguous, {kPoison00, kPoisonFF, kInstruments});
}

CUDA_TEST_CASE("determinism cuda: UNet3d (12,24 / 48) autocast f16 + GradScaler NDHWC, 3 AdamW steps: bit-identical under "
               "poison 0x00/0xFF and instruments") {
  check_cuda_same_bits(true, MemoryFormat::ChannelsLast3d, {kPoison00, kPoisonFF, kInstruments});
}

CUDA_TEST_CASE("cuda allocator: poison fills fresh and reused blocks; set_poison refuses values outside 0..255, -1") {
  struct PoisonGuard {
    int prev = cuda::poison();
    ~PoisonGuard() { cuda::set_poison(prev); }
  } restore;
  for (int b : {0xA5, 0xFF}) {
    cuda::set_poison(b);
    CHECK(cuda::poison() == b);
    for (int64_t n : {int64_t{3}, int64_t{5000}, int64_t{1} << 20}) {
      Tensor t = Tensor::empty({n}, kFloat32, Device::CUDA);  // fresh the first time, reused the second
      const Tensor h = t.copy_to(Device::CPU);
      const auto* p = static_cast<const unsigned char*>(h.raw_data());
      bool all = true;
      for (size_t i = 0; i < h.nbytes(); ++i) all = all && p[i] == b;
      CHECK_MESSAGE(all, "poison " << b << ", " << n << " floats");
    }
  }
  cuda::set_poison(-1);
  CHECK(cuda::poison() == -1);
  testing::check_error([] { cuda::set_poison(300); }, {"cuda::set_poison", "300", "0..255", "-1"});
}
