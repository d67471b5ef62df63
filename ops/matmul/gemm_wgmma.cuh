// gemm_wgmma.cuh - the device side of halfgrad's Hopper (sm_90a) FP16 GEMM: warpgroup MMA
// (wgmma.mma_async) reading both operands from 128-byte-swizzled shared memory through matrix
// descriptors, fed by a multi-stage cp.async pipeline. ops/matmul/gemm_wgmma_cuda.cu launches it for
// gemm_f16 on sm_90 GPUs, bench/gemm/wgmma_hopper.cu as the top rung of the ladder. Private to
// ops/matmul/ and bench/gemm/; compiled only for the sm_90a target (wgmma does not exist elsewhere).
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

namespace halfgrad::cuda::gemm_wgmma {

using gemm_tiles::GemmProblem;

constexpr int kBlockM = 128;
constexpr int kBlockN = 256;
constexpr int kBlockK = 64;  // one 128-byte swizzle row of halfs
constexpr int kWarpgroupM = 64;  // the wgmma M; each warpgroup owns 64 rows of the block tile
constexpr int kWarpgroups = kBlockM / kWarpgroupM;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kInstrK = 16;
constexpr int kStages = 4;
constexpr int kGroupM = 8;  // rasterisation: blocks sweep 8 tile-rows before moving right (L2 reuse)
constexpr int kRowBytes = 128;
constexpr int kPanel = 64;  // MN-major: MN extent of one 128-byte row
constexpr int kATileBytes = kBlockM * kBlockK * 2;
constexpr int kBTileBytes = kBlockN * kBlockK * 2;
constexpr int kStageBytes = kATileBytes + kBTileBytes;
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
// PTX wrappers (sm_90a).
// ---------------------------------------------------------------------------------------------

/// Shared-memory matrix descriptor: start address, leading and stride byte offsets (all >> 4) and
/// the swizzle mode in bits 62-63 (1 = 128-byte swizzle); base offset 0 (tiles are 1024-aligned).
__device__ __forceinline__ uint64_t matrix_descriptor(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
/// Makes this thread's generic-proxy shared-memory writes (cp.async) visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// Tells the compiler the accumulators may have changed (they are written asynchronously by wgmma):
/// keeps it from reading them before wgmma_wait.
__device__ __forceinline__ void fence_accumulators(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// d (64 x 256, FP32, the warpgroup's fragment) += A (64 x 16) * B (16 x 256), both from shared memory.
/// kTransA / kTransB: the operand is MN-major in shared memory (see the header comment).
/// Fragment layout: warp w of the warpgroup, lane l: d[4j + 0..1] = (16w + l/4, 8j + 2(l%4) + 0..1),
/// d[4j + 2..3] = the same columns, row + 8.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, %131, %132;\n"
      "}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB));
}

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
    gemm_tiles::cp_async_16(dst, src, valid ? 16 : 0);
  }
}

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
  const uint32_t smem = (gemm_tiles::shared_address(smem_raw) + 1023) & ~1023u;
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
    gemm_tiles::cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    gemm_tiles::cp_async_wait<kStages - 3>();  // this thread's copies of slice kt have landed
    fence_proxy_async();
    // Everyone's copies of slice kt are visible, and every warpgroup has finished the wgmmas of
    // slice kt - 2 (wait_group 1 at the end of the previous iteration): its slot can be refilled.
    __syncthreads();
    const int next = kt + kStages - 2;
    if (next < k_tiles) load_slice(next % kStages, next);
    gemm_tiles::cp_async_commit();

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
  gemm_tiles::cp_async_wait<0>();

  const int warp = (tid % 128) / 32;
  const int lane = tid % 32;
  if constexpr (kStagedEpilogue) {
    // Epilogue through shared memory: every warpgroup must be done reading the pipeline slots
    // (its own wgmma_wait above, the barrier for the other's) before they are overwritten.
    __syncthreads();
    float* stage = reinterpret_cast<float*>(smem_raw + (smem - gemm_tiles::shared_address(smem_raw))) +
                   warpgroup * kWarpgroupM * kEpiloguePitch;
    const int r = warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int c = 8 * j + 2 * (lane % 4);
      *reinterpret_cast<float2*>(stage + r * kEpiloguePitch + c) = make_float2(d[4 * j], d[4 * j + 1]);
      *reinterpret_cast<float2*>(stage + (r + 8) * kEpiloguePitch + c) = make_float2(d[4 * j + 2], d[4 * j + 3]);
    }
    // Only this warpgroup's 128 threads share this stage: a named barrier (id 1 + warpgroup).
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + warpgroup) : "memory");
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
