// norm_cuda_bench - the memory-bound CUDA ops of the U-Net's first level, timed with the bytes they
// must move, so that the achieved bandwidth reads against the GPU's (~4.8 TB/s peak on an H200, ~4 TB/s
// reachable by a copy kernel).
//
//   build/bench/norm_cuda_bench [--iters 20]
//
// Shape (16, 32, 64, 64, 64) NDHWC, FP16 then FP32 activations. Times the launchers (the kernels of
// ops/norm/norm_cuda.cu and ops/pool/max_pool3d_cuda.cu, without autograd), then the whole op through
// autograd (forward + backward, which adds the copy of dx into the leaf's .grad). Bytes counted:
//   batch_norm forward   3 x |x|   (stats read, normalise read, write)
//   batch_norm backward  5 x |x|   (x and dy read for the sums, read again for dx, dx written)
//   max_pool3d forward   |x| + |y| + 4 B per output (argmax)
//   max_pool3d backward  |dy| + 4 B per output + |dx|
// Inputs are a 1 Mi-value random block tiled over the tensor (generating 134 M normals on the host
// would take longer than the benchmark).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "ops/norm/norm.h"
#include "ops/pool/max_pool3d.h"
#ifdef HALFGRAD_CUDA
#include "ops/norm/norm_cuda.h"
#include "ops/pool/max_pool3d_cuda.h"
#endif

using namespace halfgrad;

#ifdef HALFGRAD_CUDA
namespace {

using Clock = std::chrono::steady_clock;

Tensor tiled_random(const Shape& s, Dtype dt, uint64_t seed) {
  Generator g(seed);
  std::vector<float> block(1 << 20);
  for (float& v : block) v = static_cast<float>(g.normal());
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = block[(i * 7 + i / block.size()) % block.size()];
  return Tensor::from_vector(v, s, dt).copy_to(Device::CUDA).format_copy(MemoryFormat::ChannelsLast3d);
}

// Mean milliseconds of f over iters calls, after one warm-up call; the stream is drained around it.
template <typename F>
double time_ms(F&& f, int iters) {
  f();
  cuda::synchronize("bench warm-up");
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  cuda::synchronize("bench");
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
}

void report(const char* what, const char* dtype, double ms, double bytes) {
  std::printf("%-34s %-8s %9.3f ms %9.1f GB/s  (%.0f MB moved)\n", what, dtype, ms, bytes / (ms * 1e-3) / 1e9,
              bytes / 1e6);
}

}  // namespace
#endif

int main(int argc, char** argv) {
  CLI::App app{"halfgrad CUDA batch_norm / max_pool3d bandwidth"};
  int iters = 20;
  app.add_option("--iters", iters, "timed calls per figure (after one warm-up)");
  CLI11_PARSE(app, argc, argv);
#ifndef HALFGRAD_CUDA
  std::printf("norm_cuda_bench: halfgrad was built without CUDA\n");
  return 0;
#else
  if (!cuda::is_available()) {
    std::printf("norm_cuda_bench: no CUDA device (%s)\n", cuda::device_description().c_str());
    return 0;
  }
  std::printf("%s\n", cuda::device_description().c_str());
  const Shape s = {16, 32, 64, 64, 64};
  const int64_t C = s[1];
  for (Dtype dt : {kFloat16, kFloat32}) {
    const char* dn = dtype_name(dt);
    const Tensor x = tiled_random(s, dt, 1);
    const Tensor dy = tiled_random(s, dt, 2);
    const Tensor w = Tensor::ones({C}).copy_to(Device::CUDA), b = Tensor::zeros({C}).copy_to(Device::CUDA);
    const Tensor rm = Tensor::zeros({C}).copy_to(Device::CUDA), rv = Tensor::ones({C}).copy_to(Device::CUDA);
    const double xb = static_cast<double>(x.nbytes());

    cuda::NormCudaArgs a;
    a.op = "batch_norm";
    cuda::NormCudaForward f;
    report("batch_norm forward (kernels)", dn, time_ms([&] { f = cuda::norm_forward(a, x, w, b, rm, rv); }, iters),
           3 * xb);
    report("batch_norm backward (kernels)", dn,
           time_ms([&] { cuda::norm_backward(a, x, w, f.saved, dy, true, true, true); }, iters), 5 * xb);

    const Tensor dy_pool = tiled_random({16, 32, 32, 32, 32}, dt, 3);
    const double yb = static_cast<double>(dy_pool.nbytes()), ib = 4.0 * static_cast<double>(dy_pool.numel());
    cuda::MaxPoolCudaForward pf;
    report("max_pool3d k2 s2 forward (kernels)", dn, time_ms([&] { pf = cuda::max_pool3d_forward(x, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}); }, iters),
           xb + yb + ib);
    report("max_pool3d k2 s2 backward (kernels)", dn,
           time_ms([&] { cuda::max_pool3d_backward(dy_pool, pf.argmax.get(), s, dt, x.memory_format(), {2, 2, 2}, {2, 2, 2}, {0, 0, 0}); }, iters),
           yb + ib + xb);

    // The ops through autograd: forward + backward, the leaf's .grad reset each time.
    Tensor xl = x.detach().set_requires_grad(true);
    Tensor wl = w.clone().set_requires_grad(true), bl = b.clone().set_requires_grad(true);
    report("batch_norm fwd+bwd (op, autograd)", dn, time_ms([&] {
             xl.impl()->grad.reset();
             ops::batch_norm(xl, rm, rv, wl, bl).backward(dy);
           }, iters),
           8 * xb);
    report("max_pool3d fwd+bwd (op, autograd)", dn, time_ms([&] {
             xl.impl()->grad.reset();
             ops::max_pool3d(xl, 2, 2).backward(dy_pool);
           }, iters),
           2 * (xb + yb + ib));
  }
  return 0;
#endif
}
