// cp_async_producer.cuh - the lab's other producer for the warp-specialised TMA GEMM
// (ops/matmul/gemm_tma.cuh, whose TmaProducer comment says what a producer is): all 128 threads of the
// producer warpgroup copy each slice with cp.async, 16 bytes at a time, into the layout a TMA box lands
// in, and arrive on the slot's full barrier by cp.async.mbarrier.arrive.noinc (the barrier expects 128
// arrivals instead of one arrival plus a byte count); the consumers fence into the async proxy, since
// cp.async writes through the generic one. Rung 18 (cp_async_producer.cu) and the cp_async_128 /
// cp_async_64 families of `gemm_bench --dispatch` (lab_families.cu); refuted (bench/NOTES.md): not
// used by gemm_f16. Unclustered tiles only (its arrivals are its own CTA's); sm_90a.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "ops/matmul/gemm_tma.cuh"
#include "ops/tensor_core/ptx.cuh"

namespace halfgrad::cuda::gemm_tma {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/// Thread t's (0..127 of the producer warpgroup) share of one operand's kMN x 64 slice, copied with
/// cp.async 16 bytes at a time into its tile at `tile` in exactly the layout a TMA box lands in
/// (rung 18): chunk c (16 bytes = 8 halfs) of tile row r at r * 128 + ((c ^ (r % 8)) * 16).
/// Tile rows are the kMN rows of a K-major operand stored (MN, K) (row r: mn0 + r, chunk c: k0 + 8c),
/// or the kMN / 64 panels of 64 k-rows of an MN-major one stored (K, MN) (row r: k0 + r % 64, chunk
/// c: mn0 + 64 (r / 64) + 8c). The slice is kMN * 8 chunks; thread t copies chunks t, t + 128, ...:
/// a warp covers 4 whole 128-byte rows per instruction, so the load unit merges each row into the
/// sectors it touches (5 where a row starts 16 bytes into a sector). What lies outside the matrix
/// (rows at or past mn_extent or k_extent, the part of a chunk past the last column) is zero-filled
/// by cp.async's source size, as TMA fills a box: the same tile bits either way. base must be
/// 16-byte aligned and ld a multiple of 8 (gemm_tma::operands_supported), so every chunk is aligned.
template <int kMN, bool kMnMajor>
__device__ __forceinline__ void cp_async_operand(uint32_t tile, const uint16_t* base, int64_t ld, int mn_extent,
                                                 int k_extent, int mn0, int k0, int t) {
  constexpr int kChunksPerThread = kMN * 8 / 128;
  const int c = t % 8;
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int r = t / 8 + 16 * i;
    const uint32_t dst = tile + r * 128 + ((c ^ (r % 8)) << 4);
    int64_t offset;
    int bytes;
    if constexpr (kMnMajor) {
      const int k = k0 + r % 64, mn = mn0 + 64 * (r / 64) + 8 * c;
      bytes = k < k_extent ? min(16, max(0, 2 * (mn_extent - mn))) : 0;
      offset = static_cast<int64_t>(k) * ld + mn;
    } else {
      const int mn = mn0 + r, k = k0 + 8 * c;
      bytes = mn < mn_extent ? min(16, max(0, 2 * (k_extent - k))) : 0;
      offset = static_cast<int64_t>(mn) * ld + k;
    }
    // (With 0 bytes nothing is read, but the address must still be valid: the operand's base.)
    tensor_core::cp_async_16(dst, bytes > 0 ? base + offset : base, bytes);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

struct CpAsyncProducer {
  static constexpr int kThreads = 128;
  static constexpr bool kGenericProxy = true;
  static constexpr bool kUsesMaps = false;
  /// Thread tid's chunks of A's and B's slices (cp_async_operand), then its arrival on the full
  /// barrier once its own copies have landed.
  template <int kBN, bool kAMnMajor, bool kBMnMajor, int kPair, bool kShareA>
  __device__ static void load(uint32_t a_tile, uint32_t b_tile, uint32_t full_bar, const CUtensorMap* map_a,
                              const CUtensorMap* map_b, const GemmProblem& p, int tile_m, int tile_n, int k0, int rank,
                              int tid) {
    static_assert(kPair == 1 && !kShareA, "CpAsyncProducer: unclustered tiles");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    cp_async_operand<kBlockM, kAMnMajor>(a_tile, p.A, p.lda, p.M, p.K, tile_m, k0, tid);
    cp_async_operand<kBN, kBMnMajor>(b_tile, p.B, p.ldb, p.N, p.K, tile_n, k0, tid);
    tensor_core::cp_async_mbarrier_arrive_noinc(full_bar);
#endif
  }
  /// No copy may outlive its thread.
  __device__ static void drain() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    tensor_core::cp_async_wait<0>();
#endif
  }
};

}  // namespace halfgrad::cuda::gemm_tma
