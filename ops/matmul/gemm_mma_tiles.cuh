// gemm_mma_tiles.cuh - the device-side pieces of halfgrad's FP16 / BF16 Tensor Core GEMM (the PTX
// wrappers it uses are ops/tensor_core/ptx.cuh's): the XOR swizzle of shared-memory tiles, the predicated tile
// loader, and the warp-tiled block computation that ops/matmul/gemm_cuda.cu launches (and that
// bench/gemm/mma_warp_tiled.cu launches as the top rung of the ladder). Private to ops/matmul/ and
// bench/gemm/: no __global__ function lives here, each .cu wraps these device functions in its own.
//
// Math: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, C row-major.
// Operand tiles in shared memory keep the layout they have in global memory ("rows" x "cols", cols
// contiguous), so one loader serves every layout:
//   A as written (N):   (M, K) row-major  -> tile [kBlockM][kBlockK]  (K contiguous, ldmatrix)
//   A transposed (T):   (K, M) row-major  -> tile [kBlockK][kBlockM]  (M contiguous, ldmatrix.trans)
//   B as written (N):   (K, N) row-major  -> tile [kBlockK][kBlockN]  (N contiguous, ldmatrix.trans)
//   B transposed (T):   (N, K) row-major  -> tile [kBlockN][kBlockK]  (K contiguous, ldmatrix)
// mma.m16n8k16.row.col wants A as 16x16 row-major (K contiguous) and B as 8x16 "col" (K contiguous);
// ldmatrix.trans transposes each 8x8 sub-matrix on its way to registers, so an M- or N-contiguous
// tile gives the same fragments without any transposing copy.
//
// Precision: FP16 operands (IEEE half bit patterns, uint16_t), or BF16 ones (kBf16: bfloat16 bit
// patterns, mma.sync's .bf16 type; loads, swizzle and ldmatrix only move 16-bit words, so they are the
// same), products summed in FP32 in the mma accumulator registers; the result is scaled by alpha (and
// beta*C added) in FP32 and written either as FP32 or rounded once to the 16-bit type (round to nearest
// even, __float2half_rn / __float2bfloat16_rn).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/tensor_core/epilogue.cuh"
#include "ops/tensor_core/fragment.cuh"
#include "ops/tensor_core/ptx.cuh"
#include "ops/tensor_core/tile_shape.h"
#include "ops/tensor_core/pipeline.cuh"
#include "ops/tensor_core/warp_tile.cuh"

namespace halfgrad::cuda::gemm_tiles {

// The PTX wrappers (cp_async_16, ldmatrix_x4, mma_m16n8k16, ...), the warp-level fragment maps
// (fragment.cuh: LdmatrixX4, Mma16816Accumulator) and the tile-shape vocabulary (TileShape, Block,
// Warp, Stages, ...) are tensor_core's, shared with ops/conv/ and bench/gemm/.
using namespace tensor_core;

/// The mma.sync instruction shape: D (16x8) += A (16x16) * B (16x8).
constexpr int kInstrM = Mma16816::kM;
constexpr int kInstrN = Mma16816::kN;
constexpr int kInstrK = Mma16816::kK;
/// One 16-byte vector (cp.async, ldmatrix row) holds 8 halfs: the unit of every tile copy.
constexpr int kChunkHalfs = 8;

// ---------------------------------------------------------------------------------------------
// XOR swizzle. Shared memory has 32 banks of 4 bytes: one 128-byte line. ldmatrix reads eight
// 16-byte rows of a matrix in one go; they are conflict-free only if the eight 16-byte chunks fall
// on eight different 16-byte positions of the line. Stored plainly they do not: a tile row of
// 64 bytes (32 halfs) puts rows r and r+2 on the same banks, a row of 256 or 512 bytes puts all
// eight on the same banks. Instead of padding rows (wasted shared memory, and padding breaks the
// 16-byte cp.async alignment unless it is itself 16 bytes), the chunk index is XORed with a few
// bits of the row index. XOR with a value < 8 permutes the chunks within one 128-byte group, so
// the tile stays dense and every chunk stays 16-byte aligned.
//   kChunksPerRow >= 8 (rows of 128 bytes or more): chunk ^ (row % 8) - rows r..r+7 of one chunk
//     column land on eight different positions.
//   kChunksPerRow == 4 (rows of 64 bytes, two rows per line): chunk ^ ((row / 2) % 4) - rows 2j and
//     2j+1 share a line and differ in its half, (row / 2) % 4 spreads four such pairs over the four
//     chunk positions of each half.
// The swizzle itself is ops/tensor_core/warp_tile.cuh's SwizzledRows, which the fragment loads read
// with; the tile copies below write with the same function.
// ---------------------------------------------------------------------------------------------
/// Offset in halfs of (row, chunk) in a dense kRows x kCols tile, swizzled or plain.
template <int kCols, bool kSwizzled>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  if constexpr (kSwizzled) return SwizzledRows<kCols>::offset(row, chunk * kChunkHalfs);
  return row * kCols + chunk * kChunkHalfs;
}

