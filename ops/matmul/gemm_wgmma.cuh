// gemm_wgmma.cuh - the shared-memory side of halfgrad's Hopper (sm_90a) FP16 GEMMs: the tile shape
// (WgmmaTile, a tensor_core::TileShape), the 128-byte-swizzled operand tiles that warpgroup MMA (wgmma.mma_async) reads, and
// their matrix descriptors. gemm_tma.cuh (production: TMA loads, warp-specialised) builds on them, and
// so does the lab's cp.async wgmma kernel (bench/gemm/wgmma_cp_async.cuh, rung 6, no longer chosen).
// Private to ops/matmul/ and bench/gemm/; the descriptors exist only for the sm_90a target.
//
// Shared memory: each operand tile is a stack of 128-byte rows, 128-byte swizzled (16-byte chunk c of
// row r stored at chunk c ^ (r % 8); tile bases 1024-byte aligned, since the hardware applies the XOR
// to address bits 4-6 using bits 7-9). Which dimension runs along a row is the operand's contiguous one:
//   K-major  (A layout N: (M, K); B layout T: (N, K)): row = m (or n), the row holds k 0..63.
//     Descriptor: SBO = 1024 (8 rows of 128 B to the next 8-row group), LBO unused; a k-step of 16
//     advances the start address by 32 bytes.
//   MN-major (A layout T: (K, M); B layout N: (K, N)): the tile is cut into 64-wide MN panels of
//     64 rows (k) x 128 bytes (64 m or n), row = 64 * panel + k. Descriptor with the transpose bit:
//     LBO = 8192 (one panel to the next along MN), SBO = 1024 (8 k-rows to the next 8); a k-step of
//     16 advances the start address by 16 rows = 2048 bytes.
// So every N/T combination is served by the same tiles, only the descriptors and transpose bits change.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"
#include "ops/tensor_core/ptx.cuh"
#include "ops/tensor_core/tile_shape.h"

namespace halfgrad::cuda::gemm_wgmma {

// The PTX wrappers (wgmma_*, matrix_descriptor, cp_async_*): ops/tensor_core/ptx.cuh.
using namespace tensor_core;
using gemm_tiles::GemmProblem;

/// The 128 x 256 tile of the wgmma kernels (tile_shape.h): K slices of 64 halfs (one 128-byte swizzle
/// row), two warpgroups of 64 x 256 (one wgmma.m64n256k16 per k-step each), 4 slots, raster groups of 8
/// tile-rows. gemm_tma.cuh's TmaTile<256> is this block with its ring sized by shared memory.
using WgmmaTile = tensor_core::TileShape<tensor_core::Block<128, 256, 64>, tensor_core::Warp<64, 256>,
                                         tensor_core::Stages<4>, tensor_core::RasterGroupM<8>,
                                         tensor_core::Instruction<tensor_core::WgmmaM64NK16<256>>>;
constexpr int kBlockM = WgmmaTile::kBlockM;
constexpr int kBlockN = WgmmaTile::kBlockN;
constexpr int kBlockK = WgmmaTile::kBlockK;
constexpr int kWarpgroupM = WgmmaTile::kWarpM;  // the wgmma M; each warpgroup owns 64 rows of the block tile
constexpr int kWarpgroups = WgmmaTile::kWarpsM;
constexpr int kThreads = WgmmaTile::kThreads;
constexpr int kInstrK = WgmmaTile::kInstrK;
constexpr int kStages = WgmmaTile::kStages;
constexpr int kGroupM = WgmmaTile::kGroupM;  // rasterisation: blocks sweep 8 tile-rows before moving right (L2 reuse)
constexpr int kRowBytes = 128;
static_assert(kBlockK * 2 == kRowBytes, "a K slice is one 128-byte swizzle row");
constexpr int kPanel = 64;  // MN-major: MN extent of one 128-byte row
constexpr int kATileBytes = kBlockM * kBlockK * 2;
constexpr int kBTileBytes = kBlockN * kBlockK * 2;
constexpr int kStageBytes = kATileBytes + kBTileBytes;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/// Descriptor of the 64 (or kMN) x 16 operand piece at MN offset mn0 (multiple of 64), k-step ks.
template <bool kMnMajor>
__device__ __forceinline__ uint64_t operand_descriptor(uint32_t tile, int mn0, int ks) {
  if constexpr (kMnMajor) {
    return matrix_descriptor(tile + (mn0 / kPanel) * kBlockK * kRowBytes + ks * kInstrK * kRowBytes,
                             kBlockK * kRowBytes, 8 * kRowBytes);
  } else {
    return matrix_descriptor(tile + mn0 * kRowBytes + ks * kInstrK * 2, 16, 8 * kRowBytes);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace halfgrad::cuda::gemm_wgmma
