// gemm_f16 with each kernel family forced (ops/matmul/gemm_paths.h) against a double-precision CPU
// product of the same FP16 operands: every family the automatic choice can take on sm_90 (the TMA
// kernel on 128x256, 128x128 and 128x64 tiles, the narrow two also with K split over a 2-CTA cluster,
// tiles paired in a 2-CTA cluster sharing B or A, with register or TMA-store epilogues) and, where the
// lab is built (bench/gemm/lab_families.h, HALFGRAD_BENCH), the lab's families beside them: the
// clusters of 4 and 8 64-wide tiles sharing A (whose last units hang over C's right edge on most of
// these shapes) and the cp.async producer; mma.sync on
// every GPU, all four N/T layouts, FP32 and FP16 output, alpha and beta. The shapes cut tiles at every
// edge: M, N not multiples of 128 / 64 / 256, K not a multiple of the 64-wide slice (TMA zero-fills),
// K = 8 (a split's second CTA then has no slice), a problem smaller than one tile, 1000 x 1000 x 1000
// (the size rungs 12 and 13 are for), and 2048 x 2048 x 128, where every persistent CTA and cluster
// walks several tiles (the split's reduce buffer handed back and forth, its barriers' phases wrapping). A family that cannot run here (no sm_90) says why
// and the case checks the rest. A chain of GEMMs queued back to back, each reading the output of the
// one before and overwriting what that one read, checks that a programmatic dependent launch still
// waits for its predecessor (the same bits as ordinary launches).
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <optional>
#include <utility>

#include "core/cuda/runtime.h"
#include "bench/gemm/lab_families.h"
#include "ops/matmul/gemm_paths.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

struct Case {
  int64_t M, N, K;
};

#if defined(HALFGRAD_CUDA)
using cuda::GemmArgs;
using cuda::GemmLayout;
using cuda::GemmPath;
using LabFamily = cuda::gemm_lab::Family;

/// Stored operand (rows x cols) of FP16 values N(0, 1), and its values as doubles.
struct Operand {
  Tensor device;
  std::vector<float> values;
};

Operand make_operand(int64_t rows, int64_t cols, uint64_t seed) {
  const Tensor h = random_tensor({rows, cols}, seed, kFloat32).cast_copy(kFloat16);
  return {h.copy_to(Device::CUDA), h.to_float_vector()};
}

/// C = alpha * op(A) op(B) + beta * C0 in double, from the stored operands' values.
std::vector<double> reference(const Case& c, const Operand& a, bool at, const Operand& b, bool bt, float alpha,
                              float beta, const std::vector<float>& c0) {
  std::vector<double> out(static_cast<size_t>(c.M * c.N));
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double x = at ? a.values[k * c.M + i] : a.values[i * c.K + k];
        const double y = bt ? b.values[j * c.K + k] : b.values[k * c.N + j];
        s += x * y;
      }
      out[i * c.N + j] = alpha * s + beta * c0[i * c.N + j];
    }
  }
  return out;
}

const char* path_name(GemmPath p) {
  switch (p) {
    case GemmPath::kMmaSync: return "mma_sync";
    case GemmPath::kTmaPersistent: return "tma (128x256, register epilogue)";
    case GemmPath::kTmaStore: return "tma_store (128x256)";
    case GemmPath::kTmaStore128: return "tma_store_128";
    case GemmPath::kTmaStore64: return "tma_store_64";
    case GemmPath::kTmaSplit128: return "split_128 (K over a 2-CTA cluster)";
    case GemmPath::kTmaSplit64: return "split_64 (K over a 2-CTA cluster)";
    case GemmPath::kTmaPair256: return "pair_256 (B multicast over a 2-CTA cluster)";
    case GemmPath::kTmaPair128: return "pair_128 (B multicast over a 2-CTA cluster)";
    case GemmPath::kTmaPairA128: return "pair_a_128 (A multicast over a 2-CTA cluster)";
    case GemmPath::kTmaPairA64: return "pair_a_64 (A multicast over a 2-CTA cluster)";
    case GemmPath::kTmaPlanned: return "tma planned (tile_plan, dependent launch)";
    case GemmPath::kTmaPlannedSerial: return "tma planned (tile_plan, serial launch)";
    default: return "auto";
  }
}

