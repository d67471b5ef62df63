// conv3d_cuda_bench.cpp - conv3d forward + backward (fprop, dgrad, wgrad) on CUDA for the reference
// U-Net's 3x3x3 padding-1 layer shapes, the list of /work/shared/reference/torch_conv3d.py (cuDNN
// through PyTorch), with the same variants and JSON names so bench/conv3d_compare.py can print ratios:
//   for (S, ci, co) in the list, for (dtype, cl) in (float32, NCDHW), (float16, NCDHW), (float16, NDHWC):
//   {"S", "ci", "co", "dtype": "torch.float16", "cl": true, "ms_fwd_bwd", "tflops"} plus halfgrad's
//   own "B", "ms_fprop", "ms_dgrad", "ms_wgrad".
// FLOPs as the torch script counts them: 3 * 2 * B * S^3 * co * ci * 27 (three GEMMs of equal size).
// Timing: cudaEvents around each phase on halfgrad's stream, 3 warm-up iterations, median of 10.
// The launchers of ops/conv/conv3d_cuda.h are called directly (no autograd, no gradient accumulation),
// like the phases cuDNN runs inside torch's backward; NCDHW variants include the layout conversions.
//
// Usage: conv3d_cuda_bench OUT.json [BATCH] [options]   (BATCH 16 by default; torch_conv3d.py uses 4, so run
// with 4 for a like-for-like ms ratio; TFLOP/s compare at any batch). Runtime ~10-30 s on an H200.
// Options after BATCH: --implicit-gemm runs every layer on the implicit GEMM (tc_igemm) even where the
// halo kernels would (ops/conv/conv_halo_path.h): the before/after of issue 11 item 5 in one call;
// --no-split-k runs the implicit GEMM unsplit (ForceSplitK(1), ops/conv/conv_split_k.h): the
// before/after of split K (the 128- and 256-channel layers) in one call.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/tensor.h"

#ifdef HALFGRAD_CUDA
#include <cuda_runtime.h>

#include "ops/conv/conv3d_cuda.h"
#include "ops/conv/conv_halo_path.h"
#include "ops/conv/conv_split_k.h"

namespace halfgrad::cuda {
cudaStream_t stream();  // core/cuda/check.cuh (a .cuh: not includable from host C++)
}
#endif

using namespace halfgrad;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: conv3d_cuda_bench OUT.json [BATCH] [--implicit-gemm] [--no-split-k]\n";
    return 2;
  }
#ifndef HALFGRAD_CUDA
  std::cerr << "conv3d_cuda_bench: halfgrad was built without CUDA\n";
  return 1;
