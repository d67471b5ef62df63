// gpu_batch.cpp - see gpu_batch.h.
#include "examples/05_unet3d/gpu_batch.h"

namespace unet3d_app {

using namespace halfgrad;

GpuBatchBuilder::GpuBatchBuilder(const SegData& data, const Recipe& r, uint64_t run_seed, BatchSlice slice)
    : data_(data), r_(r), seed_(run_seed), slice_(slice) {
  for (const SegVolume& v : data.train) volumes_.push_back({v.image.copy_to(Device::CUDA), v.label.copy_to(Device::CUDA)});
}

void GpuBatchBuilder::build(int64_t step, Tensor& x, Tensor& y) const {
  build_planned_batch(volumes_, plan_training_batch_slice(data_, r_, seed_, step, slice_.begin, slice_.end), x, y);
}

uint64_t GpuBatchBuilder::volume_bytes(const SegData& data) {
  uint64_t bytes = 0;
  for (const SegVolume& v : data.train) bytes += static_cast<uint64_t>(v.image.numel()) * (sizeof(float) + sizeof(int64_t));
  return bytes;
}

}  // namespace unet3d_app
