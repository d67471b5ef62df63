// allocation_pattern.h - a training-step-like sequence of device allocations, and what the exact-size
// caching allocator that halfgrad had before core/cuda/block_allocator.h would have reserved for it.
// Shared by tests/core/block_allocator_test.cpp (fake backend) and tests/cuda/allocator_cuda_test.cpp
// (cudaMalloc).
//
// The pattern is a U-Net's shape of memory use, FP32: a forward that keeps one activation per level
// (16 << l channels at (S >> l)^3, l = 0..4) and frees a same-sized temporary at each level (the
// pre-activation), then a backward that allocates each level's gradient from the bottom up and frees
// it with the activation. Two training steps at batch 2, 32^3; one validation forward at batch 1,
// 48^3 (sizes the steps never ask for); two more training steps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace halfgrad::testing {

struct AllocationEvent {
  bool allocate;  // else release
  int id;         // names the block between its allocate and its release
  size_t bytes;
};

inline std::vector<AllocationEvent> unet_like_pattern() {
  std::vector<AllocationEvent> ev;
  int next_id = 0;
  auto pass = [&](int64_t batch, int64_t side, bool backward) {
    std::vector<std::pair<int, size_t>> kept;
    for (int l = 0; l < 5; ++l) {
      const int64_t s = side >> l;
      const size_t bytes = static_cast<size_t>(batch * (16 << l) * s * s * s * 4);
      const int tmp = next_id++, act = next_id++;
      ev.push_back({true, tmp, bytes});
      ev.push_back({true, act, bytes});
      ev.push_back({false, tmp, bytes});
      kept.push_back({act, bytes});
    }
    for (int l = 4; l >= 0; --l) {
      if (backward) {
        const int grad = next_id++;
        ev.push_back({true, grad, kept[l].second});
        ev.push_back({false, grad, kept[l].second});
      }
      ev.push_back({false, kept[l].first, kept[l].second});
    }
  };
  for (int i = 0; i < 2; ++i) pass(2, 32, true);
  pass(1, 48, false);
  for (int i = 0; i < 2; ++i) pass(2, 32, true);
  return ev;
}

struct ExactSizePeaks {
  size_t allocated = 0, reserved = 0;  // bytes
};

/// The peaks of the old policy on `ev`: sizes rounded to 512 B below 1 MiB and to 2 MiB above, a
/// freed block reused only by a request of the same rounded size, nothing ever given back.
inline ExactSizePeaks exact_size_peaks(const std::vector<AllocationEvent>& ev) {
  auto rounded = [](size_t n) {
    const size_t g = n < (size_t{1} << 20) ? 512 : size_t{2} << 20;
    return (n + g - 1) / g * g;
  };
  std::multimap<size_t, int> free_blocks;  // rounded size -> (unused)
  ExactSizePeaks peak;
  size_t allocated = 0;
  for (const AllocationEvent& e : ev) {
    const size_t r = rounded(e.bytes);
    if (!e.allocate) {
      free_blocks.emplace(r, 0);
      allocated -= r;
      continue;
    }
    auto it = free_blocks.find(r);
    if (it != free_blocks.end()) free_blocks.erase(it);
    else peak.reserved += r;  // cudaMalloc; the old allocator never gave memory back unasked
    allocated += r;
    if (allocated > peak.allocated) peak.allocated = allocated;
  }
  return peak;
}

}  // namespace halfgrad::testing
