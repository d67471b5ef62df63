// wgmma_cp_async.cuh - the lab's cp.async wgmma GEMM (rung 6 of the ladder, gemm_bench's "wgmma"
// family): warpgroup MMA (wgmma.mma_async) reading both operands from 128-byte-swizzled shared memory
// through matrix descriptors (ops/matmul/gemm_wgmma.cuh: the tiles and descriptors it shares with the
// production TMA kernel), fed by a multi-stage cp.async pipeline. It was gemm_f16's Hopper path until
// the TMA kernel won every measured shape (bench/NOTES.md); bench/gemm/wgmma_cp_async.cu launches it
// for wgmma_hopper.cu (rung 6) and lab_families.cu (`gemm_bench --dispatch`). Compiled only for the
// sm_90a target (wgmma does not exist elsewhere).
//
// Math: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, C row-major (gemm_cuda.h).
// FP16 operands, FP32 accumulation in the wgmma accumulator registers, alpha/beta and the FP32 or
// FP16 (round to nearest even) output by the same store functions as the mma.sync kernel
// (store_quad / store_pair), after staging each warpgroup's results in shared memory (kStagedEpilogue).
//
// Parallel mapping: one 256-thread block per kBlockM x kBlockN = 128 x 256 tile of C: two warpgroups
// (4 consecutive warps each), warpgroup g owns rows 64g..64g+63 and all 256 columns, which is one
// wgmma.m64n256k16 per 16-wide k-step: 128 FP32 accumulators per thread. K is walked in slices of
// kBlockK = 64 halfs = 128 bytes, exactly one row of the 128-byte swizzle.
//
// Shared memory: the tiles of ops/matmul/gemm_wgmma.cuh (layouts and descriptors described there).
//
// Pipeline (kStages = 4 slots of 48 KiB, 192 KiB): the loads of slice kt + 2 are issued while the
// wgmmas of slice kt run and those of kt - 1 may still be finishing (wgmma.wait_group 1), so a slot
// is refilled only after a __syncthreads that follows every warpgroup's wait on the wgmmas reading it.
// Each thread fences its cp.async writes into the async proxy (fence.proxy.async) before the barrier
// that publishes them to wgmma.
// Edges: loads are predicated per 16-byte chunk (zero-fill past M, N, K), stores per element; this
// needs M, N, K multiples of 8, lda and ldb multiples of 8 and 16-byte aligned A and B (checked by
// the launcher) so that every chunk is either wholly inside or wholly outside the matrix.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"
#include "ops/matmul/gemm_wgmma.cuh"
#include "ops/tensor_core/tma.cuh"