/// A kernel family: gemm_f16's (`path`) or, when `lab` is set, the lab's (bench/gemm/lab_families.h).
struct Family {
  Family(GemmPath p) : path(p) {}  // NOLINT: implicit, so that a GemmPath reads as its family
  GemmPath path;
  std::optional<LabFamily> lab;
};

std::string family_name(const Family& f) {
  if (!f.lab) return path_name(f.path);
  switch (*f.lab) {
    case LabFamily::kWgmma: return "wgmma (lab: cp.async, 128x256)";
    case LabFamily::kTmaQuadA64: return "quad_a_64 (lab: A multicast over a 4-CTA cluster)";
    case LabFamily::kTmaOctA64: return "oct_a_64 (lab: A multicast over an 8-CTA cluster)";
    case LabFamily::kTmaCpAsync128: return "cp_async_128 (lab: cp.async producer)";
    case LabFamily::kTmaCpAsync64: return "cp_async_64 (lab: cp.async producer)";
  }
  return "lab";
}

/// gemm_f16(g) on the family: nullptr once queued, else why not.
const char* run_family(const GemmArgs& g, const Family& f) {
  if (!f.lab) return cuda::gemm_f16_on(g, f.path);
#if defined(HALFGRAD_GEMM_LAB)
  return cuda::gemm_lab::gemm_f16_on(g, *f.lab);
#else
  return "the lab is not built here (bench/gemm/, -DHALFGRAD_BENCH=ON)";
#endif
}

Family lab(LabFamily l) {
  Family f(GemmPath::kAuto);
  f.lab = l;
  return f;
}

/// Runs every family on one case and layout; returns how many families ran.
int check_case(const Case& c, bool at, bool bt, bool c_half, float alpha, float beta, uint64_t seed) {
  const Operand a = at ? make_operand(c.K, c.M, seed) : make_operand(c.M, c.K, seed);
  const Operand b = bt ? make_operand(c.N, c.K, seed + 1) : make_operand(c.K, c.N, seed + 1);
  const Tensor c0 = random_tensor({c.M, c.N}, seed + 2, kFloat32).cast_copy(c_half ? kFloat16 : kFloat32);
  const std::vector<double> want = reference(c, a, at, b, bt, alpha, beta, c0.to_float_vector());
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  int ran = 0;
  const Family families[] = {{GemmPath::kMmaSync},       {GemmPath::kTmaPersistent}, {GemmPath::kTmaStore},
                             {GemmPath::kTmaStore128},   {GemmPath::kTmaStore64},    {GemmPath::kTmaSplit128},
                             {GemmPath::kTmaSplit64},    {GemmPath::kTmaPair256},    {GemmPath::kTmaPair128},
                             {GemmPath::kTmaPairA128},   {GemmPath::kTmaPairA64},    lab(LabFamily::kTmaQuadA64),
                             lab(LabFamily::kTmaOctA64), lab(LabFamily::kTmaCpAsync128), lab(LabFamily::kTmaCpAsync64),
                             {GemmPath::kTmaPlanned},    {GemmPath::kTmaPlannedSerial}, {GemmPath::kAuto}};
  for (const Family& family : families) {
    Tensor out = c0.copy_to(Device::CUDA);
    GemmArgs g{c.M, c.N, c.K,
               static_cast<const uint16_t*>(a.device.raw_data()), at ? c.M : c.K, at ? GemmLayout::T : GemmLayout::N,
               static_cast<const uint16_t*>(b.device.raw_data()), bt ? c.K : c.N, bt ? GemmLayout::T : GemmLayout::N,
               out.raw_data(), c.N, c_half};
    g.alpha = alpha;
    g.beta = beta;
    g.op = "gemm_paths test";
    const char* why = run_family(g, family);
    if (why != nullptr) {
      const std::string note = family_name(family) + " not run: " + why;
      MESSAGE(note);
      continue;
    }
    ++ran;
    const std::vector<float> got = out.to_float_vector();
    // FP32 sums of K FP16 products in another order, then (FP16 out) one rounding: relative to the
    // output's scale, 2^-11 for the rounding plus K-dependent FP32 error far below it.
    const double tol = (c_half ? 1e-3 : 1e-5) * scale + 1e-6;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= tol)) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++bad;
      }
    }
    // One std::string per message: doctest would print a const char* operand of << as a pointer.
    std::ostringstream what;
    what << family_name(family) << " " << c.M << "x" << c.N << "x" << c.K << " " << (at ? "T" : "N") << (bt ? "T" : "N")
         << (c_half ? " f16 out" : " f32 out") << " alpha " << alpha << " beta " << beta;
    if (first >= 0) what << "; first mismatch at (" << first / c.N << ", " << first % c.N << "): " << got[first] << " vs " << want[first];
    const std::string context = what.str();
    INFO(context);
    CHECK(bad == 0);
  }
  return ran;
}
#else
// A build without CUDA has no gemm_f16_on to link; the cases below are declared all the same and
// skip (CUDA_TEST_CASE), so this is never called.
int check_case(const Case&, bool, bool, bool, float, float, uint64_t) { return 0; }
#endif

}  // namespace

