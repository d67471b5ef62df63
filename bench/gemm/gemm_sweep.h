// gemm_sweep.h - compile-time tile configurations of the production GEMM block
// (ops/matmul/gemm_mma_tiles.cuh, warp_tiled_gemm_block), each launched on a dense N/N problem so
// that `gemm_bench --sweep` can time them side by side against cuBLAS. The configurations and the
// gains predicted for them before measuring are listed in gemm_sweep.cu and bench/gemm/README.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace halfgrad::bench {

struct SweepGemm {
  int64_t M, N, K;
  const uint16_t* A;  // (M, K), lda = K
  const uint16_t* B;  // (K, N), ldb = N
  void* C;            // (M, N), ldc = N, FP32 or FP16 as c_half says
  bool c_half;
};

struct SweepVariant {
  const char* id;         // short letter used in README.md's table
  std::string config;     // the shape's TileShape::describe() (ops/tensor_core/tile_shape.h), and a note
  const char* predicted;  // predicted change vs the baseline (a) at 4096^3 / 8192^3, written before measuring
  void (*run)(const SweepGemm&);  // queues the kernel on halfgrad::cuda::stream()
};

const std::vector<SweepVariant>& sweep_variants();

}  // namespace halfgrad::bench