// ---------------------------------------------------------------------------------------------
// Predicated tile loader: the kRows x kCols window at (row0, col0) of a rows x cols row-major
// global matrix (leading dimension ld) into a dense shared tile. kThreads threads each move
// kRows*kCols/8/kThreads chunks of 8 halfs. Elements outside the matrix become zeros.
//   kVector: 16-byte cp.async, needs ld % 8 == 0 and a 16-byte aligned base (checked by the
//     launcher); a chunk that straddles the last column reads only its valid bytes.
//   scalar:  eight 2-byte loads and stores per chunk, for any ld and alignment.
// ---------------------------------------------------------------------------------------------
template <int kCols, bool kSwizzled, bool kVector>
__device__ __forceinline__ void load_chunk(uint16_t* tile, const uint16_t* g, int64_t ld, int row0, int col0, int rows,
                                           int cols, int chunk) {
  constexpr int kChunksPerRow = kCols / kChunkHalfs;
  const int r = chunk / kChunksPerRow;
  const int c = chunk % kChunksPerRow;
  const int grow = row0 + r;
  const int gcol = col0 + c * kChunkHalfs;
  uint16_t* dst = tile + tile_offset<kCols, kSwizzled>(r, c);
  const int valid = grow < rows ? min(max(cols - gcol, 0), kChunkHalfs) : 0;
  // src stays a valid address even when nothing is read from it.
  const uint16_t* src = g + (valid > 0 ? static_cast<int64_t>(grow) * ld + gcol : 0);
  if constexpr (kVector) {
    cp_async_16(shared_address(dst), src, valid * 2);
  } else {
#pragma unroll
    for (int e = 0; e < kChunkHalfs; ++e) dst[e] = e < valid ? src[e] : uint16_t{0};
  }
}

template <int kRows, int kCols, int kThreads, bool kSwizzled, bool kVector>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* g, int64_t ld, int row0, int col0,
                                          int rows, int cols) {
  constexpr int kChunks = kRows * (kCols / kChunkHalfs);
  static_assert(kCols % kChunkHalfs == 0, "tile rows are whole 16-byte chunks");
  static_assert(kChunks % kThreads == 0, "every thread moves the same number of chunks");
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (kVector) {
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i)
      load_chunk<kCols, kSwizzled, true>(tile, g, ld, row0, col0, rows, cols, tid + i * kThreads);
  } else {
    // Not unrolled: the scalar path is the fallback, and unrolled it would hold 8 loads per chunk
    // in registers that the accumulators need (it spilled).
#pragma unroll 1
    for (int i = 0; i < kChunks / kThreads; ++i)
      load_chunk<kCols, kSwizzled, false>(tile, g, ld, row0, col0, rows, cols, tid + i * kThreads);
  }
}

// The epilogue stores (Epilogue, store_pair, store_quad, c16_pack): ops/tensor_core/epilogue.cuh.


