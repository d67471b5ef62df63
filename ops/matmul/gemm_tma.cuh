// gemm_tma.cuh - the device side of halfgrad's warp-specialised Hopper (sm_90a) FP16 GEMM: operands
// brought into 128-byte-swizzled shared memory by TMA, a ring of pipeline slots guarded by full and
// empty mbarriers, one producer warpgroup and two consumer warpgroups running wgmma.m64n<w>k16 on
// 128 x w tiles (w = 256, 128 or 64: TmaTile), (persistent launch) every CTA walking many output
// tiles, and optionally a cluster: K split over its two CTAs (kSplit = 2), B's slices shared by two
// vertically adjacent tiles through TMA multicast (kPair = 2), or A's slices shared by 2, 4 or 8
// horizontally adjacent tiles (kPair = 2, 4, 8 with kShareA; see warp_specialized_gemm_block).
// ops/matmul/gemm_tma_cuda.cu launches it for gemm_f16 on sm_90 (gemm_tma_launch.cuh); bench/gemm/
// warp_specialized.cu (one CTA per tile), persistent.cu (one CTA per SM), tma_store_epilogue.cu,
// tile_width.cu, split_k_cluster.cu, multicast_pair.cu, multicast_a_pair.cu, multicast_a_cluster.cu
// and cp_async_producer.cu launch it as rungs 8, 9, 11-14 and 16-18 of the ladder (the clusters of 4
// and 8 and the cp.async producer, CpAsyncProducer, are instantiated there only: bench/gemm/
// lab_families.h), and tma_mbarrier_pipeline.cu (rung 7) uses its TMA loads. Private to ops/matmul/
// and bench/gemm/; compiled only for the sm_90a target.
//
// Math: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, C row-major (gemm_cuda.h).
// FP16 operands, FP32 accumulation in the wgmma accumulator registers, alpha/beta and the FP32 or
// FP16 (round to nearest even) output by gemm_tiles::store_pair, straight from the accumulators; or
// (beta == 0, rung 11) alpha applied, rounded the same way, and written through shared memory by TMA
// stores (store_tile_tma).
//
// Shared memory: the tiles of gemm_wgmma.cuh, unchanged (its header comment has the layouts and the
// descriptors): a K-major operand tile is kMN rows of 128 bytes (64 halfs of k), an MN-major one is
// kMN / 64 panels of 64 k-rows x 128 bytes (64 halfs of m or n), all 128-byte swizzled (chunk c of
// row r at c ^ (r % 8)), 1024-byte aligned. A TMA box with CU_TENSOR_MAP_SWIZZLE_128B whose inner side
// is 128 bytes lands in exactly that layout, so one instruction fills a whole K-major tile
// (box 64 k x kMN rows) or one MN-major panel (box 64 mn x 64 k). TMA zero-fills the part of a box
// outside the matrix, which is all the edge handling the loads need: M, N, K are any extents (the
// TMA conditions are on the strides: 16-byte aligned bases and byte strides, tensor_map.h).
//
// Roles (kThreads = 384 = 3 warpgroups, one CTA per SM: 192 KiB of pipeline slots, or for a split
// 128 / 144 KiB of slots (width 128 / 64) + a 64 / 32 KiB reduce buffer, and 32 KiB of TMA-store boxes), described
// for the 128 x 256 tile (a 128 x w tile has w / 2 accumulators and runs m64n<w>k16):
//   warpgroup 0, producer: setmaxnreg.dec to 40 registers; one elected thread walks the CTA's tiles
//     and their K slices, and for each slice waits for its slot's empty barrier, arms the slot's full
//     barrier with the slice's byte count (arrive.expect_tx) and issues the TMA loads (1 box for a
//     K-major tile, kMN / 64 for an MN-major one) that complete on it.
//   warpgroups 1 and 2, consumers: setmaxnreg.inc to 232; consumer c owns rows 64c..64c+63 of the
//     128 x 256 tile: one wgmma.m64n256k16 per 16-wide k-step, 128 FP32 accumulators per thread. Per
//     slice: wait on the full barrier's phase parity, issue the slice's 4 wgmmas as one group, wait
//     until at most that group is pending (wait_group 1: the previous slice's wgmmas are done reading
//     their slot), and release the previous slot (one thread per consumer arrives on its empty
//     barrier, count 2). After the tile's last slice, wait_group 0, release, store.
// Ring bookkeeping: producer and consumers count slices `it` over all the CTA's tiles in the same
// order; slice it uses slot it % kStages in lap it / kStages, so full barriers are waited with parity
// (it / kStages) & 1 and empty barriers with the opposite parity (a fresh barrier's "previous phase",
// parity 1, counts as complete: the producer's first lap does not wait).
// Persistence: the CTA loops over tiles blockIdx.x, blockIdx.x + gridDim.x, ... in a grouped order
// (kGroupM tile-rows swept before moving right, the order of the cp.async wgmma kernel, so the ~132 tiles in
// flight share A row-panels and B column-panels in L2). With gridDim = tile count it is the plain
// one-tile-per-CTA kernel (rung 8); with gridDim = #SMs (rung 9, production) the producer runs ahead
// into the next tile while the consumers store the current one: the epilogue overlaps the loads.
#pragma once
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"
#include "ops/matmul/gemm_wgmma.cuh"
#include "ops/tensor_core/fragment.cuh"
#include "ops/tensor_core/tma.cuh"

