// separable_map_cuda.h - the CUDA side of ops/pool/separable_map.h (plain C++: no CUDA types; kernel
// in separable_map_cuda.cu). A VolumeMap's tables are uploaded once per forward (one allocation,
// weights as float) and kept by the tape node for backward.
#pragma once
#include <array>
#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "ops/pool/separable_map.h"

namespace halfgrad::cuda {

/// One AxisTaps in device memory.
struct DeviceAxisTaps {
  const int32_t* begin = nullptr;  // dst + 1
  const int32_t* index = nullptr;  // taps
  const float* weight = nullptr;   // taps
  int64_t src = 0, dst = 0;
};

/// A VolumeMap in device memory: `memory` owns every table (released with the last owner).
struct DeviceVolumeMap {
  std::shared_ptr<void> memory;
  std::array<DeviceAxisTaps, 3> forward, backward;
};

/// Copies the map's six tables to the device (queued on the stream, one allocation). `name` names the
/// op in an out-of-memory error.
std::shared_ptr<const DeviceVolumeMap> upload_volume_map(const char* name, const ops::detail::VolumeMap& map);

/// dst (N, C, taps[0].dst, taps[1].dst, taps[2].dst) = the map of src (N, C, taps[*].src), float32 or
/// float16 on CUDA, NCDHW or NDHWC; dst has src's dtype and memory format. FP32 sums, rounded once.
/// Throws halfgrad::Error naming `name` for a src of other spatial extents or >= 2^31 elements.
Tensor apply_volume_taps(const char* name, const Tensor& src, const std::array<DeviceAxisTaps, 3>& taps);

}  // namespace halfgrad::cuda