// ---------------------------------------------------------------------------------------------
// The warp-tiled block GEMM, for any tile shape GemmTileShape describes (a TileShape, tile_shape.h,
// plus the shared-memory layout below).
//
// Parallel mapping: one thread block of kWarpsM x kWarpsN warps computes a kBlockM x kBlockN tile
// of C; each warp computes kWarpM x kWarpN = kMmaM x kMmaN mma tiles of 16x8 (the ladder's rung 5,
// WarpTiledShape below: 128x256 block, 2 x 4 warps of 64x64 = 4 x 8 mma tiles, 128 FP32
// accumulators per thread). K is walked in kBlockK slices (kBlockK / 16 mma k-steps each).
// Pipeline: kStages shared-memory slots; cp.async keeps kStages-1 k-slices in flight while the
// warps multiply the current one. The fragments of the next k-step are loaded (ldmatrix) into a
// second register set while the mmas of this one run (register double buffer): the schedule is
// ops/tensor_core/pipeline.cuh's multistage_pipeline_prefetched, the fragment loads and the mma loop
// ops/tensor_core/warp_tile.cuh's (WarpFragments, WarpAccumulator), shared with ops/conv/.
// Shared memory: kStages x (kBlockM + kBlockN) x kBlockK halfs x 2 bytes (WarpTiledShape:
// 4 x (128 + 256) x 32 x 2 = 96 KiB, dynamic, opt-in above 48 KiB). kMinBlocks is the occupancy
// the kernel is compiled for (__launch_bounds__): 1 for a 64x64 warp tile with 256 threads (~250
// registers fill the register file), 2 for the same warp tile with 128 threads (each block then
// hides the other's prologue, barriers and epilogue).
// Rasterisation: block b is mapped to tiles so that consecutive blocks walk down a group of
// kGroupM tile-rows before moving right; the ~132 blocks resident at once then share kGroupM A
// panels and a few B panels in L2 instead of 1 A panel and all of B.
// Epilogue: kStagedEpilogue = false stores each thread's accumulator pairs straight from registers
// (each warp store touches 8 rows x 16 or 32 bytes); true stages each warp's results 16 rows at a
// time through shared memory and writes whole rows of the warp tile with 16-byte (FP32) or 8-byte
// (FP16) stores, 4 or 2 full 128-byte lines per warp store.
// ---------------------------------------------------------------------------------------------
template <class... Shape>
struct GemmTileShape : TileShape<Shape...> {
  using Base = TileShape<Shape...>;
  using Base::kBlockK;
  using Base::kBlockM;
  using Base::kBlockN;
  using Base::kStagedEpilogue;
  using Base::kStages;
  using Base::kWarpN;
  using Base::kWarpsM;
  using Base::kWarpsN;
  static constexpr int kATileHalfs = kBlockM * kBlockK;
  static constexpr int kBTileHalfs = kBlockN * kBlockK;
  static constexpr int kStageHalfs = kATileHalfs + kBTileHalfs;
  static constexpr int kPipelineBytes = kStages * kStageHalfs * 2;
  // Staged epilogue: per warp 16 rows x (kWarpN + 8) floats. The 8-float pad makes the row pitch
  // 8 banks mod 32, so the 16 lanes of one half-warp's float2 stores (rows g = 0..3, columns 2t)
  // hit 16 different bank pairs, and 8 consecutive float4 reads of one row are conflict-free.
  static constexpr int kEpiloguePitch = kWarpN + 8;
  static constexpr int kEpilogueBytes = kStagedEpilogue ? kWarpsM * kWarpsN * kInstrM * kEpiloguePitch * 4 : 0;
  static constexpr int kSmemBytes = kPipelineBytes > kEpilogueBytes ? kPipelineBytes : kEpilogueBytes;
  static_assert(Base::kMmaN % 2 == 0, "B fragments come two n-tiles per ldmatrix.x4");
  static_assert(kWarpN % 32 == 0 || !kStagedEpilogue, "staged epilogue pitch assumes kWarpN % 32 == 0");
};

/// The ladder's rung 5: 128x256x32 block, 8 warps (2 x 4) of 64x64, 4 stages, one block per SM.
using WarpTiledShape = GemmTileShape<Block<128, 256, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>>;

/// Problem description the block function reads (kept small: it is a kernel parameter).
struct GemmProblem {
  int M, N, K;
  const uint16_t* A;
  int64_t lda;
  const uint16_t* B;
  int64_t ldb;
  Epilogue out;
};