namespace halfgrad::cuda::gemm_tma {

using gemm_tiles::GemmProblem;

constexpr int kBlockM = gemm_wgmma::kBlockM;  // 128
constexpr int kBlockK = gemm_wgmma::kBlockK;  // 64 halfs = one 128-byte swizzle row
constexpr int kInstrK = gemm_wgmma::kInstrK;  // 16
constexpr int kWarpgroupM = gemm_wgmma::kWarpgroupM;  // rows per consumer (the wgmma M)
constexpr int kConsumers = gemm_wgmma::kWarpgroups;
constexpr int kThreads = 128 + gemm_wgmma::kThreads;  // the producer warpgroup and the consumers
constexpr int kGroupM = gemm_wgmma::kGroupM;
constexpr int kProducerRegs = 40;   // the producer needs a loop counter and a few addresses
constexpr int kConsumerRegs = 232;  // 128 accumulators + descriptors, addresses, epilogue
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file of one SM");
constexpr int kATileBytes = kBlockM * kBlockK * 2;
// TMA-store epilogue (rung 11): each consumer stages its 64-row results in boxes of 64 rows x 128
// bytes (32 FP32 or 64 FP16 columns), 128-byte swizzled like the operand tiles, two box buffers per
// consumer so that one box is written while the TMA store of the previous one reads.
constexpr int kStoreBoxRows = kWarpgroupM;
constexpr int kStoreBoxBytes = kStoreBoxRows * 128;  // 8 KiB
constexpr int kStoreBuffers = 2;
constexpr int kStoreBytes = kConsumers * kStoreBuffers * kStoreBoxBytes;
// The pipeline ring's share of shared memory: as many slots as fit in 192 KiB.
constexpr int kPipelineBytes = 192 * 1024;

namespace detail {
/// The split's reduce buffer (kSplit 2: the second CTA's accumulators, 128 threads x kBN / 2 floats per
/// consumer) and the ring's slot count: what fits in kPipelineBytes beside it.
constexpr int reduce_bytes(int kBN, int kSplit) { return kSplit == 1 ? 0 : kConsumers * 128 * (kBN / 2) * 4; }
constexpr int ring_stages(int kBN, int kSplit) {
  return (kPipelineBytes - reduce_bytes(kBN, kSplit)) / (kATileBytes + kBN * kBlockK * 2);
}
}  // namespace detail

/// The tile width kBN (256, 128 or 64 columns of C; the rows are always kBlockM = 128), the split of K
/// over a 2-CTA cluster (kSplit 1 or 2, rung 13), and what follows from them (rung 12): a TileShape
/// (tile_shape.h) of two consumer warpgroups of 64 x kBN, each running wgmma.m64n<kBN>k16 into kBN / 2
/// FP32 accumulators per thread, K slices of 64, as many slots as the 192 KiB ring holds (a slot is
/// A's 128 x 64 and B's kBN x 64 slice: 4, 6 or 8 of them), plus the shared-memory figures of this
/// kernel. 128 x 256 is the fastest per tile (the most MMA work per byte of shared memory read and per
/// barrier wait); the narrower tiles exist for problems with too few 128 x 256 tiles to occupy the SMs
/// (1000^3 has 32 for 132 SMs; with 128 x 64 it has 128), chosen by gemm_tma_cuda.cu's tile_plan. With
/// kSplit = 2 the two CTAs of a cluster take the two halves of K of the same tile; the second sends its
/// accumulators into the first's shared memory (kReduceBytes), which the ring gives up (narrow tiles
/// only: 128 x 256 would need 128 KiB).
template <int kBN, int kSplit = 1>
struct TmaTile
    : tensor_core::TileShape<tensor_core::Block<kBlockM, kBN, kBlockK>, tensor_core::Warp<kWarpgroupM, kBN>,
                             tensor_core::Stages<detail::ring_stages(kBN, kSplit)>, tensor_core::RasterGroupM<kGroupM>,
                             tensor_core::Instruction<tensor_core::WgmmaM64NK16<kBN>>> {
  static_assert(kBN == 256 || kBN == 128 || kBN == 64, "TmaTile: 256, 128 or 64 columns (a wgmma N)");
  static_assert(kSplit == 1 || (kSplit == 2 && kBN <= 128), "TmaTile: K split in 2 for the 128- and 64-wide tiles");
  using Base = tensor_core::TileShape<tensor_core::Block<kBlockM, kBN, kBlockK>, tensor_core::Warp<kWarpgroupM, kBN>,
                                      tensor_core::Stages<detail::ring_stages(kBN, kSplit)>,
                                      tensor_core::RasterGroupM<kGroupM>,
                                      tensor_core::Instruction<tensor_core::WgmmaM64NK16<kBN>>>;
  using Base::kBlockN;
  using Base::kStages;
  static_assert(Base::kWarpsM == kConsumers && Base::kWarpsN == 1 && Base::kThreads + 128 == kThreads,
                "two consumer warpgroups of 64 rows, and the producer");
  static constexpr int kAccumulators = kBN / 2;  // a consumer thread's share of its 64 x kBN tile
  static constexpr int kReduceBytes = detail::reduce_bytes(kBN, kSplit);  // 64 / 32 KiB
  static constexpr int kBTileBytes = kBN * kBlockK * 2;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  // full + empty per slot; split: a reduce-full and a reduce-empty barrier per consumer.
  static constexpr int kBarrierBytes = 2 * kStages * 8 + (kSplit == 1 ? 0 : 2 * kConsumers * 8);
  // + 1 KiB so that the kernel can round the dynamic shared-memory base up to 1024 bytes (SWIZZLE_128B).
  static constexpr int kSmemBytes = kStages * kStageBytes + kReduceBytes + kStoreBytes + kBarrierBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "one CTA's shared memory on sm_90");
  static_assert(kBTileBytes % 1024 == 0 && kReduceBytes % 1024 == 0, "slot bases stay 1024-byte aligned");
};
static_assert(TmaTile<256>::kStages == 4 && TmaTile<128>::kStages == 6 && TmaTile<64>::kStages == 8 &&
                  TmaTile<128, 2>::kStages == 4 && TmaTile<64, 2>::kStages == 6,
              "the ring's slot counts (bench/gemm/README.md's rungs 12 and 13)");
