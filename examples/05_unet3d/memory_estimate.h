// memory_estimate.h - what a halfgrad-unet3d run will need, from the shapes, before it allocates:
// so that `train --batch 100000` or a volume whose header claims 256^3 voxels fails at once with the
// figures, instead of growing until the kernel's OOM killer ends the process.
//
//   train = model state + max(training step, validation forward)
//     model state      parameters, gradients, AdamW moments and master weights: bytes per parameter
//                      by opt level (16 O0, 18 O1 = 16 + the FP16 weight copies autocast makes,
//                      16 O2 = FP16 weights and gradients + FP32 masters and moments, 8 O3)
//     training step    batch x (activations one sample keeps for backward + backward's working
//                      set), from the element count of the U-Net's tensors at the patch (or whole
//                      volume) shape, times bytes per element calibrated against measured peaks
//     validation       the forward (no autograd tape) of the largest validation volume, batch 1
//     (the checkpoint is written from the tensors themselves on the CPU, through one host copy
//     of one tensor at a time from CUDA: core/safetensors.h; no term)
//     augment volumes  with --augment-device cuda, every training volume's image (4 B) and label
//                      (8 B) per voxel, held on the GPU for the whole run (gpu_batch.h); the
//                      augmentation's own tensors are a few patches, inside the step's margin
//   eval  = parameters + the forward of the largest volume
//
// The calibration (memory_estimate.cpp) keeps the estimate an upper bound of the measured peak of
// the tensor allocator (core/allocator.h on the CPU, cuda::allocator_stats on CUDA) within 1.5x;
// tests/examples/05_unet3d/memory_estimate_test.cpp checks that on several shapes and levels.
// The memory the run can have: on the CPU /proc/meminfo's MemAvailable (sysconf(_SC_AVPHYS_PAGES)
// where that file is missing), capped by the cgroup v2 limit (memory.max - memory.current) when the
// process runs under one; on CUDA cudaMemGetInfo's free bytes plus what halfgrad's cache holds free,
// capped by the allocator's memory limit less the live bytes when one is set (cuda::memory_limit).
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "amp/opt_level.h"
#include "nn/unet3d.h"

namespace unet3d_app {

struct MemoryEstimate {
  uint64_t model_state = 0;       // parameters, gradients, optimizer state
  uint64_t training_step = 0;     // the batch's activations and backward's working set (0 for eval)
  uint64_t forward = 0;           // validation / evaluation forward of the largest volume
  uint64_t augment_volumes = 0;   // train --augment-device cuda: the training volumes held on the GPU (gpu_batch.h)
  uint64_t total() const;         // model_state + max(training_step, forward) + augment_volumes
  /// "3.1 GiB (model state 48.5 MiB, training step of batch 4 at 32x48x32 2.9 GiB, ...)".
  std::string describe() const;
  std::string step_what, forward_what;  // "batch 4 at 32x48x32", "48x64x48": for describe()
};

/// The estimate of `halfgrad-unet3d train`. model: the U-Net's options (num_classes set);
/// num_parameters: UNet3d(model).num_parameters(); step_shape: the training patch or, without
/// patches, the volume shape (z, y, x); batch >= 1; forward_shape: the largest validation volume;
/// on_cuda: the model and activations are on the GPU (the same estimate today: kept so that a
/// device-specific term has its place). Saturates at UINT64_MAX instead of overflowing.
MemoryEstimate estimate_train_memory(const halfgrad::nn::UNet3dOptions& model, int64_t num_parameters,
                                     const std::array<int64_t, 3>& step_shape, int64_t batch,
                                     const std::array<int64_t, 3>& forward_shape, halfgrad::amp::OptLevel level,
                                     bool on_cuda);
/// The estimate of `halfgrad-unet3d eval`: the parameters and the forward of `forward_shape`.
MemoryEstimate estimate_eval_memory(const halfgrad::nn::UNet3dOptions& model, int64_t num_parameters,
                                    const std::array<int64_t, 3>& forward_shape, halfgrad::amp::OptLevel level);

struct MemoryAvailable {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "cgroup memory.max", "cudaMemGetInfo"
};
/// What the run can still allocate on `device` ("cpu" or "cuda"); throws halfgrad::Error when it
/// cannot be found out.
MemoryAvailable available_memory(const std::string& device);

/// The device's whole memory, for planning (plan.h: a plan is made for a fixed budget, as nnU-Net's
/// reference VRAM, not for what happens to be free): on CUDA cudaMemGetInfo's total; on the CPU
/// /proc/meminfo's MemTotal (sysconf(_SC_PHYS_PAGES) where that file is missing), capped by the
/// process's cgroup v2 memory.max when one is set. Throws halfgrad::Error when it cannot be found
/// out (no GPU for "cuda", an unknown device).
MemoryAvailable total_memory(const std::string& device);

/// Throws halfgrad::Error when need.total() > available.bytes: "halfgrad-unet3d <cmd>: this run needs
/// about X (...), but the CPU has Y available (MemAvailable in /proc/meminfo); <hint>, or pass
/// --no-memory-check to start anyway".
void check_memory(const MemoryEstimate& need, const MemoryAvailable& available, const std::string& cmd,
                  const std::string& device, const std::string& hint);

}  // namespace unet3d_app