/// The shared-memory operand tiles of shape S (warp_tile.cuh's SmemOperand): A as [kBlockM][kBlockK]
/// (K contiguous) or, kATrans, [kBlockK][kBlockM]; B as [kBlockK][kBlockN] or, kBTrans,
/// [kBlockN][kBlockK] (K contiguous); all swizzled.
template <class S, bool kATrans, bool kBTrans>
struct GemmOperands {
  using A = SmemOperand<SwizzledRows<kATrans ? S::kBlockM : S::kBlockK>, !kATrans>;
  using B = SmemOperand<SwizzledRows<kBTrans ? S::kBlockK : S::kBlockN>, kBTrans>;
};

/// A fragments (16x16, rows m0..m0+15 of the block tile) for k-step ks, from either A tile layout:
/// [kTileM][kTileK] (K contiguous) or, kATrans, [kTileK][kTileM] (M contiguous); both swizzled.
/// (The ladder's rung 4 reads with these; the block below with WarpFragments.)
template <bool kATrans, int kTileM, int kTileK>
__device__ __forceinline__ void load_a_fragment(uint32_t (&a)[4], uint32_t tile, int m0, int ks, int lane) {
  using A = SmemOperand<SwizzledRows<kATrans ? kTileM : kTileK>, !kATrans>;
  A::load_a(a, tile, m0, ks * kInstrK, LdmatrixX4::a<!kATrans>(lane));
}

/// B fragments of two adjacent mma columns (n0..n0+15) for k-step ks: b0 for n0, b1 for n0+8. Tile
/// [kTileK][kTileN] (N contiguous) or, kBTrans, [kTileN][kTileK] (K contiguous); swizzled.
template <bool kBTrans, int kTileN, int kTileK>
__device__ __forceinline__ void load_b_fragments(uint32_t (&b0)[2], uint32_t (&b1)[2], uint32_t tile, int n0, int ks,
                                                 int lane) {
  using B = SmemOperand<SwizzledRows<kBTrans ? kTileK : kTileN>, kBTrans>;
  B::load_b_pair(b0, b1, tile, n0, ks * kInstrK, LdmatrixX4::b_pair<kBTrans>(lane));
}

template <class S, bool kATrans, bool kBTrans, bool kVector>
__device__ __forceinline__ void load_stage(uint16_t* stage, const GemmProblem& p, int tile_m, int tile_n, int k0) {
  uint16_t* a_tile = stage;
  uint16_t* b_tile = stage + S::kATileHalfs;
  if constexpr (!kATrans) {
    load_tile<S::kBlockM, S::kBlockK, S::kThreads, true, kVector>(a_tile, p.A, p.lda, tile_m, k0, p.M, p.K);
  } else {
    load_tile<S::kBlockK, S::kBlockM, S::kThreads, true, kVector>(a_tile, p.A, p.lda, k0, tile_m, p.K, p.M);
  }
  if constexpr (kBTrans) {
    load_tile<S::kBlockN, S::kBlockK, S::kThreads, true, kVector>(b_tile, p.B, p.ldb, tile_n, k0, p.N, p.K);
  } else {
    load_tile<S::kBlockK, S::kBlockN, S::kThreads, true, kVector>(b_tile, p.B, p.ldb, k0, tile_n, p.K, p.N);
  }
}

/// Number of blocks to launch for an M x N problem: one per kBlockM x kBlockN tile of C.
template <class S>
__host__ __device__ constexpr int64_t gemm_tile_count(int64_t M, int64_t N) {
  return ((M + S::kBlockM - 1) / S::kBlockM) * ((N + S::kBlockN - 1) / S::kBlockN);
}

