// unet_step_cuda - the reference U-Net's training step on the GPU, the same step and the same
// configurations as ../shared/reference/torch_unet_step.py, so that bench/compare_gpu.py can print
// halfgrad / PyTorch ratios measured in the same run:
//   forward (under autocast for AMP) -> cross-entropy + soft Dice -> scaled backward -> AdamW step
//   -> GradScaler update; batch 4 and 16 on 64^3 patches, batch 1 on 32^3; FP32 and AMP; NCDHW
//   or channels-last (NDHWC) activations.
//
//   build/bench/unet_step_cuda OUT.json [--quick]
//   build/bench/unet_step_cuda --profile [B] [S]   (for bench/profile_step.sh)
// --profile: AMP, channels-last, batch B (default 16) at S^3 (default 64): 5 warm-up steps, then one
// step inside the NVTX range "profiled_step" (ncu --nvtx --nvtx-include "profiled_step/" profiles
// only its kernels) and the host wall time of 20 more steps, printed as JSON.
// Timing: 5 warm-up steps, then the median of 20 steps, each timed from the host around a step
// followed by cuda::synchronize (the step's loss.item() syncs anyway, as PyTorch's does not - so
// this includes one sync per step that the PyTorch figure does not pay; it is small against a step).
// CUDA graph (issue 11, item 3): for every configuration a second model, with capturable AdamW and
// GradScaler, takes 5 eager warm-up steps, captures one step (core/cuda/graph.h) and times 20
// replays the same way (host clock around replay + synchronize): graph_median_ms / graph_min_ms beside
// the eager figures, graph_nodes (the launches one replay replaces) and graph_pool_MiB (the graph's
// private memory, on top of the eager cache). No loss.item() in the replayed step: the eager figure
// includes one sync per step, the graph figure only the synchronize of the timing.
// Peak memory: the caching allocator's peak of live bytes (as torch.cuda.max_memory_allocated: block
// sizes, rounded to 512 B as PyTorch's), reset after the model, the optimizer and the batch exist -
// where the PyTorch script resets it; peak_reserved_MiB is its peak of cudaMalloc'd segments (as
// torch.cuda.max_memory_reserved), reset at the same point.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/nvtx.h"
#include "nn/unet3d.h"
#include "ops/loss/deferred_label_check.h"
#include "ops/ops.h"
#include "optim/adamw.h"

using namespace halfgrad;
using Clock = std::chrono::steady_clock;

static nlohmann::json run(const std::string& mode, int64_t B, int64_t S, bool channels_last, int64_t steps, int64_t warm,
                          bool profile = false) {
  const bool use_amp = mode == "amp";
  manual_seed(0);
  auto model = std::make_shared<nn::UNet3d>(nn::UNet3dOptions());  // the reference: 16-32-64-128, bottleneck 256
  model->to(Device::CUDA);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(1e-3));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(use_amp));
  Generator gen(0);
  const MemoryFormat fmt = channels_last ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous;
  Tensor x = Tensor::randn({B, 1, S, S, S}, gen).copy_to(Device::CUDA).format_copy(fmt);
  std::vector<int64_t> labels(B * S * S * S);
  for (auto& l : labels) l = gen.randint(3);
  Tensor y = Tensor::from_labels(labels, {B, S, S, S}).copy_to(Device::CUDA);
  cuda::synchronize();
  cuda::reset_peak_stats();
  auto step = [&]() {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(use_amp);
      loss = ops::segmentation_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  for (int64_t i = 0; i < warm; ++i) step();
  cuda::synchronize();
  if (profile) {
    NvtxRange range("profiled_step");
    step();
    cuda::synchronize();
  }
  const size_t mallocs_before = cuda::allocator_stats().cuda_malloc_calls;
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const cuda::AllocatorStats st = cuda::allocator_stats();
  const double med = ms[ms.size() / 2];
  return {{"impl", "halfgrad"},
          {"mode", mode},
          {"B", B},
          {"S", S},
          {"channels_last", channels_last},
          {"median_ms", med},
          {"min_ms", ms.front()},
          {"vox_per_s", B * S * S * S / (med / 1e3)},
          {"peak_mem_MiB", st.peak_allocated_bytes / 1048576.0},
          {"peak_reserved_MiB", st.peak_reserved_bytes / 1048576.0},  // as torch.cuda.max_memory_reserved
          {"cuda_malloc_calls_in_timed_steps", st.cuda_malloc_calls - mallocs_before}};
}