#else
  if (!cuda::is_available()) {
    std::cerr << "conv3d_cuda_bench: " << cuda::device_description() << "\n";
    return 1;
  }
  const int64_t B = argc > 2 ? std::stoll(argv[2]) : 16;
  bool implicit_gemm_only = false, no_split_k = false;
  for (int i = 3; i < argc; ++i) {
    const std::string opt = argv[i];
    if (opt == "--implicit-gemm") {
      implicit_gemm_only = true;
    } else if (opt == "--no-split-k") {
      no_split_k = true;
    } else {
      std::cerr << "conv3d_cuda_bench: unknown option " << opt << " (expected --implicit-gemm or --no-split-k)\n";
      return 2;
    }
  }
  std::optional<ops::conv::ForceImplicitGemm> force;  // held for the whole run
  if (implicit_gemm_only) {
    force.emplace();
    std::cout << "all layers on the implicit GEMM (--implicit-gemm)\n";
  }
  std::optional<ops::conv::ForceSplitK> unsplit;  // held for the whole run
  if (no_split_k) {
    unsplit.emplace(1);
    std::cout << "implicit GEMM unsplit (--no-split-k)\n";
  }
  std::cout << "device: " << cuda::device_description() << ", batch " << B << "\n";
  struct Layer {
    int64_t S, ci, co;
  };
  const std::vector<Layer> layers = {{64, 1, 16}, {64, 16, 16}, {32, 32, 32}, {16, 64, 64},
                                     {8, 128, 128}, {4, 256, 256}, {64, 32, 16}};
  struct Variant {
    Dtype dt;
    bool cl;
    const char* torch_name;
  };
  const std::vector<Variant> variants = {{kFloat32, false, "torch.float32"}, {kFloat16, false, "torch.float16"},
                                         {kFloat16, true, "torch.float16"}};
  cudaEvent_t ev[4];
  for (auto& e : ev) cudaEventCreate(&e);
  std::ofstream json(argv[1]);
  json << "[\n";
  bool first = true;
  Generator gen(1);
  for (const Layer& l : layers) {
    const ops::conv::ConvGeometry g = ops::conv::make_geometry(B, l.ci, l.co, l.S, l.S, l.S, 3, 1, 1);
    for (const Variant& v : variants) {
      const MemoryFormat fmt = v.cl ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous;
      const Tensor x = Tensor::randn({B, l.ci, l.S, l.S, l.S}, gen, v.dt).copy_to(Device::CUDA).format_copy(fmt);
      const Tensor w = Tensor::randn({l.co, l.ci, 3, 3, 3}, gen, v.dt, 0.1).copy_to(Device::CUDA);
      const Tensor dy = Tensor::randn({B, l.co, l.S, l.S, l.S}, gen, v.dt).copy_to(Device::CUDA).format_copy(fmt);
      std::vector<float> t_fprop, t_dgrad, t_wgrad, t_total;
      for (int it = 0; it < 13; ++it) {
        cudaEventRecord(ev[0], cuda::stream());
        Tensor y = ops::conv::cuda_conv3d_fprop(g, x, w, Tensor(), fmt);
        cudaEventRecord(ev[1], cuda::stream());
        Tensor dx = ops::conv::cuda_conv3d_dgrad(g, dy, w, fmt);
        cudaEventRecord(ev[2], cuda::stream());
        Tensor dw = ops::conv::cuda_conv3d_wgrad(g, x, dy, MemoryFormat::Contiguous);
        cudaEventRecord(ev[3], cuda::stream());
        cuda::synchronize("conv3d_cuda_bench");
        if (it < 3) continue;  // warm-up: the caching allocator and the shared-memory opt-ins
        float ms[3];
        for (int p = 0; p < 3; ++p) cudaEventElapsedTime(&ms[p], ev[p], ev[p + 1]);
        t_fprop.push_back(ms[0]);
        t_dgrad.push_back(ms[1]);
        t_wgrad.push_back(ms[2]);
        t_total.push_back(ms[0] + ms[1] + ms[2]);
      }
      auto median = [](std::vector<float> t) {
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
      };
      const double ms = median(t_total);
      const double flop = 3.0 * 2 * B * l.S * l.S * l.S * l.co * l.ci * 27;
      const double tflops = flop / ms / 1e9;
      char line[512];
      std::snprintf(line, sizeof line,
                    "{\"S\": %lld, \"ci\": %lld, \"co\": %lld, \"dtype\": \"%s\", \"cl\": %s, \"B\": %lld, "
                    "\"ms_fwd_bwd\": %.4f, \"tflops\": %.1f, \"ms_fprop\": %.4f, \"ms_dgrad\": %.4f, \"ms_wgrad\": %.4f}",
                    static_cast<long long>(l.S), static_cast<long long>(l.ci), static_cast<long long>(l.co), v.torch_name,
                    v.cl ? "true" : "false", static_cast<long long>(B), ms, tflops, median(t_fprop), median(t_dgrad),
                    median(t_wgrad));
      std::cout << line << std::endl;
      json << (first ? "" : ",\n") << " " << line;
      first = false;
    }
  }
  json << "\n]\n";
  for (auto& e : ev) cudaEventDestroy(e);
  return 0;
#endif
}