CUDA_TEST_CASE("gemm paths cuda every family, layout and output type on edge-cutting shapes (vs double CPU)") {
  const Case cases[] = {{129, 257, 40}, {1288, 72, 136}, {200, 520, 8}, {17, 24, 100}, {384, 392, 200}};
  uint64_t seed = 11;
  for (const Case& c : cases) {
    for (int layout = 0; layout < 4; ++layout) {
      for (bool c_half : {false, true}) {
        CHECK(check_case(c, layout & 1, layout & 2, c_half, 1.f, 0.f, seed) >= 2);
        seed += 3;
      }
    }
  }
}

CUDA_TEST_CASE("gemm paths cuda alpha and beta (C read: register epilogue) on every family") {
  uint64_t seed = 500;
  for (bool c_half : {false, true}) {
    CHECK(check_case({257, 384, 72}, false, true, c_half, 0.5f, -2.f, seed) >= 2);
    CHECK(check_case({257, 384, 72}, true, false, c_half, 2.f, 1.f, seed + 3) >= 2);
    seed += 6;
  }
}

#if defined(HALFGRAD_CUDA)
namespace {
/// The bits of C from one run of `path` on a fixed 1000^3 problem (FP32 out); empty where the family
/// cannot run here.
std::vector<float> run_bits(const Family& family, const Operand& a, const Operand& b) {
  Tensor out = Tensor::zeros({1000, 1000}, kFloat32, Device::CUDA);
  GemmArgs g{1000, 1000, 1000, static_cast<const uint16_t*>(a.device.raw_data()), 1000, GemmLayout::N,
             static_cast<const uint16_t*>(b.device.raw_data()), 1000, GemmLayout::N, out.raw_data(), 1000, false};
  const char* why = run_family(g, family);
  if (why != nullptr) {
    const std::string note = family_name(family) + " not run: " + why;
    MESSAGE(note);
    return {};
  }
  return out.to_float_vector();
}
}  // namespace
#endif

CUDA_TEST_CASE("gemm paths cuda the K-split families give the same bits on every run (fixed-order reduction)") {
#if defined(HALFGRAD_CUDA)
  const Operand a = make_operand(1000, 1000, 41), b = make_operand(1000, 1000, 42);
  for (GemmPath path : {GemmPath::kTmaSplit128, GemmPath::kTmaSplit64}) {
    const std::vector<float> first = run_bits(path, a, b), second = run_bits(path, a, b);
    if (first.empty()) continue;  // not an sm_90 GPU (named by run_bits)
    CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);
  }
#endif
}

