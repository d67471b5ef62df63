// dropout_math.h - the keep/drop decision of ops/dropout/dropout.h, shared by the CPU loop and the
// CUDA kernel (HALFGRAD_HD is __host__ __device__ under nvcc), so both draw the same mask bit for bit.
//
// The mask is a pure function of (seed, key): key = the element's logical (NCDHW) flat index for
// dropout, the (n, c) channel index n*C + c for dropout3d. The bits are SplitMix64 (Steele, Lea and
// Flood 2014; the finalizer of java.util.SplittableRandom) of seed + (key + 1) * golden gamma; the
// top 53 bits u are compared with an integer threshold, u < round(p * 2^53) drops. Integer math only,
// so CPU, CUDA, any thread count and either memory format give one mask.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace halfgrad::dropout {

/// 2^53: u is uniform on [0, 2^53); a threshold of 2^53 (p = 1) drops everything.
constexpr uint64_t kUnit = uint64_t(1) << 53;

HALFGRAD_HD inline uint64_t splitmix64(uint64_t seed, uint64_t key) {
  uint64_t z = seed + (key + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Whether the element (or channel) `key` is kept: its 53-bit uniform is >= the drop threshold.
HALFGRAD_HD inline bool keep(uint64_t seed, uint64_t key, uint64_t drop_threshold) {
  return (splitmix64(seed, key) >> 11) >= drop_threshold;
}

/// What one dropout call draws and applies: out = in * (keep ? scale : 0).
struct Mask {
  uint64_t seed = 0;            // drawn from the Generator, one 64-bit draw per call
  uint64_t drop_threshold = 0;  // round(p * 2^53)
  float scale = 1.f;            // 1 / (1 - p) rounded to float (Float32 / Float16 inputs); 0 for p = 1
  double scale_exact = 1.0;     // 1 / (1 - p) in double (Float64 inputs, CPU only); 0 for p = 1
  bool per_channel = false;     // dropout3d: one decision per (n, c)
};

}  // namespace halfgrad::dropout
