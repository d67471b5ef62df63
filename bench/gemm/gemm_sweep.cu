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
using namespace cuda::tensor_core;  // Block, Warp, Stages, MinBlocksPerSm, RasterGroupM, StagedEpilogue

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

using ShapeA = GemmTileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>>;
using ShapeB = GemmTileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<3>, MinBlocksPerSm<1>>;
using ShapeC = GemmTileShape<Block<256, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>>;
using ShapeD1 = GemmTileShape<Block<128, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<2>>;
using ShapeD2 = GemmTileShape<Block<128, 128, 32>, Warp<64, 32>, Stages<4>, MinBlocksPerSm<2>>;
using ShapeD3 = GemmTileShape<Block<128, 128, 64>, Warp<64, 64>, Stages<3>, MinBlocksPerSm<2>>;
using ShapeE = GemmTileShape<Block<128, 256, 64>, Warp<64, 64>, Stages<3>, MinBlocksPerSm<1>>;
using ShapeE2 = GemmTileShape<Block<128, 256, 64>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>>;
using ShapeF = GemmTileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>, StagedEpilogue>;
using ShapeF2 = GemmTileShape<Block<128, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<2>, StagedEpilogue>;
using ShapeG4 = GemmTileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>, RasterGroupM<4>>;
using ShapeG16 = GemmTileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>, RasterGroupM<16>>;
using ShapeCF = GemmTileShape<Block<256, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>, StagedEpilogue>;
using ShapeCF4 =
    GemmTileShape<Block<256, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>, RasterGroupM<4>, StagedEpilogue>;
using ShapeS1 = GemmTileShape<Block<64, 128, 32>, Warp<32, 64>, Stages<4>, MinBlocksPerSm<2>>;
using ShapeS2 = GemmTileShape<Block<64, 64, 32>, Warp<32, 32>, Stages<4>, MinBlocksPerSm<4>>;

}  // namespace

const std::vector<SweepVariant>& sweep_variants() {
  static const std::vector<SweepVariant> variants = {
      {"a", ShapeA::describe() + " (was production)", "0 (baseline)", run_shape<ShapeA>},
      {"b", ShapeB::describe(), "-2%", run_shape<ShapeB>},
      {"c", ShapeC::describe(), "0%", run_shape<ShapeC>},
      {"d1", ShapeD1::describe(), "+5%", run_shape<ShapeD1>},
      {"d2", ShapeD2::describe(), "-8%", run_shape<ShapeD2>},
      {"d3", ShapeD3::describe(), "+7%", run_shape<ShapeD3>},
      {"e", ShapeE::describe(), "+3%", run_shape<ShapeE>},
      {"e2", ShapeE2::describe(), "+3%", run_shape<ShapeE2>},
      {"f", ShapeF::describe(), "+2% (f16 out +3%)", run_shape<ShapeF>},
      {"f2", ShapeF2::describe(), "+6%", run_shape<ShapeF2>},
      {"g4", ShapeG4::describe(), "0%", run_shape<ShapeG4>},
      {"g16", ShapeG16::describe(), "0%", run_shape<ShapeG16>},
      {"cf", ShapeCF::describe() + " (production)", "+3% (after run 1)", run_shape<ShapeCF>},
      {"cf4", ShapeCF4::describe(), "+3% (after run 1)", run_shape<ShapeCF4>},
      {"s1", ShapeS1::describe() + " (small, production)", "-15% (1024^3: +50%)", run_shape<ShapeS1>},
      {"s2", ShapeS2::describe() + " (small tile)", "-30% (1024^3: +40%)", run_shape<ShapeS2>},
  };
  return variants;
}

}  // namespace halfgrad::bench
