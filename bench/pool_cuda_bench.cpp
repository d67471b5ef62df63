// pool_cuda_bench - the pooling and resampling ops of issue 10 on CUDA, timed with the bytes they
// must move, so the achieved bandwidth reads against the GPU's (~4.8 TB/s peak on an H200, ~4 TB/s
// reachable by a copy kernel). Forward only, under NoGradGuard (no tape is recorded; max_pool3d still
// writes its argmax, counted below).
//
//   build/bench/pool_cuda_bench [--iters 20]
//
// Shape (4, 32, 32, 64, 64) NCDHW and NDHWC, FP16 and FP32. Bytes counted: |x| + |y| (+ 4 B per
// output for max_pool3d's argmax); the tap tables uploaded by the separable map (a few KB) are not.
// Rows: max_pool3d 2x2x2 stride 2 (the U-Net's unrolled path), max_pool3d (1, 2, 2) and 3^3 stride 2
// padding 1 (the clipped general path), avg_pool3d 2^3 and 3^3 s2 p1, adaptive_avg_pool3d to 4^3,
// upsample nearest and trilinear x2.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "autograd/node.h"
#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "ops/pool/avg_pool3d.h"
#include "ops/pool/max_pool3d.h"
#include "ops/pool/upsample.h"

using namespace halfgrad;

namespace {

using Clock = std::chrono::steady_clock;

// Mean milliseconds of f over iters calls, after one warm-up call; the stream is drained around it.
double time_ms(const std::function<Tensor()>& f, int iters) {
  f();
  cuda::synchronize("bench warm-up");
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  cuda::synchronize("bench");
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pool_cuda_bench: CUDA pooling / upsampling bandwidth"};
  int iters = 20;
  app.add_option("--iters", iters, "timed calls per row");
  CLI11_PARSE(app, argc, argv);
  if (!cuda::is_available()) {
    std::printf("pool_cuda_bench: %s\n", cuda::device_description().c_str());
    return 0;
  }
  std::printf("%s\n", cuda::device_description().c_str());
  autograd::NoGradGuard no_grad;
  const Shape s = {4, 32, 32, 64, 64};
  Generator g(1);
  const Tensor host = Tensor::uniform(s, -1.0, 1.0, g);
  struct Row {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    bool argmax;
  };
  const std::vector<Row> rows = {
      {"max_pool3d 2^3 s2", [](const Tensor& x) { return ops::max_pool3d(x, 2, 2); }, true},
      {"max_pool3d (1,2,2)", [](const Tensor& x) { return ops::max_pool3d(x, {1, 2, 2}, {1, 2, 2}); }, true},
      {"max_pool3d 3^3 s2 p1", [](const Tensor& x) { return ops::max_pool3d(x, 3, 2, 1); }, true},
      {"avg_pool3d 2^3", [](const Tensor& x) { return ops::avg_pool3d(x, 2); }, false},
      {"avg_pool3d 3^3 s2 p1", [](const Tensor& x) { return ops::avg_pool3d(x, 3, 2, 1); }, false},
      {"adaptive_avg_pool3d 4^3", [](const Tensor& x) { return ops::adaptive_avg_pool3d(x, 4); }, false},
      {"upsample nearest x2", [](const Tensor& x) { return ops::upsample_nearest3d(x, {64, 128, 128}, {2, 2, 2}); }, false},
      {"upsample trilinear x2",
       [](const Tensor& x) { return ops::upsample_trilinear3d(x, {64, 128, 128}, false, {2, 2, 2}); }, false},
  };
  for (Dtype dt : {kFloat16, kFloat32})
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      const Tensor x = host.cast_copy(dt).copy_to(Device::CUDA).format_copy(f);
      for (const Row& r : rows) {
        Tensor y = r.f(x);
        const double bytes = static_cast<double>(x.nbytes() + y.nbytes()) + (r.argmax ? 4.0 * y.numel() : 0.0);
        const double ms = time_ms([&] { return r.f(x); }, iters);
        std::printf("%-26s %-8s %-6s %9.3f ms %9.1f GB/s  (%.0f MB moved)\n", r.name, dtype_name(dt),
                    f == MemoryFormat::ChannelsLast3d ? "NDHWC" : "NCDHW", ms, bytes / (ms * 1e-3) / 1e9, bytes / 1e6);
      }
    }
  return 0;
}
