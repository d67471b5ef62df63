// conv3d_cpu_bench.cpp - time the CPU convolution kernels (ops/conv/conv_gemm.h, which hands FP32
// 3x3x3 stride-1 layers to the direct kernels of ops/conv/conv_direct.h) on the layer shapes of the
// half-width 3-D U-Net (levels 8-16-32-64, bottleneck 128, 1 channel in, 3 classes), FP32, NCDHW.
//
// For each layer it times fprop, dgrad and wgrad separately (fastest of --reps runs after two warm-ups)
// and prints GFLOP/s, with flops = 2 * N * Cout * Cin * k^3 * (output voxels) for each direction (for
// conv_transpose3d, its input voxels). The ceiling printed first is what Eigen's SGEMM reaches on a
// square 1024^3 product on the same threads: roughly the FMA peak of the cores (AVX2), which the
// direct kernels approach and the small layers' column GEMMs do not.
// The first layer's dgrad (1 input channel) is never needed in training: the image has no gradient.
//
//   build-*/bench/conv3d_cpu_bench [--batch 2] [--size 32] [--reps 10] [--only dec0]   (OMP_NUM_THREADS=2)
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/common.h"
#include "ops/conv/conv_gemm.h"

using namespace halfgrad::ops;

namespace {

// The fastest of `reps` runs after two warm-ups. The minimum, not the median: on a shared 2-core machine
// other processes' time slices land in some runs (and a preempted thread stalls the other at the next
// barrier), so the minimum is the closest measure of the kernel's own time.
double best_seconds(const std::function<void()>& f, int reps) {
  f();
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  return *std::min_element(t.begin(), t.end());
}

std::vector<float> random_vector(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

struct Layer {
  std::string name;
  int64_t size, cin, cout, k, s, p;
  bool transposed;  // conv_transpose3d (cin -> cout, `size` = its input extent)
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU conv3d kernels on the half-width U-Net's layer shapes"};
  int64_t batch = 2, size = 32;
  int reps = 10;
  std::string only;
  app.add_option("--batch", batch, "batch size");
  app.add_option("--only", only, "time only the layers whose name contains this");
  app.add_option("--size", size, "input volume edge (a multiple of 16)");
  app.add_option("--reps", reps, "timed runs per measurement (the fastest is reported)");
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(0);
  {
    const int n = 1024;
    Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
    // One column block per thread, each a single-threaded Eigen GEMM (as the kernels run theirs).
    const int threads = num_threads(), step = (n + threads - 1) / threads;
    const double t = best_seconds(
        [&] {
#pragma omp parallel for schedule(static)
          for (int i = 0; i < threads; ++i) {
            const int c0 = i * step, len = std::min(step, n - c0);
            if (len > 0) c.middleCols(c0, len).noalias() = a * b.middleCols(c0, len);
          }
        },
        reps);
    std::printf("threads %d; ceiling: Eigen SGEMM 1024^3 %.1f GFLOP/s\n", num_threads(), 2.0 * n * n * n / t / 1e9);
  }
  std::printf("batch %lld, input %lld^3, FP32, NCDHW\n", static_cast<long long>(batch), static_cast<long long>(size));

  const int64_t S = size;
  std::vector<Layer> layers = {
      {"enc0 conv 1->8", S, 1, 8, 3, 1, 1, false},          {"enc0 conv 8->8", S, 8, 8, 3, 1, 1, false},
      {"enc1 conv 8->16", S / 2, 8, 16, 3, 1, 1, false},    {"enc1 conv 16->16", S / 2, 16, 16, 3, 1, 1, false},
      {"enc2 conv 16->32", S / 4, 16, 32, 3, 1, 1, false},  {"enc2 conv 32->32", S / 4, 32, 32, 3, 1, 1, false},
      {"enc3 conv 32->64", S / 8, 32, 64, 3, 1, 1, false},  {"enc3 conv 64->64", S / 8, 64, 64, 3, 1, 1, false},
      {"bott conv 64->128", S / 16, 64, 128, 3, 1, 1, false},
      {"bott conv 128->128", S / 16, 128, 128, 3, 1, 1, false},
      {"up3 convT 128->64", S / 16, 128, 64, 2, 2, 0, true}, {"dec3 conv 128->64", S / 8, 128, 64, 3, 1, 1, false},
      {"dec3 conv 64->64", S / 8, 64, 64, 3, 1, 1, false},   {"up2 convT 64->32", S / 8, 64, 32, 2, 2, 0, true},
      {"dec2 conv 64->32", S / 4, 64, 32, 3, 1, 1, false},   {"dec2 conv 32->32", S / 4, 32, 32, 3, 1, 1, false},
      {"up1 convT 32->16", S / 4, 32, 16, 2, 2, 0, true},    {"dec1 conv 32->16", S / 2, 32, 16, 3, 1, 1, false},
      {"dec1 conv 16->16", S / 2, 16, 16, 3, 1, 1, false},   {"up0 convT 16->8", S / 2, 16, 8, 2, 2, 0, true},
      {"dec0 conv 16->8", S, 16, 8, 3, 1, 1, false},         {"dec0 conv 8->8", S, 8, 8, 3, 1, 1, false},
      {"head conv 8->3 k1", S, 8, 3, 1, 1, 0, false},
  };

  std::printf("%-20s %8s | %9s %7s | %9s %7s | %9s %7s\n", "layer", "MFLOP", "fprop ms", "GF/s", "dgrad ms", "GF/s",
              "wgrad ms", "GF/s");
  double total_t[3] = {0, 0, 0}, total_flop = 0;
  for (const Layer& L : layers) {
    if (!only.empty() && L.name.find(only) == std::string::npos) continue;
    // The convolution G that runs the layer: the layer itself, or for conv_transpose3d the convolution
    // whose dgrad is its forward (G: cout channels at 2x extent -> cin channels at `size`).
    const int64_t big = L.transposed ? (L.size - 1) * L.s - 2 * L.p + L.k : L.size;
    const conv::ConvGeometry g = L.transposed
                                     ? conv::make_geometry(batch, L.cout, L.cin, big, big, big, L.k, L.s, L.p)
                                     : conv::make_geometry(batch, L.cin, L.cout, big, big, big, L.k, L.s, L.p);
    const std::vector<float> x = random_vector(g.n * g.cin * g.in_vol(), rng);
    const std::vector<float> w = random_vector(g.cout * g.col_rows(), rng);
    const std::vector<float> dy = random_vector(g.n * g.cout * g.out_vol(), rng);
    std::vector<float> y(dy.size()), dx(x.size()), dw(w.size());
    const double flop = 2.0 * g.n * g.cout * g.col_rows() * g.out_vol();
    // Layer directions -> G's kernels: conv3d fprop/dgrad/wgrad = G's; conv_transpose3d fprop = G's dgrad,
    // its dgrad = G's fprop, its wgrad = G's wgrad with the roles of x and dy swapped.
    auto g_fprop = [&] { conv::conv3d_fprop<float>(g, x.data(), w.data(), nullptr, y.data()); };
    auto g_dgrad = [&] { conv::conv3d_dgrad<float>(g, dy.data(), w.data(), dx.data()); };
    auto g_wgrad = [&] { conv::conv3d_wgrad<float>(g, x.data(), dy.data(), dw.data()); };
    const double t_f = best_seconds(L.transposed ? std::function<void()>(g_dgrad) : g_fprop, reps);
    const double t_d = best_seconds(L.transposed ? std::function<void()>(g_fprop) : g_dgrad, reps);
    const double t_w = best_seconds(g_wgrad, reps);
    std::printf("%-20s %8.1f | %9.3f %7.1f | %9.3f %7.1f | %9.3f %7.1f\n", L.name.c_str(), flop / 1e6, t_f * 1e3,
                flop / t_f / 1e9, t_d * 1e3, flop / t_d / 1e9, t_w * 1e3, flop / t_w / 1e9);
    total_t[0] += t_f;
    total_t[1] += t_d;
    total_t[2] += t_w;
    total_flop += flop;
  }
  std::printf("%-20s %8.1f | %9.3f %7.1f | %9.3f %7.1f | %9.3f %7.1f\n", "total", total_flop / 1e6, total_t[0] * 1e3,
              total_flop / total_t[0] / 1e9, total_t[1] * 1e3, total_flop / total_t[1] / 1e9, total_t[2] * 1e3,
              total_flop / total_t[2] / 1e9);
  std::printf("fprop + dgrad + wgrad: %.2f ms\n", (total_t[0] + total_t[1] + total_t[2]) * 1e3);
  return 0;
}