static_assert(TmaTile<256>::kBlockM == gemm_wgmma::WgmmaTile::kBlockM && TmaTile<256>::kStages == gemm_wgmma::kStages,
              "TmaTile<256> is the wgmma kernels' 128 x 256 tile");

// The 128 x 256 tile's figures (the default tile; rungs 7-10 of bench/gemm/ build on them).
constexpr int kBlockN = TmaTile<256>::kBlockN;  // 256
constexpr int kStages = TmaTile<256>::kStages;  // 4
constexpr int kBTileBytes = TmaTile<256>::kBTileBytes;
constexpr int kStageBytes = TmaTile<256>::kStageBytes;
constexpr int kBarrierBytes = TmaTile<256>::kBarrierBytes;
constexpr int kSmemBytes = TmaTile<256>::kSmemBytes;

__host__ __device__ constexpr int tiles_m(int M) { return (M + kBlockM - 1) / kBlockM; }
template <int kBN = kBlockN>
__host__ __device__ constexpr int tiles_n(int N) { return (N + kBN - 1) / kBN; }

/// Tile t of the grouped order: kGroupM tile-rows are swept column by column before moving on, so
/// consecutive t share B column-panels and, within a group, A row-panels.
template <int kBN = kBlockN>
__host__ __device__ inline void tile_origin(int t, int M, int N, int* tile_m, int* tile_n) {
  const int tm = tiles_m(M), tn = tiles_n<kBN>(N);
  const int group_size = kGroupM * tn;
  const int first_m = (t / group_size) * kGroupM;
  const int group_rows = tm - first_m < kGroupM ? tm - first_m : kGroupM;
  *tile_m = (first_m + (t % group_size) % group_rows) * kBlockM;
  *tile_n = ((t % group_size) / group_rows) * kBN;
}