/// The whole block: call from a __global__ launched with S::kThreads threads, S::kSmemBytes of
/// dynamic shared memory and gemm_tile_count<S>(M, N) blocks. kBf16: A and B hold bfloat16 bit
/// patterns (the mma runs .bf16); otherwise FP16.
template <class S, bool kATrans, bool kBTrans, bool kVector, bool kBf16 = false>
__device__ __forceinline__ void warp_tiled_gemm_block(const GemmProblem& p, uint16_t* smem) {
  // Rasterised tile index (see above).
  const int tiles_m = (p.M + S::kBlockM - 1) / S::kBlockM;
  const int tiles_n = (p.N + S::kBlockN - 1) / S::kBlockN;
  const int pid = static_cast<int>(blockIdx.x);
  const int group_size = S::kGroupM * tiles_n;
  const int first_m = (pid / group_size) * S::kGroupM;
  const int group_rows = min(tiles_m - first_m, S::kGroupM);
  const int tile_m = (first_m + (pid % group_size) % group_rows) * S::kBlockM;
  const int tile_n = ((pid % group_size) / group_rows) * S::kBlockN;

  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warp_m0 = (warp / S::kWarpsN) * S::kWarpM;
  const int warp_n0 = (warp % S::kWarpsN) * S::kWarpN;

  using A = typename GemmOperands<S, kATrans, kBTrans>::A;
  using B = typename GemmOperands<S, kATrans, kBTrans>::B;
  using T = std::conditional_t<kBf16, __nv_bfloat16, __half>;
  const LaneCoord a_at = LdmatrixX4::a<!kATrans>(lane), b_at = LdmatrixX4::b_pair<kBTrans>(lane);
  WarpAccumulator<S::kMmaM, S::kMmaN> acc;
  acc.zero();
  WarpFragments<S::kMmaM, S::kMmaN> frag[2];  // k-step ks + 1's fragments load while ks multiplies

  const uint32_t smem_base = shared_address(smem);
  constexpr uint32_t kStageBytes = 2 * S::kStageHalfs;
  multistage_pipeline_prefetched<S::kStages, S::kKSteps>(
      (p.K + S::kBlockK - 1) / S::kBlockK,
      [&](int slice, int slot) {
        load_stage<S, kATrans, kBTrans, kVector>(smem + slot * S::kStageHalfs, p, tile_m, tile_n, slice * S::kBlockK);
      },
      [&](int set, int slot, int ks) {
        const uint32_t stage = smem_base + slot * kStageBytes;
        frag[set].template load<A, B>(stage, stage + 2 * S::kATileHalfs, warp_m0, warp_n0, ks * kInstrK, a_at, b_at);
      },
      [&](int set) { acc.template mma<T>(frag[set]); });

  if constexpr (!S::kStagedEpilogue) {
    acc.for_each_pair(lane, [&](int, int, int, int row, int col, float v0, float v1) {
      store_pair(p.out, p.M, p.N, tile_m + warp_m0 + row, tile_n + warp_n0 + col, v0, v1);
    });
  } else {
    // Every warp must be done with the pipeline slots (the last ldmatrix) before they are reused.
    __syncthreads();
    using Acc = Mma16816Accumulator;
    constexpr int kPitch = S::kEpiloguePitch;
    float* staging = reinterpret_cast<float*>(smem) + warp * kInstrM * kPitch;  // 16 x kPitch floats
    constexpr int kQuadsPerRow = S::kWarpN / 4;
#pragma unroll
    for (int mi = 0; mi < S::kMmaM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < S::kMmaN; ++ni) {
        const int col = ni * kInstrN + Acc::pair_col(lane);
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(staging + Acc::pair_row(lane, h) * kPitch + col) =
              make_float2(acc.v[mi][ni][2 * h], acc.v[mi][ni][2 * h + 1]);
      }
      __syncwarp();
#pragma unroll
      for (int i = 0; i < kInstrM * kQuadsPerRow / 32; ++i) {
        const int q = i * 32 + lane;
        const int r = q / kQuadsPerRow;
        const int c = (q % kQuadsPerRow) * 4;
        const float4 v = *reinterpret_cast<const float4*>(staging + r * kPitch + c);
        store_quad(p.out, p.M, p.N, tile_m + warp_m0 + mi * kInstrM + r, tile_n + warp_n0 + c, v);
      }
      __syncwarp();  // the next mi overwrites the staging rows
    }
  }
}

}  // namespace halfgrad::cuda::gemm_tiles
