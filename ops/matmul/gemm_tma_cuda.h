// gemm_tma_cuda.h - the warp-specialised TMA path of gemm_f16 on Hopper (sm_90a; device code in
// gemm_tma.cuh, its launch templates in gemm_tma_launch.cuh), as gemm_cuda.cu and the ladder rungs of
// bench/gemm/ call it. Private to ops/matmul/ and bench/gemm/; the public API stays
// halfgrad::cuda::gemm_f16 (gemm_cuda.h).
#pragma once
#include <cuda.h>  // CUtensorMap (a type only)

#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::cuda::gemm_tma {

using gemm_tiles::GemmProblem;

/// True when the current device can run the sm_90a kernels (wgmma, TMA): compute capability exactly
/// 9.0. `op` names the caller in the error thrown when there is no CUDA device.
bool device_supported(const char* op);

/// How the CTAs cover the tiles: one CTA per tile (kPerTile, rung 8), or one CTA per SM each walking
/// tiles in the grouped order (kPersistent, rung 9 and production).
enum class Schedule { kPerTile, kPersistent };

/// Whether the TMA kernel can describe these operands: A and B 16-byte aligned and lda, ldb
/// multiples of 8 halfs (TMA needs 16-byte aligned bases and row strides). Any M, N, K >= 1.
bool operands_supported(const GemmProblem& p);

/// How C leaves: stores from the accumulator registers (8-byte FP32 / 4-byte FP16 pieces, alpha and
/// beta applied), or staged in shared memory and written by TMA stores (rung 11). kTma falls back to
/// kRegisters where TMA cannot store: beta != 0, BF16, C or ldc not 16-byte aligned.
enum class Store { kRegisters, kTma };

/// Whether Store::kTma can be honoured for this C (beta == 0, FP16 or FP32, base and ldc as TMA needs).
bool tma_store_possible(const GemmProblem& p);

/// Output tiles (128 x tile_n; tile_n 256, 128 or 64) of an M x N problem.
int64_t tile_count(int64_t M, int64_t N, int tile_n = 256);

/// The tile, the split of K and the pairing one launch uses: 128 x width tiles (gemm_tma.cuh's
/// TmaTile: width 256, 128 or 64) and split 1, or 2 (rung 13: the two CTAs of a cluster take the two
/// halves of K of each tile; widths 128 and 64); pair 1, or 2 (rung 14, split 1, widths 256 and 128:
/// the two CTAs of a cluster take vertically adjacent tiles and share B's slices by TMA multicast;
/// needs an even number of 128-row tile-rows); pair 2 with share_a (rung 16, split 1, widths 128 and
/// 64: horizontally adjacent tiles sharing A's slices; any M, N). The kernel also takes pair 4 or 8
/// with share_a (rung 17, split 1, width 64: as many horizontally adjacent tiles in one cluster
/// sharing A; any M, N), which gemm_f16 never chooses: only the lab launches them
/// (bench/gemm/lab_families.h).
struct TilePlan {
  int width = 256;
  int split = 1;
  int pair = 1;
  bool share_a = false;
};

/// gemm_f16's plan for problem p on `sms` SMs (rungs 12-14 and 16, bench/gemm/README.md). Each
/// candidate (width w, split s) makes tiles(w) * s work units of one CTA; a persistent CTA takes
/// waves = ceil(units / resident CTAs) of them in turn, and a unit costs about w / efficiency / s
/// plus, when split, the partial's trip through distributed shared memory (about kReduceSlices of
/// the unit's k_tiles / s slices). Where the rows of A or B are not a multiple of 32 bytes (an L2
/// sector) the 64-wide tile's efficiency is lower, and pairs that share the cut operand are
/// candidates too: 128 x 256 and 128 x 128 sharing B (where B's rows are cut and the 128-row
/// tile-rows are even), 128 x 128 and 128 x 64 sharing A (where A's rows are cut; an A-sharing unit
/// is 2 CTAs, the second possibly wholly right of C).
/// The least estimate wins, the earlier candidate on a tie (unpaired first, 128 x 256 first). The constants
/// and their measurements are in gemm_tma_cuda.cu. A split is tried only from 64 slices of 64 along
/// K (K > 4032); a split or a pair only where 2-CTA clusters of its kernel fit (resident_ctas, asked
/// then), its waves counting those clusters' CTAs, not the SMs. max_split 1 leaves splits out (rung
/// 12), max_pair 1 the pairs (the rungs that build their own cluster plan on the unpaired width).
TilePlan tile_plan(const GemmProblem& p, int64_t sms, int max_split = 2, int max_pair = 2);