/// How warp_specialized_gemm_block's producer brings a slice into its pipeline slot: the policy the
/// block is templated on. TmaProducer, below, is production's; bench/gemm/cp_async_producer.cuh's
/// CpAsyncProducer (rung 18: all 128 producer threads copy with cp.async; refuted, bench/NOTES.md) is
/// the other. A producer has:
///   kThreads       producer threads that load (1: one elected thread; 128: the whole warpgroup), and
///                  so the arrivals each full barrier expects per slice;
///   kGenericProxy  true when the slots are written through the generic proxy, so that the consumers
///                  fence into the async proxy before wgmma reads them;
///   kUsesMaps      true when it reads the operands through their tensor maps (the launcher makes
///                  them only then);
///   load<kBN, kAMnMajor, kBMnMajor, kPair, kShareA>(a_tile, b_tile, full_bar, map_a, map_b, p,
///                  tile_m, tile_n, k0, rank, tid): A's 128 x 64 and B's kBN x 64 slice at (tile_m,
///                  tile_n, k0) into the slot, completing on its full barrier (called by each of the
///                  kThreads threads, tid 0..kThreads-1, once the slot is free);
///   drain()        after the producer's last slice (nothing may be left in flight past its thread).
struct TmaProducer {
  static constexpr int kThreads = 1;
  static constexpr bool kGenericProxy = false;
  static constexpr bool kUsesMaps = true;
  /// Arms the full barrier with the slice's bytes (arrive.expect_tx) and issues its TMA loads: whole
  /// tiles, or (kPair > 1) this CTA's part of the operand the cluster shares, multicast.
  template <int kBN, bool kAMnMajor, bool kBMnMajor, int kPair, bool kShareA>
  __device__ static void load(uint32_t a_tile, uint32_t b_tile, uint32_t full_bar, const CUtensorMap* map_a,
                              const CUtensorMap* map_b, const GemmProblem& p, int tile_m, int tile_n, int k0, int rank,
                              int tid);
  __device__ static void drain() {}
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/// The TMA loads of one operand's kMN x 64 slice into its tile at `tile` (layouts above), completing
/// on `bar`. The map's box is (64 k, kMN rows) for a K-major operand stored (MN, K), and (64 mn, 64 k)
/// for an MN-major one stored (K, MN) (gemm_tma_cuda.cu makes them). One thread calls it.
template <int kMN, bool kMnMajor>
__device__ __forceinline__ void tma_load_operand(uint32_t tile, const CUtensorMap* map, uint32_t bar, int mn0,
                                                 int k0) {
  if constexpr (kMnMajor) {
#pragma unroll
    for (int panel = 0; panel < kMN / gemm_wgmma::kPanel; ++panel)
      tensor_core::tma_load_2d(tile + panel * kBlockK * gemm_wgmma::kRowBytes, map, bar,
                               mn0 + panel * gemm_wgmma::kPanel, k0);
  } else {
    tensor_core::tma_load_2d(tile, map, bar, k0, mn0);
  }
}

/// Rank `rank`'s part (one of kParts) of an operand's kMN x 64 slice, multicast into the tile at
/// `tile` of all kParts CTAs of the cluster, completing on the barrier at `bar` in each. kParts 2
/// shares B between a pair of tiles (rung 14) or A (rung 16); 4 and 8 share A (rung 17).
///   K-major: rows rank * kMN / kParts .. of the tile (operand_maps' box split kParts: a box of
///   kMN / kParts rows). The 128-byte swizzle of a row depends on the row mod 8 only (the part is a
///   whole number of 8-row, 1024-byte atoms), so the part lands at its place in the tile's layout.
///   MN-major (kMN / 64 panels of 64 k-rows): where kParts <= panels, panels rank * panels / kParts ..
///   (box 64 mn x 64 k); where there are more parts than panels, each panel is cut along k into
///   kParts / panels runs of k-rows (box 64 mn x 64 * panels / kParts k), rank taking run rank % q of
///   panel rank / q: a run is again whole 8-row atoms.
template <int kMN, bool kMnMajor, int kParts = 2>
__device__ __forceinline__ void tma_multicast_part(uint32_t tile, const CUtensorMap* map, uint32_t bar, int mn0,
                                                   int k0, int rank) {
  static_assert(kParts == 2 || kParts == 4 || kParts == 8, "tma_multicast_part: 2, 4 or 8 CTAs");
  constexpr uint16_t kAll = static_cast<uint16_t>((1u << kParts) - 1);
  if constexpr (kMnMajor) {
    constexpr int kPanels = kMN / gemm_wgmma::kPanel;
    if constexpr (kParts <= kPanels) {
      constexpr int kPanelsEach = kPanels / kParts;
#pragma unroll
      for (int i = 0; i < kPanelsEach; ++i) {
        const int panel = rank * kPanelsEach + i;
        tensor_core::tma_load_2d_multicast(tile + panel * kBlockK * gemm_wgmma::kRowBytes, map, bar,
                                           mn0 + panel * gemm_wgmma::kPanel, k0, kAll);
      }
    } else {
      constexpr int kRunsPerPanel = kParts / kPanels;
      constexpr int kRunRows = kBlockK / kRunsPerPanel;  // k-rows per run: 32 or 16
      static_assert(kRunRows % 8 == 0, "tma_multicast_part: runs of whole 8-row swizzle atoms");
      const int panel = rank / kRunsPerPanel, run = rank % kRunsPerPanel;
      tensor_core::tma_load_2d_multicast(
          tile + panel * kBlockK * gemm_wgmma::kRowBytes + run * kRunRows * gemm_wgmma::kRowBytes, map, bar,
          mn0 + panel * gemm_wgmma::kPanel, k0 + run * kRunRows, kAll);
    }
  } else {
    static_assert((kMN / kParts) % 8 == 0, "tma_multicast_part: parts of whole 8-row swizzle atoms");
    tensor_core::tma_load_2d_multicast(tile + rank * (kMN / kParts) * gemm_wgmma::kRowBytes, map, bar, k0,
                                       mn0 + rank * (kMN / kParts), kAll);
  }
}

template <int kBN, bool kAMnMajor, bool kBMnMajor, int kPair, bool kShareA>
__device__ __forceinline__ void TmaProducer::load(uint32_t a_tile, uint32_t b_tile, uint32_t full_bar,
                                                  const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                  const GemmProblem& p, int tile_m, int tile_n, int k0, int rank,
                                                  int tid) {
  tensor_core::mbarrier_arrive_expect_tx(full_bar, TmaTile<kBN>::kStageBytes);
  if constexpr (kShareA) {
    tma_multicast_part<kBlockM, kAMnMajor, kPair>(a_tile, map_a, full_bar, tile_m, k0, rank);
  } else {
    tma_load_operand<kBlockM, kAMnMajor>(a_tile, map_a, full_bar, tile_m, k0);
  }
  if constexpr (kPair == 1 || kShareA) {
    tma_load_operand<kBN, kBMnMajor>(b_tile, map_b, full_bar, tile_n, k0);
  } else {
    tma_multicast_part<kBN, kBMnMajor>(b_tile, map_b, full_bar, tile_n, k0, rank);
  }
}

/// The epilogue of one consumer through shared memory and TMA stores (rung 11): alpha applied, the
/// 64 x kBN FP32 accumulators written as kBoxes boxes of 64 rows x 128 bytes (kBN = 256, FP32: 8 boxes
/// of 32 columns; FP16: 4 boxes of 64) into the consumer's two box buffers, each stored by its first thread
/// with cp.async.bulk.tensor once all 128 threads have written it (named barrier 1 + consumer) and
/// fenced their writes into the async proxy. TMA skips the parts of a box outside C. `box_count`
/// counts this consumer's boxes over the CTA's tiles: box i uses buffer i % 2, which its first thread
/// waits to be read out (bulk wait_group.read 1: the store of box i - 2 is done with it) before the
/// barrier that lets the others overwrite it. beta must be 0 (C is not read).
/// Bank arithmetic: a warp's float2 (FP32) or half2 (FP16) writes cover 8 rows x 32 (16) bytes; the
/// 128-byte swizzle puts the 8 rows' 16-byte chunks on 8 different chunk positions, so the writes
/// take the minimum of 2 (1) wavefronts.
template <bool kHalf, int kBN>
__device__ __forceinline__ void store_tile_tma(const float (&d)[kBN / 2], float alpha, const CUtensorMap* map_c,
                                               uint32_t buffers, int consumer, int tile_m, int tile_n,
                                               int& box_count) {
  namespace tc = tensor_core;
  constexpr int kElementBytes = kHalf ? 2 : 4;
  constexpr int kBoxCols = 128 / kElementBytes;
  constexpr int kBoxes = kBN / kBoxCols;
  constexpr int kFragmentsPerBox = kBoxCols / 8;  // 8-column groups j of the wgmma fragment
  const int t = static_cast<int>(threadIdx.x) % 128;
  const int warp = t / 32, lane = t % 32;
  const bool issues = t == 0;
#pragma unroll
  for (int box = 0; box < kBoxes; ++box, ++box_count) {
    const uint32_t buffer = buffers + (box_count % kStoreBuffers) * kStoreBoxBytes;
    if (issues) tc::tma_store_wait_read<kStoreBuffers - 1>();
    tc::named_barrier_sync<128>(1 + consumer);
#pragma unroll
    for (int f = 0; f < kFragmentsPerBox; ++f) {
      const int j = box * kFragmentsPerBox + f;
      // Fragment j's pair column within the box (8 f + 2 (lane % 4)), in bytes of its 128-byte row.
      const int col_bytes = tc::WgmmaAccumulator::pair_col(lane, f) * kElementBytes;
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row) {
        const int r = tc::WgmmaAccumulator::pair_row(warp, lane, half_row);
        const uint32_t at = buffer + r * 128 + ((((col_bytes >> 4) ^ (r & 7))) << 4) + (col_bytes & 15);
        const float v0 = alpha * d[4 * j + 2 * half_row], v1 = alpha * d[4 * j + 2 * half_row + 1];
        if constexpr (kHalf) {
          const uint32_t packed = gemm_tiles::c16_pack<__half>(v0, v1);
          tc::st_shared_b32(at, packed);
        } else {
          tc::st_shared_v2_f32(at, v0, v1);
        }
      }
    }
    tc::fence_proxy_async_shared();
    tc::named_barrier_sync<128>(1 + consumer);
    if (issues) {
      tc::tma_store_2d(map_c, buffer, tile_n + box * kBoxCols, tile_m + consumer * kWarpgroupM);
      tc::tma_store_commit();
    }
  }
}

