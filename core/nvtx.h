// nvtx.h - NVTX ranges, so that Nsight Systems shows halfgrad's structure: one range per op call
// ("conv3d"), one per backward node ("backward conv3d"), and the training phases of
// halfgrad-unet3d ("forward", "backward", "optimizer step", "validation").
//
// With the CUDA toolkit present at build time (CMake finds it and defines HALFGRAD_NVTX), ranges
// go through NVTX v3 (header-only, /usr/local/cuda/include/nvtx3): when no profiler is attached a
// range costs a few nanoseconds, and nothing needs a GPU. Without the toolkit the range is empty.
// The ranges show on Nsight's CPU timeline today; the CUDA backend's kernels will appear nested
// under the op that launched them.
#pragma once

#if defined(HALFGRAD_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace halfgrad {

/// RAII: push a named NVTX range on construction, pop it on destruction. `name` must outlive it
/// (string literals, op names).
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) {
#if defined(HALFGRAD_NVTX)
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~NvtxRange() {
#if defined(HALFGRAD_NVTX)
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

/// True when this build emits NVTX ranges.
constexpr bool nvtx_enabled() {
#if defined(HALFGRAD_NVTX)
  return true;
#else
  return false;
#endif
}

}  // namespace halfgrad
