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