/// The slices [*k_begin, *k_end) of K (in kBlockK units) that rank `rank` of a kSplit-CTA cluster
/// computes: the first ceil(k_tiles / kSplit) for rank 0, the rest for rank 1 (possibly none).
template <int kSplit>
__device__ __forceinline__ void split_range(int k_tiles, int rank, int* k_begin, int* k_end) {
  const int per = (k_tiles + kSplit - 1) / kSplit;
  *k_begin = min(k_tiles, rank * per);
  *k_end = min(k_tiles, (rank + 1) * per);
}

/// The whole CTA, on 128 x kBN tiles; call from a __global__ launched with kThreads threads,
/// TmaTile<kBN, kSplit>::kSmemBytes of dynamic shared memory and any number of CTAs (kSplit or kPair
/// > 1: a multiple of kSplit * kPair, in clusters of that many). Each CTA (each cluster) walks tiles
/// blockIdx.x + i * gridDim.x (cluster index + i * clusters; kPair > 1: units of kPair tiles). kATrans: A stored (K, M); kBTrans: B stored (N, K). map_a / map_b:
/// the operands' tensor maps (__grid_constant__; B's box kBN wide, operand_maps). map_c: C's tensor
/// map (box 128 bytes x 64 rows, 128-byte swizzle) when the epilogue is to leave through TMA stores
/// (beta == 0, gemm_tma_cuda.cu decides), nullptr for stores from the registers.
///
/// kPair = 2 (rung 14; kSplit 1, width 256 or 128): the CTAs of a 2-CTA cluster walk tile pairs
/// (2q, 2q + 1) of the grouped order, which are vertically adjacent (same tile_n, rows tile_m and
/// tile_m + 128) when the number of tile-rows is even (the launcher checks). Both need the same B
/// slice: rank r loads half of it (MN-major: panels r * w / 128 ... of 64 columns; K-major: rows
/// r * w / 2 .. of the tile, map_b's box w / 2 rows) with .multicast::cluster into the same offset
/// of both CTAs, completing on the full barrier at the same offset in each (each full barrier still
/// expects the whole slot's bytes from one arrival: its own producer's arrive.expect_tx; the peer's
/// bytes may land before that arrival, which the transaction count allows). A slot is written by
/// both producers, so it is refilled only when the consumers of both CTAs have released it: every
/// consumer arrives on its own empty barrier and on the peer's (count 2 x kConsumers). Per slice a
/// CTA reads A's 16 KiB and half of B from L2 instead of all of B: at width 128, 24 KiB instead of 32.
///
/// kPair = 2 with kShareA (rung 16; kSplit 1, width 128 or 64): the cluster walks 128 x 2kBN units
/// in the grouped order of that width, and rank r takes the unit's columns r * kBN .. r * kBN + kBN - 1:
/// two horizontally adjacent tiles, which need the same A slice. Rank r multicasts half of it (K-major:
/// rows 64r .. 64r + 63, map_a's box 64 rows; MN-major: panel r) and loads its own B; the barriers
/// and the slot release are the B-sharing pair's. Where the tile-columns are odd, rank 1 of the last
/// unit of a tile-row computes a tile wholly right of C: its B boxes are all TMA zero fill (counted
/// in the transaction bytes like any other) and its stores are dropped (store_pair's bounds, TMA
/// store clipping), but it still multicasts its half of A, which rank 0 needs. Per slice a 64-wide
/// CTA reads 8 + 8 KiB instead of 16 + 8: on a one-wave problem (1000^3: 128 tiles of 128 x 64) the
/// per-CTA and the total L2 traffic of 128 x 128 tiles with twice the SMs at work.
///
/// kPair = 4 or 8 with kShareA (rung 17; kSplit 1, width 64): the same with kPair tiles side by side,
/// 128 x 64 kPair units, rank r multicasting part r of kPair of the A slice (tma_multicast_part:
/// K-major rows 128 r / kPair ..; MN-major a run of 64 * 2 / kPair k-rows of panel r / (kPair / 2),
/// map_a's box cut to match by operand_maps). Every consumer releases a slot on its own empty barrier
/// and on each of the kPair - 1 others (count kPair x kConsumers), and a producer refills a slot only
/// when all kPair CTAs are done with it: the coupling grows with the cluster. Ranks whose tile lies
/// wholly right of C (tile-columns not a multiple of kPair) load zero-filled B, store nothing and
/// still multicast their part of A. Per slice a CTA reads 16 / kPair KiB of A + 8 KiB of B: 12 KiB
/// (4) or 10 KiB (8) against rung 16's 16.
///
/// kSplit = 2 (rung 13): rank r of the cluster computes its half of K (split_range) of the cluster's
/// tile. Rank 1's consumer c then waits until rank 0 has read its previous tile's partial
/// (reduce-empty barrier c of rank 1, arrived on from rank 0), writes its 64 x kBN partial into rank
/// 0's reduce buffer c with st.shared::cluster (thread t's accumulator q at 16 * (q / 4 * 128 + t):
/// consecutive threads, consecutive 16-byte words) and arrives on rank 0's reduce-full barrier c (128
/// arrivals, release at cluster scope). Rank 0's consumer c waits on that (acquire at cluster scope),
/// adds the partial to its own (rank 0's half + rank 1's half, always in that order: the same bits
/// every run), releases the buffer (unless it was the cluster's last tile: no wait of rank 1 pairs
/// with that arrival) and stores the tile as kSplit = 1 does. Rank 1 stores nothing.
///
/// Cluster barriers (kSplit or kPair > 1): one after the barrier inits (published at cluster scope by
/// fence_mbarrier_init) and one before exit, both with a relaxed arrive (cluster_arrive_relaxed,
/// cluster_wait): a releasing one (cluster_sync) waits on a GPU-scope memory barrier, which at the end
/// stood behind the tile's stores (1000^3 pair_a_64: ~7% of the consumers' time). Every cross-CTA
/// access is ordered by the mbarriers themselves; the one left is the peers' last slot releases,
/// which the producer waits for in its tail (kPair > 1: kStages more empty-barrier waits, CUTLASS's
/// producer_tail) so that its CTA cannot exit before they land. The final barrier is what lets
/// compute-sanitizer's racecheck, which cannot follow the mbarriers, see that no CTA exits early.
template <bool kATrans, bool kBTrans, int kBN = kBlockN, int kSplit = 1, int kPair = 1, bool kShareA = false,
          class Producer = TmaProducer>
