// 11_layouts - NCDHW vs NDHWC (channels-last) for conv3d, measured honestly on what halfgrad has.
//
//   OMP_NUM_THREADS=1 build/examples/11_layouts
//
// (One thread gives stable times on a machine whose cores other jobs share: with two OpenMP threads a
// parallel loop waits at its barrier for whichever thread the scheduler preempted, and in our runs the
// times jumped to multiples of 4 ms. Without other load, leave OMP_NUM_THREADS unset.)
//
// halfgrad's CPU ops are NCDHW only (core/tensor.h: contiguous, channels second). On a GPU the
// layout matters: Tensor Core convolutions read C as the contiguous, innermost dimension (implicit
// GEMM with K = C * k^3 along memory), so cuDNN and CUTLASS want NDHWC, and a framework that keeps
// NCDHW pays a transpose before and after every conv. Those channels-last kernels arrive with the CUDA
// backend; there is no NDHWC conv on the CPU to time. What this program can measure, and prints, is:
//   1. conv3d forward in NCDHW (FP32, and FP16 under autocast, which includes casting x and w to FP16)
//      on U-Net-like shapes;
//   2. the cost of one layout conversion, NCDHW -> NDHWC and back (a permute copy written here; halfgrad
//      has no permute op), in ms and GB/s, and as a fraction of the conv it would surround.
// The fraction is what a backend without native channels-last kernels would add per conv (two copies);
// with native kernels the copies disappear (the model is converted once), which is the point of
// channels-last. Run time: about a second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <omp.h>

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "ops/ops.h"

using namespace halfgrad;

constexpr int kReps = 11;

// (N, C, D, H, W) -> (N, D, H, W, C), returned as a tensor of shape (N, D, H, W, C).
static Tensor to_channels_last(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2) * x.size(3) * x.size(4);
  Tensor out = Tensor::empty({N, x.size(2), x.size(3), x.size(4), C});
  const float* src = x.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for collapse(2)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t c = 0; c < C; ++c) dst[(n * S + s) * C + c] = src[(n * C + c) * S + s];
  return out;
}

// (N, D, H, W, C) -> (N, C, D, H, W).
static Tensor to_channels_first(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(4), S = x.size(1) * x.size(2) * x.size(3);
  Tensor out = Tensor::empty({N, C, x.size(1), x.size(2), x.size(3)});
  const float* src = x.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for collapse(2)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) dst[(n * C + c) * S + s] = src[(n * S + s) * C + c];
  return out;
}

// Fastest wall time of `reps` calls of f, in ms, after one warm-up call. The fastest, not the median:
// on a shared 2-core machine other processes only ever add time, so the minimum is the best estimate
// of what the operation itself costs.
template <typename F>
static double fastest_ms(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t.front();
}

int main() {
  Generator gen(0);
  autograd::NoGradGuard no_grad;  // forward only
  std::printf("conv3d 3x3x3, padding 1, forward; times are the fastest of %d runs, %d OpenMP thread(s)\n\n", kReps,
              omp_get_max_threads());
  std::printf("shape (N,C,D,H,W)   Cout  conv NCDHW FP32  conv NCDHW FP16(autocast)  NCDHW->NDHWC  NDHWC->NCDHW  "
              "copy GB/s  2 copies / FP32 conv\n");
  struct Case { int64_t n, c, s, cout; };
  for (const Case& k : {Case{2, 8, 32, 8}, Case{2, 16, 32, 16}, Case{2, 32, 16, 32}}) {
    const Tensor x = Tensor::randn({k.n, k.c, k.s, k.s, k.s}, gen);
    const Tensor w = Tensor::randn({k.cout, k.c, 3, 3, 3}, gen, kFloat32, 0.1);
    const ops::Conv3dParams same = ops::Conv3dParams().padding(1);
    const double conv32 = fastest_ms(kReps, [&] { ops::conv3d(x, w, Tensor(), same); });
    const double conv16 = fastest_ms(kReps, [&] {
      amp::AutocastGuard autocast;
      ops::conv3d(x, w, Tensor(), same);
    });
    Tensor cl;
    const double to_cl = fastest_ms(kReps, [&] { cl = to_channels_last(x); });
    const double to_cf = fastest_ms(kReps, [&] { to_channels_first(cl); });
    // Check the round trip is exact (a permute moves values, never changes them).
    const Tensor back = to_channels_first(cl);
    bool exact = true;
    for (int64_t i = 0; i < x.numel(); ++i) exact &= back.data<float>()[i] == x.data<float>()[i];
    const double gbs = 2.0 * static_cast<double>(x.nbytes()) / (to_cl * 1e-3) / 1e9;  // read + write
    std::printf("(%lld,%2lld,%lld,%lld,%lld)     %4lld  %12.2f ms  %22.2f ms  %9.2f ms  %9.2f ms  %9.2f  %17.1f%%%s\n",
                static_cast<long long>(k.n), static_cast<long long>(k.c), static_cast<long long>(k.s),
                static_cast<long long>(k.s), static_cast<long long>(k.s), static_cast<long long>(k.cout), conv32,
                conv16, to_cl, to_cf, gbs, 100 * (to_cl + to_cf) / conv32, exact ? "" : "  ROUND TRIP NOT EXACT");
  }
  return 0;
}
