// gemm_sweep.cu - the tile configurations that `gemm_bench --sweep` times. Every one is the
// production block function warp_tiled_gemm_block (ops/matmul/gemm_mma_tiles.cuh) instantiated
// with a different GemmTileShape, so a measured winner can be moved into ops/matmul/gemm_cuda.cu
// by changing one `using` line.
//
// Math: C (M, N) = A (M, K) * B (K, N), FP16 operands row-major and dense, FP32 accumulation, C
// FP32 or FP16 (rounded once), alpha = 1, beta = 0. Parallel mapping: per configuration, one block
// per kBlockM x kBlockN tile of C, warps of kWarpM x kWarpN mma.sync.m16n8k16 tiles (see
// GemmTileShape). Only the 16-byte cp.async path (K, N multiples of 8), N/N layouts.
#include "bench/gemm/gemm_sweep.h"
#include "core/cuda/check.cuh"
#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::bench {
namespace {

using cuda::gemm_tiles::GemmProblem;
using cuda::gemm_tiles::GemmTileShape;

template <class S>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks) sweep_kernel(GemmProblem p) {
  extern __shared__ __align__(128) uint16_t smem[];
  cuda::gemm_tiles::warp_tiled_gemm_block<S, false, false, true>(p, smem);
}

template <class S>
void run_shape(const SweepGemm& g) {
  static const bool configured = [] {
    HG_CUDA_CHECK("gemm_sweep", cudaFuncSetAttribute(sweep_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     S::kSmemBytes));
    return true;
  }();
  (void)configured;
  GemmProblem p;
  p.M = static_cast<int>(g.M);
  p.N = static_cast<int>(g.N);
  p.K = static_cast<int>(g.K);
  p.A = g.A;
  p.lda = g.K;
  p.B = g.B;
  p.ldb = g.N;
  p.out = {g.C, g.N, 1.f, 0.f, g.c_half, g.N % 2 == 0, g.N % 4 == 0};
  const auto blocks = static_cast<unsigned>(cuda::gemm_tiles::gemm_tile_count<S>(g.M, g.N));
  sweep_kernel<S><<<blocks, S::kThreads, S::kSmemBytes, cuda::stream()>>>(p);
  HG_CUDA_LAUNCH_CHECK("gemm_sweep");
}

//                             block M, N, K   warp M, N  stages  blocks/SM  group  staged epilogue
using ShapeA = GemmTileShape<128, 256, 32, 64, 64, 4, 1>;
using ShapeB = GemmTileShape<128, 256, 32, 64, 64, 3, 1>;
using ShapeC = GemmTileShape<256, 128, 32, 64, 64, 4, 1>;
using ShapeD1 = GemmTileShape<128, 128, 32, 64, 64, 4, 2>;
using ShapeD2 = GemmTileShape<128, 128, 32, 64, 32, 4, 2>;
using ShapeD3 = GemmTileShape<128, 128, 64, 64, 64, 3, 2>;
using ShapeE = GemmTileShape<128, 256, 64, 64, 64, 3, 1>;
using ShapeE2 = GemmTileShape<128, 256, 64, 64, 64, 4, 1>;
using ShapeF = GemmTileShape<128, 256, 32, 64, 64, 4, 1, 8, true>;
using ShapeF2 = GemmTileShape<128, 128, 32, 64, 64, 4, 2, 8, true>;
using ShapeG4 = GemmTileShape<128, 256, 32, 64, 64, 4, 1, 4>;
using ShapeG16 = GemmTileShape<128, 256, 32, 64, 64, 4, 1, 16>;
using ShapeCF = GemmTileShape<256, 128, 32, 64, 64, 4, 1, 8, true>;
using ShapeCF4 = GemmTileShape<256, 128, 32, 64, 64, 4, 1, 4, true>;
using ShapeS1 = GemmTileShape<64, 128, 32, 32, 64, 4, 2>;
using ShapeS2 = GemmTileShape<64, 64, 32, 32, 32, 4, 4>;

}  // namespace

const std::vector<SweepVariant>& sweep_variants() {
  static const std::vector<SweepVariant> variants = {
      {"a", "128x256x32 s4, 8 warps 64x64, 1/SM (was production)", "0 (baseline)", run_shape<ShapeA>},
      {"b", "128x256x32 s3, 8 warps 64x64, 1/SM", "-2%", run_shape<ShapeB>},
      {"c", "256x128x32 s4, 8 warps (4x2) 64x64, 1/SM", "0%", run_shape<ShapeC>},
      {"d1", "128x128x32 s4, 4 warps 64x64, 2/SM", "+5%", run_shape<ShapeD1>},
      {"d2", "128x128x32 s4, 8 warps 64x32, 2/SM", "-8%", run_shape<ShapeD2>},
      {"d3", "128x128x64 s3, 4 warps 64x64, 2/SM", "+7%", run_shape<ShapeD3>},
      {"e", "128x256x64 s3, 8 warps 64x64, 1/SM", "+3%", run_shape<ShapeE>},
      {"e2", "128x256x64 s4, 8 warps 64x64, 1/SM", "+3%", run_shape<ShapeE2>},
      {"f", "128x256x32 s4, 1/SM, smem-staged epilogue", "+2% (f16 out +3%)", run_shape<ShapeF>},
      {"f2", "128x128x32 s4, 4 warps 64x64, 2/SM, staged epi", "+6%", run_shape<ShapeF2>},
      {"g4", "128x256x32 s4, 1/SM, raster group 4", "0%", run_shape<ShapeG4>},
      {"g16", "128x256x32 s4, 1/SM, raster group 16", "0%", run_shape<ShapeG16>},
      {"cf", "256x128x32 s4, 8 warps (4x2), 1/SM, staged epi (production)", "+3% (after run 1)", run_shape<ShapeCF>},
      {"cf4", "256x128x32 s4, 1/SM, staged epi, raster group 4", "+3% (after run 1)", run_shape<ShapeCF4>},
      {"s1", "64x128x32 s4, 4 warps 32x64, 2/SM (small, production)", "-15% (1024^3: +50%)", run_shape<ShapeS1>},
      {"s2", "64x64x32 s4, 4 warps 32x32, 4/SM (small tile)", "-30% (1024^3: +40%)", run_shape<ShapeS2>},
  };
  return variants;
}

}  // namespace halfgrad::bench