namespace halfgrad::cuda::gemm_wgmma {

// + 1 KiB so that the kernel can round the dynamic shared-memory base up to 1024 bytes.
constexpr int kSmemBytes = kStages * kStageBytes + 1024;
// Epilogue staged through the (then idle) pipeline memory, so that C leaves in whole-row 16-byte
// (FP32) / 8-byte (FP16) stores instead of 8-byte / 4-byte pieces of 8 rows. Each warpgroup stages
// its 64 x 256 FP32 results; the row pitch of 256 + 8 floats is 8 banks mod 32, so the float2 writes
// of a warp (8 rows x 4 lanes) fall on 32 different bank pairs per half and the float4 row reads are
// conflict-free. false: stores straight from the accumulators.
constexpr bool kStagedEpilogue = true;
constexpr int kEpiloguePitch = kBlockN + 8;
static_assert(kWarpgroups * kWarpgroupM * kEpiloguePitch * 4 <= kStages * kStageBytes, "staging fits the pipeline");
static_assert(kStages >= 3, "the slot refilled at slice kt is the one wgmma read at slice kt - 2");
static_assert(kATileBytes % 1024 == 0 && kBTileBytes % 1024 == 0, "tile bases stay 1024-byte aligned");

__host__ __device__ constexpr int64_t tile_count(int64_t M, int64_t N) {
  return ((M + kBlockM - 1) / kBlockM) * ((N + kBlockN - 1) / kBlockN);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---------------------------------------------------------------------------------------------
// Tile loader: one operand's kMN x 64 slice into a 128-byte-swizzled tile (layouts above).
//   kMnMajor false: global (MN, K) row-major, rows mn0.., columns k0..
//   kMnMajor true:  global (K, MN) row-major, rows k0.., columns mn0..
// Consecutive threads take consecutive 16-byte chunks of one global row (128 contiguous bytes per 8
// threads). Chunks outside the matrix are zero-filled (cp.async with source size 0).
// ---------------------------------------------------------------------------------------------
template <int kMN, bool kMnMajor>
__device__ __forceinline__ void load_tile(uint32_t tile, const uint16_t* g, int64_t ld, int mn0, int mn_extent, int k0,
                                          int K, int tid) {
  constexpr int kChunks = kMN * kBlockK / 8;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int idx = i * kThreads + tid;
    const int c = idx % 8;  // 16-byte chunk within the 128-byte row
    int row, g_row, g_col;
    bool valid;
    if constexpr (kMnMajor) {
      const int k = (idx / 8) % kBlockK;
      const int panel = idx / (8 * kBlockK);
      row = panel * kBlockK + k;
      g_row = k0 + k;
      g_col = mn0 + panel * kPanel + c * 8;
      valid = g_row < K && g_col < mn_extent;
    } else {
      row = idx / 8;
      g_row = mn0 + row;
      g_col = k0 + c * 8;
      valid = g_row < mn_extent && g_col < K;
    }
    const uint32_t dst = tile + row * kRowBytes + ((c ^ (row & 7)) << 4);
    const uint16_t* src = g + (valid ? static_cast<int64_t>(g_row) * ld + g_col : 0);
    cp_async_16(dst, src, valid ? 16 : 0);
  }
}

/// The whole block; call from a __global__ launched with kThreads threads, kSmemBytes of dynamic
/// shared memory and tile_count(M, N) blocks. kATrans: A stored (K, M); kBTrans: B stored (N, K).
template <bool kATrans, bool kBTrans>
__device__ __forceinline__ void wgmma_gemm_block(const GemmProblem& p, uint8_t* smem_raw) {
  // A layout T and B layout N are the MN-major ones.
  constexpr bool kAMnMajor = kATrans;
  constexpr bool kBMnMajor = !kBTrans;

  const int tiles_m = (p.M + kBlockM - 1) / kBlockM;
  const int tiles_n = (p.N + kBlockN - 1) / kBlockN;
  const int pid = static_cast<int>(blockIdx.x);
  const int group_size = kGroupM * tiles_n;
  const int first_m = (pid / group_size) * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  const int tile_m = (first_m + (pid % group_size) % group_rows) * kBlockM;
  const int tile_n = ((pid % group_size) / group_rows) * kBlockN;

  const int tid = static_cast<int>(threadIdx.x);
  const int warpgroup = tid / 128;
  const uint32_t smem = (shared_address(smem_raw) + 1023) & ~1023u;
  auto a_tile = [&](int slot) { return smem + slot * kStageBytes; };
  auto b_tile = [&](int slot) { return smem + slot * kStageBytes + kATileBytes; };
  auto load_slice = [&](int slot, int kt) {
    load_tile<kBlockM, kAMnMajor>(a_tile(slot), p.A, p.lda, tile_m, p.M, kt * kBlockK, p.K, tid);
    load_tile<kBlockN, kBMnMajor>(b_tile(slot), p.B, p.ldb, tile_n, p.N, kt * kBlockK, p.K, tid);
  };

  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;

  const int k_tiles = (p.K + kBlockK - 1) / kBlockK;
  // Prologue: slices 0 .. kStages - 3 (one commit group each, empty past the end).
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) load_slice(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 3>();  // this thread's copies of slice kt have landed
    fence_proxy_async_shared();
    // Everyone's copies of slice kt are visible, and every warpgroup has finished the wgmmas of
    // slice kt - 2 (wait_group 1 at the end of the previous iteration): its slot can be refilled.
    __syncthreads();
    const int next = kt + kStages - 2;
    if (next < k_tiles) load_slice(next % kStages, next);
    cp_async_commit();

    const int slot = kt % kStages;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockK / kInstrK; ++ks) {
      const uint64_t desc_a = operand_descriptor<kAMnMajor>(a_tile(slot), warpgroup * kWarpgroupM, ks);
      const uint64_t desc_b = operand_descriptor<kBMnMajor>(b_tile(slot), 0, ks);
      wgmma_m64n256k16<kAMnMajor, kBMnMajor>(d, desc_a, desc_b);
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  fence_accumulators(d);
  cp_async_wait<0>();

  const int warp = (tid % 128) / 32;
  const int lane = tid % 32;
  if constexpr (kStagedEpilogue) {
    // Epilogue through shared memory: every warpgroup must be done reading the pipeline slots
    // (its own wgmma_wait above, the barrier for the other's) before they are overwritten.
    __syncthreads();
    float* stage = reinterpret_cast<float*>(smem_raw + (smem - shared_address(smem_raw))) +
                   warpgroup * kWarpgroupM * kEpiloguePitch;
    const int r = warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int c = 8 * j + 2 * (lane % 4);
      *reinterpret_cast<float2*>(stage + r * kEpiloguePitch + c) = make_float2(d[4 * j], d[4 * j + 1]);
      *reinterpret_cast<float2*>(stage + (r + 8) * kEpiloguePitch + c) = make_float2(d[4 * j + 2], d[4 * j + 3]);
    }
    // Only this warpgroup's 128 threads share this stage: a named barrier (id 1 + warpgroup).
    named_barrier_sync<128>(1 + warpgroup);
    // Whole rows: 64 threads per 256-float row, one float4 each; a warp store covers 128 columns.
    const int t = tid % 128;
#pragma unroll 4
    for (int i = 0; i < kWarpgroupM / 2; ++i) {
      const int row = 2 * i + t / 64;
      const int col = 4 * (t % 64);
      const float4 v = *reinterpret_cast<const float4*>(stage + row * kEpiloguePitch + col);
      gemm_tiles::store_quad(p.out, p.M, p.N, tile_m + warpgroup * kWarpgroupM + row, tile_n + col, v);
    }
  } else {
    // Straight from the accumulators, one (FP32 or FP16) pair per store.
    const int row = tile_m + warpgroup * kWarpgroupM + warp * 16 + lane / 4;
    const int col0 = tile_n + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      gemm_tiles::store_pair(p.out, p.M, p.N, row, col0 + 8 * j, d[4 * j], d[4 * j + 1]);
      gemm_tiles::store_pair(p.out, p.M, p.N, row + 8, col0 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace halfgrad::cuda::gemm_wgmma