CUDA_TEST_CASE("gemm paths cuda the cp.async producer fills the tiles TMA fills: the same bits as the TMA producer") {
#if defined(HALFGRAD_CUDA)
  // Same tiles, same wgmma order, and the same zero fill at the edges (K = 1000: the last slice is 40
  // of 64 wide; M = N = 1000: the last tile-row and tile-column stick out), so C must match bit for bit.
  const Operand a = make_operand(1000, 1000, 43), b = make_operand(1000, 1000, 44);
  const std::pair<Family, Family> pairs[] = {{lab(LabFamily::kTmaCpAsync128), {GemmPath::kTmaStore128}},
                                             {lab(LabFamily::kTmaCpAsync64), {GemmPath::kTmaStore64}}};
  for (const auto& [cp_async, tma] : pairs) {
    const std::vector<float> got = run_bits(cp_async, a, b), want = run_bits(tma, a, b);
    if (got.empty() || want.empty()) continue;  // not an sm_90 GPU (named by run_bits)
    double norm = 0;
    for (float v : want) norm += static_cast<double>(v) * v;
    const std::string context = family_name(cp_async) + " against " + family_name(tma);
    INFO(context);
    CHECK(norm > 0);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
#endif
}

#if defined(HALFGRAD_CUDA)
namespace {
/// X <- alpha * X W, `steps` times, queued back to back with no host synchronisation, through two
/// FP16 buffers in turn: each GEMM reads the buffer the one before it wrote (read after write) and
/// writes the buffer that one read (write after read). Returns the last output's values.
std::vector<float> gemm_chain(GemmPath path, const Operand& x0, const Operand& w, int64_t n, int steps) {
  Tensor bufs[2] = {x0.device.clone(), Tensor::zeros({n, n}, kFloat16, Device::CUDA)};
  for (int s = 0; s < steps; ++s) {
    const Tensor& in = bufs[s % 2];
    Tensor& out = bufs[(s + 1) % 2];
    GemmArgs g{n, n, n, static_cast<const uint16_t*>(in.raw_data()), n, GemmLayout::N,
               static_cast<const uint16_t*>(w.device.raw_data()), n, GemmLayout::N, out.raw_data(), n, true};
    g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));  // keeps |X| near 1 (W is N(0, 1))
    g.op = "gemm_paths chain";
    if (const char* why = cuda::gemm_f16_on(g, path)) {
      const std::string note = std::string(path_name(path)) + " not run: " + why;
      MESSAGE(note);
      return {};
    }
  }
  return bufs[steps % 2].to_float_vector();
}
}  // namespace
#endif

CUDA_TEST_CASE("gemm paths cuda a dependent launch waits for the GEMM before it: a back-to-back chain gives the serial chain's bits") {
#if defined(HALFGRAD_CUDA)
  // 768^3 runs 72 CTAs of 128 x 64 on 132 SMs: each next GEMM's CTAs are scheduled on the idle SMs
  // while the one before still runs, so a missing wait would read half-written inputs. 1000^3 runs
  // 64 clusters of 2 (128 x 64 tiles sharing A), 2048^3 fills every SM (the next GEMM's CTAs start
  // as these exit).
  for (int64_t n : {768, 1000, 2048}) {
    const Operand x0 = make_operand(n, n, 70 + n), w = make_operand(n, n, 71 + n);
    const std::vector<float> serial = gemm_chain(GemmPath::kTmaPlannedSerial, x0, w, n, 8);
    const std::vector<float> dependent = gemm_chain(GemmPath::kTmaPlanned, x0, w, n, 8);
    if (serial.empty() || dependent.empty()) continue;
    double norm = 0;
    for (float v : serial) norm += static_cast<double>(v) * v;
    std::ostringstream what;
    what << "n = " << n << ", rms of the last output " << std::sqrt(norm / static_cast<double>(serial.size()));
    const std::string context = what.str();
    INFO(context);
    CHECK(std::isfinite(norm));
    CHECK(norm > 0);  // the chain did not collapse to zeros, which would match trivially
    CHECK(std::memcmp(serial.data(), dependent.data(), serial.size() * sizeof(float)) == 0);
  }
#endif
}