/// How many CTAs of the plan's kernel can be resident at once: the SM count without a cluster, else
/// the cluster size x cudaOccupancyMaxActiveClusters (a cluster must fit in one GPC, so clusters of
/// 4 or 8 may leave SMs idle: bench/gemm/README.md, rung 17). Queried once per kernel. Throws
/// halfgrad::Error naming op for a plan the kernel is not built for, and for the lab's clusters of 4
/// and 8 (bench/gemm/lab_families.h asks for those).
int64_t resident_ctas(TilePlan plan, const char* op);

/// Throws halfgrad::Error naming op unless the plan is one the kernel is built for (clusters of 4 and
/// 8 included).
void check_plan(TilePlan plan, const char* op);

/// How the kernel is queued behind the previous kernel in the stream. kSerial: an ordinary launch,
/// its CTAs start once that kernel has finished. kDependent: programmatic dependent launch
/// (cudaLaunchAttributeProgrammaticStreamSerialization; CUDA Programming Guide, "Programmatic
/// Dependent Launch"): its CTAs may be scheduled while the previous kernel runs (where that kernel
/// is a TMA GEMM, once all of its CTAs have passed their own wait; after any other kernel, once all
/// of that kernel's CTAs have exited) and run their prologue, then wait in griddepcontrol.wait for the
/// previous kernel to complete before reading or writing global memory: the same results, bit for
/// bit, with the launch latency of back-to-back kernels hidden (bench/gemm/dependent_launch.cu,
/// rung 15). In stream capture it becomes a programmatic edge between kernel nodes.
enum class Launch { kSerial, kDependent };

/// Queues the kernel on stream() with the plan's tiles, split and pairing. a_trans: A stored (K, M);
/// b_trans: B stored (N, K). Needs device_supported(), operands_supported(p) and a plan gemm_f16 can
/// choose, clusters of 2 at most (checked: halfgrad::Error naming op); a split or pair plan also needs
/// one cluster of the kernel to fit on the GPU, a B-sharing pair plan an even number of 128-row
/// tile-rows (checked likewise).
void launch(const GemmProblem& p, bool a_trans, bool b_trans, Schedule schedule, const char* op,
            Store store = Store::kRegisters, TilePlan plan = {}, Launch launch_mode = Launch::kSerial);

/// The tensor maps of A and B as gemm_tma.cuh's tma_load_operand reads them into 64-wide K slices of
/// 128 x tile_n tiles (128-byte swizzle; box 64 k x 128 (A) / tile_n (B) rows for a K-major operand,
/// 64 x 64 for an MN-major one). b_box_split 2 (the B-sharing pair plan, tile_n 256 or 128): a
/// K-major B's box is tile_n / 2 rows, the half one CTA multicasts; a_box_split 2, 4 or 8 (the
/// A-sharing pair and cluster plans): a K-major A's box is 128 / a_box_split rows likewise, an
/// MN-major A's (split 4 or 8) 64 mn x 32 or 16 k. Throws halfgrad::Error naming op when
/// operands_supported(p) is false, both splits are above 1, or the plan they describe is not built.
void operand_maps(const GemmProblem& p, bool a_trans, bool b_trans, int tile_n, CUtensorMap* map_a,
                  CUtensorMap* map_b, const char* op, int b_box_split = 1, int a_box_split = 1);

}  // namespace halfgrad::cuda::gemm_tma
