// gpu_batch.h - train --augment-device cuda: the training batches augmented by CUDA kernels (the PyTorch
// seed's DALI role), with the draws on the CPU (data.h: plan_training_batch_slice) and the per-voxel
// work on the GPU (io/augment.h: apply_augment_plan on CUDA volumes, io/augment_cuda.cu).
//
// The training volumes are copied to the device once (the whole-volume sampling of a rotated or
// scaled patch reads anywhere in its volume): volume_bytes() says how much, memory_estimate.h counts
// it, and the trainer refuses a run where it does not fit, suggesting --augment-device cpu.
//
// Threads, streams and the CUDA graph. Every kernel of the augmentation is queued on the one stream of
// runtime.h, by the training thread, from BatchLoader::next() with --workers 0 (the loader's builder
// runs in the training thread then; the trainer sets workers 0 on this path and says so if --workers
// was given). Not on the loader's worker threads, because:
//   - a worker's launches would go to the main stream while the training thread captures the step
//     into a CUDA graph (graph_step.h): they would be captured into the graph, or break the capture;
//   - the caching allocator is stream-ordered on the main stream only: the augmented batch's tensors
//     are ordinary ones, freed and reused by the step as it likes, as the loader's D2D copies are.
// So a step queues: its batch's augmentation (a few kernels per sample; no host wait: the statistics
// of contrast and gamma stay on the device), then the step itself (eager, or GraphStep's copy into
// its static buffers and the replay). The GPU runs them in that order; the host returns at once. What
// stays on the host per step is the drawing (a few dozen draws per sample, and with a foreground
// patch a scan of its label volume), microseconds beside the step. The batch is a function of
// (seed, step) alone: the plans are (data.h), and each kernel's result is a function of its inputs
// (Philox numbers by voxel index, reductions in a fixed order), whatever --workers says. The run's
// "gpu: idle" figure (loader.h's StepGapTimer) counts these kernels within the gap between steps.
#pragma once
#include <cstdint>
#include <vector>

#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/distributed.h"
#include "io/preprocess.h"
#include "unet3d/recipe.h"

namespace unet3d_app {

class GpuBatchBuilder {
 public:
  /// Copies data.train's volumes to the CUDA device (queued on the stream). `data` and `r` must outlive
  /// the builder. Throws halfgrad::Error without a CUDA device, or the allocator's out-of-memory error.
  GpuBatchBuilder(const SegData& data, const Recipe& r, uint64_t run_seed, BatchSlice slice);
  /// This rank's slice of step `step`'s batch, x (B, 1, d, h, w) float32 and y (B, d, h, w) int64 CUDA
  /// tensors (build_planned_batch of plan_training_batch_slice). Call from the training thread only.
  void build(int64_t step, halfgrad::Tensor& x, halfgrad::Tensor& y) const;
  /// Bytes the training volumes take on the device: their image (float32) and label (int64) voxels.
  static uint64_t volume_bytes(const SegData& data);

 private:
  const SegData& data_;
  const Recipe& r_;
  uint64_t seed_;
  BatchSlice slice_;
  std::vector<halfgrad::io::Sample> volumes_;  // data_.train on CUDA, in its order
};

}  // namespace unet3d_app