// The same step with capturable AdamW / GradScaler, captured once and replayed (see the top).
static nlohmann::json graph_timing(const std::string& mode, int64_t B, int64_t S, bool channels_last, int64_t steps,
                                   int64_t warm) {
  const bool use_amp = mode == "amp";
  manual_seed(0);
  auto model = std::make_shared<nn::UNet3d>(nn::UNet3dOptions());
  model->to(Device::CUDA);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(1e-3).capturable(true));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(use_amp).capturable(true));
  Generator gen(0);
  const MemoryFormat fmt = channels_last ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous;
  Tensor x = Tensor::randn({B, 1, S, S, S}, gen).copy_to(Device::CUDA).format_copy(fmt);
  std::vector<int64_t> labels(B * S * S * S);
  for (auto& l : labels) l = gen.randint(3);
  Tensor y = Tensor::from_labels(labels, {B, S, S, S}).copy_to(Device::CUDA);
  Tensor loss;
  ops::DeferredLabelCheck label_check;  // the loss's label check stays on the device (read below)
  auto step = [&]() {
    opt.zero_grad();
    {
      amp::AutocastGuard ac(use_amp);
      loss = ops::segmentation_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  for (int64_t i = 0; i < warm; ++i) step();
  cuda::synchronize();
  cuda::Graph graph;
  graph.capture(step, "unet_step_cuda's step");
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    opt.stage_lr();
    graph.replay();
    cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  label_check.check("unet_step_cuda");
  std::sort(ms.begin(), ms.end());
  return {{"graph_median_ms", ms[ms.size() / 2]},
          {"graph_min_ms", ms.front()},
          {"graph_nodes", graph.num_nodes()},
          {"graph_pool_MiB", graph.pool_reserved_bytes() / 1048576.0}};
}

int main(int argc, char** argv) {
  const std::string out_path = argc > 1 ? argv[1] : "unet_step_cuda.json";
  const bool quick = argc > 2 && std::string(argv[2]) == "--quick";
  try {
    if (out_path == "--profile") {
      const int64_t B = argc > 2 ? std::stoll(argv[2]) : 16, S = argc > 3 ? std::stoll(argv[3]) : 64;
      std::cout << run("amp", B, S, /*channels_last=*/true, 20, 5, /*profile=*/true).dump() << std::endl;
      return 0;
    }
    std::cout << "device: " << cuda::device_description() << std::endl;
    nlohmann::json res = nlohmann::json::array();
    struct Config { std::string mode; int64_t B, S; bool cl; };
    std::vector<Config> configs;
    for (int64_t B : {int64_t{4}, int64_t{16}}) {
      if (quick && B == 4) continue;
      configs.push_back({"fp32", B, 64, true});
      configs.push_back({"amp", B, 64, false});
      configs.push_back({"amp", B, 64, true});
    }
    configs.push_back({"fp32", 1, 32, true});
    configs.push_back({"amp", 1, 32, true});
    for (const Config& c : configs) {
      nlohmann::json r = run(c.mode, c.B, c.S, c.cl, quick ? 8 : 20, quick ? 3 : 5);
      cuda::empty_cache();  // each configuration starts from an empty cache, as a fresh PyTorch model does not quite
      try {
        r.update(graph_timing(c.mode, c.B, c.S, c.cl, quick ? 8 : 20, quick ? 3 : 5));
        r["graph_speedup"] = r["median_ms"].get<double>() / r["graph_median_ms"].get<double>();
      } catch (const std::exception& e) {  // the eager figure stands; say why the graph has none
        r["graph_error"] = e.what();
      }
      std::cout << r.dump() << std::endl;
      res.push_back(r);
      cuda::empty_cache();
    }
    std::ofstream(out_path) << res.dump(1) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "unet_step_cuda: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