__device__ __forceinline__ void warp_specialized_gemm_block(const GemmProblem& p, const CUtensorMap* map_a,
                                                            const CUtensorMap* map_b, const CUtensorMap* map_c,
                                                            uint8_t* smem_raw) {
  namespace tc = tensor_core;
  constexpr bool kAMnMajor = kATrans;
  constexpr bool kBMnMajor = !kBTrans;
  using Tile = TmaTile<kBN, kSplit>;
  constexpr int kStages = Tile::kStages, kStageBytes = Tile::kStageBytes, kAcc = Tile::kAccumulators;
  static_assert(kPair == 1 || (kPair == 2 && kSplit == 1 && (kShareA ? kBN <= 128 : kBN >= 128)) ||
                    ((kPair == 4 || kPair == 8) && kSplit == 1 && kShareA && kBN == 64),
                "kPair 2: unsplit; sharing B 256- or 128-wide tiles, sharing A 128- or 64-wide ones; "
                "kPair 4 or 8: 64-wide tiles sharing A");
  static_assert(!kShareA || kPair >= 2, "kShareA: a cluster plan");
  static_assert(Producer::kThreads == 1 || (kSplit == 1 && kPair == 1),
                "a producer of several threads: unclustered tiles (their arrivals are this CTA's)");
  constexpr int kCluster = kSplit * kPair;  // CTAs per cluster (1: not a cluster launch)

  const int tid = static_cast<int>(threadIdx.x);
  const int warpgroup = tid / 128;
  uint32_t smem = (gemm_tiles::shared_address(smem_raw) + 1023) & ~1023u;
  // Held in a register from here on: left to itself, nvcc recomputed the base (S2UR of the CTA's
  // cluster id, whose latency the next instructions waited for) twice in every slice of the
  // consumers' loop (ncu source view, 1000^3).
  asm volatile("" : "+r"(smem));
  const uint32_t reduce_buffers = smem + kStages * kStageBytes;      // kSplit 2: 1 per consumer
  const uint32_t store_buffers = reduce_buffers + Tile::kReduceBytes;  // 2 box buffers per consumer
  const uint32_t full_bar = store_buffers + kStoreBytes;                // kStages barriers of 8 bytes
  const uint32_t empty_bar = full_bar + kStages * 8;
  const uint32_t reduce_full_bar = empty_bar + kStages * 8;             // kSplit 2: kConsumers each
  const uint32_t reduce_empty_bar = reduce_full_bar + kConsumers * 8;
  auto a_tile = [&](int slot) { return smem + slot * kStageBytes; };
  auto b_tile = [&](int slot) { return smem + slot * kStageBytes + kATileBytes; };

  const int rank = kCluster == 1 ? 0 : static_cast<int>(tc::cluster_ctarank());
  const int group = static_cast<int>(blockIdx.x) / kCluster, groups = static_cast<int>(gridDim.x) / kCluster;

  if (tid == 0) {
    tc::tma_prefetch_map(map_a);
    tc::tma_prefetch_map(map_b);
    for (int s = 0; s < kStages; ++s) {
      // One arrival per loading producer thread (TMA: its arrive.expect_tx).
      tc::mbarrier_init(full_bar + 8 * s, Producer::kThreads);
      tc::mbarrier_init(empty_bar + 8 * s, kConsumers * kPair);  // one thread per consumer warpgroup (of every CTA)
    }
    if constexpr (kSplit == 2) {
      for (int c = 0; c < kConsumers; ++c) {
        tc::mbarrier_init(reduce_full_bar + 8 * c, 128);   // every thread of rank 1's consumer c
        tc::mbarrier_init(reduce_empty_bar + 8 * c, 128);  // every thread of rank 0's consumer c
      }
    }
    tc::fence_mbarrier_init();
  }
  // A cluster's barriers are arrived on (and, kPair > 1, written into) from the other CTAs: the inits
  // must be visible cluster-wide. fence_mbarrier_init released them at cluster scope, so the barrier
  // need not release anything (a releasing one waits on a GPU-scope memory barrier).
  if constexpr (kCluster > 1) {
    tc::cluster_arrive_relaxed();
    tc::cluster_wait();
  } else {
    __syncthreads();
  }
  // Programmatic dependent launch (gemm_tma_cuda.cu's Launch::kDependent; no-ops otherwise). Up to
  // here the CTA touched only its own shared memory and its parameters, so this prologue (and the
  // CTA's launch) may overlap the previous kernel; from here on it reads A, B (and C) and writes C,
  // which that kernel may still write or read, so every thread waits for its completion first. Then
  // the next GEMM may be scheduled at once: its CTAs take the SMs this grid leaves idle, or each SM
  // as one of these CTAs exits, and run their prologue there before waiting in turn.
  tc::grid_dependency_wait();
  tc::launch_dependents();

  // The walk is over units: tiles, or (kPair 2) tile pairs, of which this CTA takes tile 2u + rank
  // (sharing B), or (sharing A) the rank-th 128 x kBN part of unit u's 128 x kPair * kBN tile.
  const int units = kShareA ? tiles_m(p.M) * tiles_n<kPair * kBN>(p.N) : tiles_m(p.M) * tiles_n<kBN>(p.N) / kPair;
  auto unit_origin = [&](int u, int* tile_m, int* tile_n) {
    if constexpr (kShareA) {
      tile_origin<kPair * kBN>(u, p.M, p.N, tile_m, tile_n);
      *tile_n += rank * kBN;
    } else {
      tile_origin<kBN>(kPair == 2 ? 2 * u + rank : u, p.M, p.N, tile_m, tile_n);
    }
  };
  int k_begin, k_end;
  // (A pair's rank is not a K rank: both CTAs of a pair walk the whole of K.)
  split_range<kSplit>((p.K + kBlockK - 1) / kBlockK, kSplit == 1 ? 0 : rank, &k_begin, &k_end);

  if (warpgroup == 0) {
    // Producer: Producer::kThreads threads load every slice (TmaProducer: thread 0 issues the TMA
    // loads), and the others only give their registers back and finish.
    tc::setmaxnreg_dec<kProducerRegs>();
    if (tid < Producer::kThreads) {
      int it = 0;
      for (int u = group; u < units; u += groups) {
        int tile_m, tile_n;
        unit_origin(u, &tile_m, &tile_n);
        for (int kt = k_begin; kt < k_end; ++kt, ++it) {
          const int slot = it % kStages;
          tc::mbarrier_wait(empty_bar + 8 * slot, ((it / kStages) & 1) ^ 1);  // kPair > 1: free in every CTA
          Producer::template load<kBN, kAMnMajor, kBMnMajor, kPair, kShareA>(
              a_tile(slot), b_tile(slot), full_bar + 8 * slot, map_a, map_b, p, tile_m, tile_n, kt * kBlockK, rank, tid);
        }
      }
      Producer::drain();
      // (kPair > 1) The producer's tail, as CUTLASS's producer_tail: the waits the next kStages
      // slices would make before refilling their slots, i.e. until every consumer of the cluster has
      // released the last slice of each slot (a slot never filled passes at once). The other CTAs'
      // consumers arrive on this CTA's empty barriers, so without it the CTA could exit, and its
      // shared memory pass to a later CTA, before a remote arrival lands.
      if constexpr (kPair > 1) {
        for (int n = 0; n < kStages; ++n, ++it)
          tc::mbarrier_wait(empty_bar + 8 * (it % kStages), ((it / kStages) & 1) ^ 1);
      }
    }
    return;
  }

  // Consumers.
  tc::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const int t128 = tid % 128;
  const bool releases = t128 == 0;  // the one thread per consumer that arrives on empty barriers
  auto release = [&](int slot) {
    tc::mbarrier_arrive(empty_bar + 8 * slot);
    // CTA scope (tma.cuh, ArriveScope): what the peer's multicast must not overtake is this CTA's
    // own wgmma reads of the slot, finished before the arrive.
    // (rank ^ peer over peer = 1 .. kPair - 1: every other CTA of the cluster once.)
#pragma unroll
    for (int peer = 1; peer < kPair; ++peer)
      tc::mbarrier_arrive_cluster<tc::ArriveScope::kCta>(empty_bar + 8 * slot, static_cast<uint32_t>(rank ^ peer));
  };
  const int warp = t128 / 32;
  const int lane = tid % 32;
  int it = 0;
  int box_count = 0;  // TMA-store epilogue: this consumer's boxes so far
  int round = 0;      // kSplit 2: the cluster's tiles so far (the reduce barriers' phase)
  float d[kAcc];
  for (int u = group; u < units; u += groups, ++round) {
    int tile_m, tile_n;
    unit_origin(u, &tile_m, &tile_n);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) d[i] = 0.f;
    for (int kt = k_begin; kt < k_end; ++kt, ++it) {
      const int slot = it % kStages;
      tc::mbarrier_wait(full_bar + 8 * slot, (it / kStages) & 1);
      // A producer that wrote the slot through the generic proxy: wgmma reads it through the async one.
      if constexpr (Producer::kGenericProxy) tc::fence_proxy_async_shared();
      gemm_wgmma::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBlockK / kInstrK; ++ks) {
        const uint64_t desc_a =
            gemm_wgmma::operand_descriptor<kAMnMajor>(a_tile(slot), consumer * kWarpgroupM, ks);
        const uint64_t desc_b = gemm_wgmma::operand_descriptor<kBMnMajor>(b_tile(slot), 0, ks);
        tc::wgmma_m64nk16<kBN, kAMnMajor, kBMnMajor>(d, desc_a, desc_b);
      }
      gemm_wgmma::wgmma_commit();
      gemm_wgmma::wgmma_wait<1>();  // the previous slice's wgmmas have finished reading their slot
      if (kt > k_begin && releases) release((it - 1) % kStages);
    }
    gemm_wgmma::wgmma_wait<0>();
    gemm_wgmma::fence_accumulators(d);
    if (k_end > k_begin && releases) release((it - 1) % kStages);

    if constexpr (kSplit == 2) {
      const uint32_t buffer = reduce_buffers + consumer * 128 * kAcc * 4;
      if (rank == 1) {
        if (round > 0) tc::mbarrier_wait_cluster(reduce_empty_bar + 8 * consumer, (round - 1) & 1);
        const uint32_t remote = tc::cluster_address(buffer, 0);
#pragma unroll
        for (int q = 0; q < kAcc / 4; ++q)
          tc::st_cluster_v4(remote + 16 * (q * 128 + t128), d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3]);
        tc::mbarrier_arrive_cluster(reduce_full_bar + 8 * consumer, 0);
        continue;
      }
      tc::mbarrier_wait_cluster(reduce_full_bar + 8 * consumer, round & 1);
