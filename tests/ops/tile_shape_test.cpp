// ops/tensor_core/tile_shape.h: the named tile shape of the Tensor Core kernels. The derived
// quantities (warp grid, threads, mma tiles per warp, k-steps) of the production GEMM shapes and a
// conv shape, the optional tags in any order with their defaults, and describe()'s text. Compile-time
// checks (static_assert) and the same values at run time, so a wrong derivation fails a test by name.
#include <doctest/doctest.h>

#include <string>

#include "ops/tensor_core/tile_shape.h"

using namespace halfgrad::cuda::tensor_core;

namespace {

// gemm_cuda.cu's LargeTile and SmallTile, and conv3d_fprop_cuda.cu's 128x16 tile (K slice 32, 3 stages).
using Large = TileShape<Block<256, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>, StagedEpilogue>;
using Small = TileShape<Block<64, 128, 32>, Warp<32, 64>, Stages<4>, MinBlocksPerSm<2>>;
using ConvN16 = TileShape<Block<128, 16, 32>, Warp<32, 16>, Stages<3>>;

static_assert(Large::kWarpsM == 4 && Large::kWarpsN == 2 && Large::kThreads == 256);
static_assert(Large::kMmaM == 4 && Large::kMmaN == 8 && Large::kKSteps == 2);
static_assert(Small::kThreads == 128 && Small::kMinBlocks == 2 && !Small::kStagedEpilogue);
static_assert(ConvN16::kWarpsM == 4 && ConvN16::kWarpsN == 1 && ConvN16::kMmaM == 2 && ConvN16::kMmaN == 2);

}  // namespace

TEST_CASE("tensor_core: TileShape derives warps, threads, mma tiles and k-steps (GEMM 256x128x32 and 64x128x32, conv 128x16x32)") {
  CHECK(Large::kBlockM == 256);
  CHECK(Large::kBlockN == 128);
  CHECK(Large::kBlockK == 32);
  CHECK(Large::kWarpM == 64);
  CHECK(Large::kWarpN == 64);
  CHECK(Large::kThreads == 32 * 4 * 2);
  CHECK(Large::kMmaM * Large::kInstrM == Large::kWarpM);
  CHECK(Large::kMmaN * Large::kInstrN == Large::kWarpN);
  CHECK(Large::kKSteps * Large::kInstrK == Large::kBlockK);
  CHECK(Large::kStages == 4);
  CHECK(Large::kStagedEpilogue);
  CHECK(Small::kWarpsM == 2);
  CHECK(Small::kWarpsN == 2);
  CHECK(Small::kMmaM == 2);
  CHECK(Small::kMmaN == 8);
  CHECK(ConvN16::kThreads == 128);
  CHECK(ConvN16::kStages == 3);
  CHECK(ConvN16::kMinBlocks == 1);  // default
}

TEST_CASE("tensor_core: TileShape options in any order, defaults MinBlocksPerSm<1>, RasterGroupM<8>, no staged epilogue") {
  using Defaults = TileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>>;
  using AB = TileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, RasterGroupM<4>, StagedEpilogue, MinBlocksPerSm<2>>;
  using BA = TileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<2>, StagedEpilogue, RasterGroupM<4>>;
  CHECK(Defaults::kMinBlocks == 1);
  CHECK(Defaults::kGroupM == 8);
  CHECK_FALSE(Defaults::kStagedEpilogue);
  CHECK(AB::kMinBlocks == 2);
  CHECK(AB::kGroupM == 4);
  CHECK(AB::kStagedEpilogue);
  CHECK(BA::kMinBlocks == AB::kMinBlocks);
  CHECK(BA::kGroupM == AB::kGroupM);
  CHECK(BA::kStagedEpilogue == AB::kStagedEpilogue);
}

TEST_CASE("tensor_core: TileShape::describe names block, stages, warp grid and tile, blocks/SM, group, epilogue") {
  CHECK(Large::describe() == "256x128x32 s4, 4x2 warps of 64x64, 1/SM, group 8, staged epilogue");
  CHECK(Small::describe() == "64x128x32 s4, 2x2 warps of 32x64, 2/SM, group 8");
  CHECK(TileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, RasterGroupM<16>>::describe() ==
        "128x256x32 s4, 2x4 warps of 64x64, 1/SM, group 16");
}

TEST_CASE("tensor_core: TileShape with Instruction<WgmmaM64NK16<N>> counts warpgroups (gemm_tma.cuh's TmaTile<256> and <64>)") {
  // The consumers of the Hopper GEMM: two warpgroups of 64 x N, one wgmma.m64nNk16 per k-step each.
  using Wide = TileShape<Block<128, 256, 64>, Warp<64, 256>, Stages<4>, Instruction<WgmmaM64NK16<256>>>;
  using Narrow = TileShape<Block<128, 64, 64>, Warp<64, 64>, Stages<8>, RasterGroupM<8>, Instruction<WgmmaM64NK16<64>>>;
  static_assert(Wide::kInstrM == 64 && Wide::kInstrN == 256 && Wide::kInstrK == 16);
  CHECK(Wide::kWarpsM == 2);
  CHECK(Wide::kWarpsN == 1);
  CHECK(Wide::kThreads == 256);  // 2 warpgroups of 128 threads (the kernel adds its producer)
  CHECK(Wide::kMmaM == 1);
  CHECK(Wide::kMmaN == 1);
  CHECK(Wide::kKSteps == 4);
  CHECK(Narrow::kInstrN == 64);
  CHECK(Narrow::kThreads == 256);
  CHECK(Narrow::kStages == 8);
  // The default instruction is mma.sync's, whose issuing group is a warp.
  CHECK(Large::Instr::kThreads == 32);
  CHECK(Wide::describe() == "128x256x64 s4, 2x1 warpgroups of 64x256, 1/SM, group 8");
}