CUDA_TEST_CASE("gemm paths cuda the plan pairs tiles where rows are not whole 32-byte sectors (H200's 132 SMs)") {
#if defined(HALFGRAD_CUDA)
  // gemm_tma_cuda.cu's tile_plan as measured by `gemm_bench --dispatch` on the H200 (2026-12-04):
  // the expectations hold for 132 SMs; gemm_f16_choice launches and reads nothing, so one small
  // buffer stands for every operand (only its alignment counts).
  if (cuda::compute_capability() != 90 || cuda::sm_count() != 132) {
    MESSAGE("skipped: the plan's expectations are for an sm_90 GPU with 132 SMs (an H200 or H100 SXM)");
    return;
  }
  const Tensor buffer = Tensor::zeros({64}, kFloat32, Device::CUDA);
  auto choice = [&](int64_t M, int64_t N, int64_t K) {
    const auto* ptr = static_cast<const uint16_t*>(buffer.raw_data());
    GemmArgs g{M, N, K, ptr, K, GemmLayout::N, ptr, N, GemmLayout::N, buffer.raw_data(), N, false};
    g.op = "gemm_paths plan test";
    return cuda::gemm_f16_choice(g);
  };
  // Rows of 2000 / 2032 bytes, one wave: 64 A-sharing pairs of 128 x 64 tiles (128 CTAs).
  CHECK(choice(1000, 1000, 1000) == "pair_a_64");
  CHECK(choice(1016, 1016, 1016) == "pair_a_64");
  // Several waves of B-sharing 128 x 256 pairs (an even number of tile-rows).
  CHECK(choice(2008, 2008, 2008) == "pair_256");
  CHECK(choice(3000, 3000, 3000) == "pair_256");
  // 11 tile-rows (odd): no B-sharing pair; 128 x 128 tiles sharing A.
  CHECK(choice(1400, 1400, 1400) == "pair_a_128");
  // 63 tile-rows: no B-sharing pair, and the A-sharing ones are narrower: the unpaired 128 x 256.
  CHECK(choice(8008, 8008, 8008) == "tma_store");
  // One operand cut: only the pairs that share it. A's rows (lda = K = 2008): the A-sharing pairs
  // lose to the unpaired 128 x 256; B's rows (ldb = N = 2008): the B-sharing 128 x 256.
  CHECK(choice(2048, 2048, 2008) == "tma_store");
  CHECK(choice(2008, 2008, 2048) == "pair_256");
  // Whole sectors: the unpaired plans of rungs 12 and 13.
  CHECK(choice(8000, 8000, 8000) == "tma_store");
  CHECK(choice(1024, 1024, 1024) == "tma_store_64");
  CHECK(choice(1008, 1008, 1008) == "tma_store_64");
  CHECK(choice(4096, 4096, 4096) == "tma_store");
  CHECK(choice(1024, 1024, 16384) == "split_128");
  // lda not a multiple of 8: TMA cannot describe A.
  CHECK(choice(4095, 4095, 4095) == "mma_sync");
#endif
}

CUDA_TEST_CASE("gemm paths cuda 2048x2048x128: every persistent cluster and CTA walks several tiles (reduce barriers' phases wrap)") {
  // 256 tiles of 128 x 128 and 512 of 128 x 64 for at most 66 clusters (132 SMs): 4-8 tiles each.
  CHECK(check_case({2048, 2048, 128}, false, false, false, 1.f, 0.f, 950) >= 2);
  CHECK(check_case({2048, 2048, 128}, false, true, true, 1.f, 0.f, 953) >= 2);
}

CUDA_TEST_CASE("gemm paths cuda 1000x1000x1000 (rung 12's problem: the narrow tiles' persistent walk) N/N and N/T") {
  CHECK(check_case({1000, 1000, 1000}, false, false, false, 1.f, 0.f, 900) >= 2);
  CHECK(check_case({1000, 1000, 1000}, false, true, true, 1.f, 0.f, 903) >= 2);
}

