// conv3d_cpu_bench.cpp - time the CPU convolution kernels (ops/conv/conv_gemm.h, which hands FP32
// 3x3x3 stride-1 layers to the direct kernels of ops/conv/conv_direct.h) on the layer shapes of the
// 3-D U-Net (by default the half-width one: levels 8-16-32-64, bottleneck 128, 1 channel in, 3
// classes), FP32, NCDHW.
//
// For each layer it times fprop, dgrad and wgrad separately (fastest of --reps runs after two warm-ups)
// and prints GFLOP/s, with flops = 2 * N * Cout * Cin * k^3 * (output voxels) for each direction (for
// conv_transpose3d, its input voxels). The ceiling printed first is what Eigen's SGEMM reaches on a
// square 1024^3 product on the same threads: roughly the FMA peak of the cores (AVX2), which the
// direct kernels approach and the small layers' column GEMMs do not.
// The first layer's dgrad (1 input channel) is never needed in training: the image has no gradient.
//
//   build-*/bench/conv3d_cpu_bench [--batch 2] [--width 8] [--shape 32 32 32] [--reps 10] [--only dec0]
//   (OMP_NUM_THREADS=2; the CPU recipe's patches are --batch 4 --width 12 --shape 32 48 32)
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

struct Extent {
  int64_t d, h, w;
  Extent halved(int times) const { return {d >> times, h >> times, w >> times}; }
};

struct Layer {
  std::string name;
  Extent in;  // the layer's input extents
  int64_t cin, cout, k, s, p;
  bool transposed;  // conv_transpose3d (cin -> cout)
};

// The U-Net of ../shared/reference/torch_unet_step.py at `width` (levels width * 1, 2, 4, 8, bottleneck
// width * 16), 1 channel in, 3 classes; level l runs at the input extents halved l times.
std::vector<Layer> unet_layers(int64_t width, const Extent& e) {
  auto name = [](const char* what, int64_t ci, int64_t co) {
    return std::string(what) + " " + std::to_string(ci) + "->" + std::to_string(co);
  };
  std::vector<Layer> L;
  int64_t c = 1;
  for (int l = 0; l < 4; ++l) {
    const int64_t co = width << l;
    const std::string lv = "enc" + std::to_string(l) + " conv";
    L.push_back({name(lv.c_str(), c, co), e.halved(l), c, co, 3, 1, 1, false});
    L.push_back({name(lv.c_str(), co, co), e.halved(l), co, co, 3, 1, 1, false});
    c = co;
  }
  L.push_back({name("bott conv", c, width * 16), e.halved(4), c, width * 16, 3, 1, 1, false});
  L.push_back({name("bott conv", width * 16, width * 16), e.halved(4), width * 16, width * 16, 3, 1, 1, false});
  c = width * 16;
  for (int l = 3; l >= 0; --l) {
    const int64_t co = width << l;
    const std::string up = "up" + std::to_string(l) + " convT", dec = "dec" + std::to_string(l) + " conv";
    L.push_back({name(up.c_str(), c, co), e.halved(l + 1), c, co, 2, 2, 0, true});
    L.push_back({name(dec.c_str(), 2 * co, co), e.halved(l), 2 * co, co, 3, 1, 1, false});
    L.push_back({name(dec.c_str(), co, co), e.halved(l), co, co, 3, 1, 1, false});
    c = co;
  }
  L.push_back({name("head conv", c, 3) + " k1", e, c, 3, 1, 1, 0, false});
  return L;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU conv3d kernels on the U-Net's layer shapes"};
  int64_t batch = 2, width = 8;
  std::vector<int64_t> shape{32, 32, 32};
  int reps = 10;
  std::string only;
  app.add_option("--batch", batch, "batch size");
  app.add_option("--width", width, "channels of the first level (8: the half-width U-Net)");
  app.add_option("--shape", shape, "input extents D H W (multiples of 16)")->expected(3);
  app.add_option("--reps", reps, "timed runs per measurement (the fastest is reported)");
  app.add_option("--only", only, "time only the layers whose name contains this");
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
  std::printf("batch %lld, width %lld, input %lldx%lldx%lld, FP32, NCDHW\n", static_cast<long long>(batch),
              static_cast<long long>(width), static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
              static_cast<long long>(shape[2]));
  const std::vector<Layer> layers = unet_layers(width, {shape[0], shape[1], shape[2]});

  std::printf("%-20s %8s | %9s %7s | %9s %7s | %9s %7s\n", "layer", "MFLOP", "fprop ms", "GF/s", "dgrad ms", "GF/s",
              "wgrad ms", "GF/s");
  double total_t[3] = {0, 0, 0}, total_flop = 0;
  for (const Layer& L : layers) {
    if (!only.empty() && L.name.find(only) == std::string::npos) continue;
    // The convolution G that runs the layer: the layer itself, or for conv_transpose3d the convolution
    // whose dgrad is its forward (G: cout channels at the output extents -> cin channels at the input's).
    auto out = [&](int64_t e) { return (e - 1) * L.s - 2 * L.p + L.k; };
    const conv::ConvGeometry g =
        L.transposed ? conv::make_geometry(batch, L.cout, L.cin, out(L.in.d), out(L.in.h), out(L.in.w), L.k, L.s, L.p)
                     : conv::make_geometry(batch, L.cin, L.cout, L.in.d, L.in.h, L.in.w, L.k, L.s, L.p);
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