#pragma unroll
      for (int q = 0; q < kAcc / 4; ++q) {
        const float4 v = tc::ld_shared_v4_f32(buffer + 16 * (q * 128 + t128));
        d[4 * q] += v.x;
        d[4 * q + 1] += v.y;
        d[4 * q + 2] += v.z;
        d[4 * q + 3] += v.w;
      }
      if (u + groups < units) tc::mbarrier_arrive_cluster(reduce_empty_bar + 8 * consumer, 1);
    }

    // Meanwhile the producer is already filling the released slots with the next tile's slices.
    if (map_c != nullptr) {
      const uint32_t buffers = store_buffers + consumer * kStoreBuffers * kStoreBoxBytes;
      if (p.out.c_half) store_tile_tma<true, kBN>(d, p.out.alpha, map_c, buffers, consumer, tile_m, tile_n, box_count);
      else store_tile_tma<false, kBN>(d, p.out.alpha, map_c, buffers, consumer, tile_m, tile_n, box_count);
      continue;
    }
    // Straight from the accumulators (tensor_core::WgmmaAccumulator: pair (j, h) in registers 4j + 2h, + 1).
    using Acc = tc::WgmmaAccumulator;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        gemm_tiles::store_pair(p.out, p.M, p.N, tile_m + consumer * kWarpgroupM + Acc::pair_row(warp, lane, h),
                               tile_n + Acc::pair_col(lane, j), d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  }
  // The shared memory a TMA store reads must stay valid until it has been read (.read: the writes to
  // global memory need not have landed; they are complete when the grid is, as CUTLASS's epilogue assumes).
  if (map_c != nullptr && t128 == 0) tensor_core::tma_store_wait_read<0>();
  // A cluster's CTAs touch each other's shared memory (partials or multicast slices, barrier
  // arrivals): neither may exit while the other might still do so. The protocol above already
  // orders every access before the owner's last wait (the full and reduce barriers for the data, the
  // producer's tail for the remote releases), but compute-sanitizer's racecheck cannot see that
  // through the mbarriers: one cluster barrier per launch, which waits for the non-exited threads
  // only (the producer's, in its tail). Relaxed: with cluster_sync's release the consumers waited on
  // a GPU-scope memory barrier behind their tile's stores (ncu, 1000^3 pair_a_64: ~7% of their time).
  if constexpr (kCluster > 1) {
    tc::cluster_arrive_relaxed();
    tc::cluster_wait();
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace halfgrad::cuda::gemm_tma
