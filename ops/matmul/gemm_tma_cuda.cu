// gemm_tma_cuda.cu - launches the warp-specialised TMA GEMM of gemm_tma.cuh (math, layouts, roles,
// pipeline and precision are described there) and builds its operands' tensor maps.
//
// Math: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, C row-major, every N/T layout.
// Mapping: 384-thread CTAs (1 producer + 2 consumer warpgroups), 128 x 256, 128 x 128 or 128 x 64 tiles
// (TmaTile), one CTA per SM (~225 KiB of shared memory), or clusters (cudaLaunchKernelEx with a cluster
// dimension) of 2 CTAs that share each tile's K (split plan) or A's or B's slices (pair plans, TMA
// multicast), or of 4 or 8 that share A's (cluster plans); per tile or persistent, epilogue
// from registers or by TMA stores, queued serially or by programmatic dependent launch (gemm_tma_cuda.h). Precision: FP16 operands,
// FP32 accumulation, FP32 or FP16 output.
//
// Tensor maps (tensor_map.h), one per operand, by where its K runs:
//   K-major, stored (MN, K) (A layout N, B layout T): rows = MN, cols = K, box 64 k x kMN rows (kMN:
//     128 for A, the tile width for B): one
//     TMA per slice fills the whole tile.
//   MN-major, stored (K, MN) (A layout T, B layout N): rows = K, cols = MN, box 64 mn x 64 k: one
//     TMA per 64-wide panel (A shared over 4 or 8 CTAs: 64 mn x 32 or 16 k, a part of a panel).
// Both with CU_TENSOR_MAP_SWIZZLE_128B (the box rows are exactly 128 bytes). The maps are kernel
// parameters (__grid_constant__), built on the host for every call (cuTensorMapEncodeTiled is a
// host-only function: about a microsecond, no GPU work).
//
// Build: sm_90a only (its own object library); for any other target the kernel body is a trap, and
// callers only launch on compute capability 9.0 (device_supported). The plans gemm_f16 never chooses
// (clusters of 4 and 8, the cp.async producer) are instantiated by bench/gemm/lab_families.cu only.
#include "ops/matmul/gemm_tma_cuda.h"

#include <algorithm>
#include <cmath>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "ops/matmul/gemm_tma_launch.cuh"
#include "ops/matmul/tensor_map.h"

namespace halfgrad::cuda::gemm_tma {
namespace {

/// The map of one operand with MN extent `mn` (rows of C it feeds: M for A, N for B): K-major, a box
/// of box_mn rows x 64 k; MN-major, 64 mn x box_k k-rows.
void operand_map(CUtensorMap* map, const uint16_t* base, int64_t mn, int64_t k, int64_t ld, bool mn_major,
                 int box_mn, int box_k, const char* op) {
  MatrixTensorMap m;
  m.base = base;
  m.ld = ld;
  m.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  m.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  m.box_cols = kBlockK;  // 64 halfs = 128 bytes, one swizzle row (also the panel width of MN-major)
  if (mn_major) {
    m.rows = k;
    m.cols = mn;
    m.box_rows = box_k;
  } else {
    m.rows = mn;
    m.cols = k;
    m.box_rows = box_mn;
  }
  encode_tensor_map(map, m, op);
}

}  // namespace

bool device_supported(const char* op) {
  (void)op;  // cuda::compute_capability names itself if the device is missing
  return compute_capability() == 90;  // sm_90a code runs on compute capability 9.0 only
}

bool tma_store_possible(const GemmProblem& p) {
  return p.out.beta == 0.f && !p.out.c_bf16 && tensor_map_aligned(p.out.C, p.out.ldc, p.out.c_half ? 2 : 4);
}

int64_t tile_count(int64_t M, int64_t N, int tile_n) {
  return ((M + kBlockM - 1) / kBlockM) * ((N + tile_n - 1) / tile_n);
}

// The per-tile rates of the narrow tiles relative to the 128 x 256 one, the cost of a split's
// reduction in slices, and the shortest K a split is tried on (gemm_tma_cuda.h, tile_plan), from
// `gemm_bench --dispatch` on the H200 (bench/gemm/README.md, rungs 12 and 13):
//   kEfficiency128, kEfficiency64: at 4096^3-8192^3, where every width fills the SMs, 128 x 128 ran at
//     0.85-0.88 and 128 x 64 at 0.56-0.63 of 128 x 256's rate.
//   kEfficiency64Unaligned: with rows of A or B not a multiple of 32 bytes (16 halfs), half of the
//     128-byte TMA box rows start in the middle of a 32-byte sector (L2 traffic at 1000^3: 60 MB
//     against 37 MB at 1024^3) and the 64-wide tile, which reads the most operand bytes per FLOP,
//     loses most: 1000^3 ran at 0.71x cuBLAS against 0.79x for 128 x 128 (1024^3: 0.88x against
//     0.79x). 128 x 128 and 128 x 256 lost little there. Sector alignment is what counts, not the
//     128-byte line (ncu, 2026-12-03, 64-wide kernel alone): 1008^3 (2016-byte rows) 9.7 us and
//     41 MB like 1024^3's 9.3-9.7 us, 1016^3 (2032 bytes) 13.4 us and 61 MB like 1000^3's 13.8.
//     (Until 2026-12-03 the rule asked for 128-byte rows, which sent 1008^3 to the 128-wide tile.)
//   kReduceSlices: 4096^3 split in 2 (128 x 128, 32 slices per CTA) ran at 0.86 of the unsplit rate
//     at twice the waves: the partial's trip costs about 5 slices.
//   kMinSplitSlices: at 1000^3 (16 slices) the split lost (0.69x against 0.79x unsplit) where the
//     model predicted a gain, at 1024 x 1024 x 16384 (256 slices) it won (0.91x against 0.70x); not
//     measured in between, so splits are tried from 64 slices (K > 4032).
// Pairs where the rows of A or B are not whole 32-byte sectors (2026-12-04, after the relaxed
// cluster barriers; `gemm_bench --dispatch`, fitted on bench/results/2026-12-04_b8d364d_h200_
// relaxed_barriers.txt, the rule checked in 2026-12-04_4710a36_h200_pair_plans.txt). Each CTA of a
// pair loads half of the shared operand's boxes, so the sectors cut in two by unaligned box rows are
// fetched once per cluster, not once per CTA. On those problems (both operands cut, n % 16 == 8) the
// 128 x 64 pair sharing A beat the unpaired 128 x 64 tile everywhere (1.16-1.48x per launch), the
// 128- and 256-wide pairs from 1512^3 up (1.14-1.33x) and tied theirs at 1000^3 and 1016^3
// (0.97-1.03x): 1000^3 N/N 128 x 64 sharing A 0.85x / 0.83x cuBLAS (FP32 / FP16 out) against 0.79x
// for the unpaired 128 x 128 the rule chose before (1016^3 0.90x against 0.85x), 2008^3 128 x 256
// sharing B 0.96x against 0.74x, 3000^3 0.73x against 0.51x. Their efficiencies, on the scale of the
// unpaired 128 x 256 tile with the same rows (1.0), fitted to those shapes (the linear cost is crude
// where one short wave's fixed costs weigh, so the values are the ones that order each shape's
// candidates as measured): kEfficiencyPair256 1.25 (over the unpaired 128 x 256: 1.24-1.33 at 2008^3
// and 3000^3, 0.97-1.01 at 1000^3 to 1512^3), kEfficiencyPair128 0.95 (B-sharing or A-sharing, within
// 3% of each other everywhere; over the unpaired 128 x 128: 0.99-1.03 at 1000^3 and 1016^3,
// 1.14-1.29 from 1512^3 up), kEfficiencyPairA64 0.55. A pair is a candidate where the operand it
// shares is cut (the one its multicast saves); checked on one-operand problems (7ef694a,
// bench/results/2026-12-04_7ef694a_h200_operand_pairs.txt): B's rows only, 2008 x 2008 x 2048, the
// B-sharing 128 x 256 pair 0.99x against 0.88x unpaired; A's rows only, 2048 x 2048 x 2008, the
// unpaired 128 x 256 0.98x-1.00x against 0.90x for the 128 x 128 A pair.
// On aligned rows the pairs gained nothing beyond the spread but at 3072^3 (128 x 128 B-sharing
// 0.84x against 0.80x) and lost where K is short (U-Net up 128->64, K = 128: 0.94x against 0.97x), so
// they are no candidate there, nor are the clusters of 4 and 8 (120 resident CTAs: 1000^3 needs two
// rounds).
constexpr double kEfficiencyPair256 = 1.25;
constexpr double kEfficiencyPair128 = 0.95;
constexpr double kEfficiencyPairA64 = 0.55;
constexpr double kEfficiency128 = 0.87;
constexpr double kEfficiency64 = 0.60;
constexpr double kEfficiency64Unaligned = 0.39;
constexpr double kReduceSlices = 5.3;
constexpr int kMinSplitSlices = 64;

namespace {

/// The candidate's rate per tile relative to the 128 x 256 tile's (gemm_tma_cuda.h, tile_plan).
double plan_efficiency(TilePlan c, bool rows_aligned) {
  if (c.pair == 2) return c.width == 256 ? kEfficiencyPair256 : c.width == 128 ? kEfficiencyPair128 : kEfficiencyPairA64;
  return c.width == 256 ? 1.0 : c.width == 128 ? kEfficiency128 : rows_aligned ? kEfficiency64 : kEfficiency64Unaligned;
}

}  // namespace

TilePlan tile_plan(const GemmProblem& p, int64_t sms, int max_split, int max_pair) {
  const int64_t k_tiles = (p.K + kBlockK - 1) / kBlockK;
  // Rows of 32 bytes (16 halfs) are whole sectors; a row that is not starts every other row's boxes
  // inside a sector, which a pair that shares that operand fetches once for both CTAs.
  const bool a_cut = p.lda % 16 != 0, b_cut = p.ldb % 16 != 0;
  const bool rows_aligned = !a_cut && !b_cut;
  const bool even_rows = tile_count(p.M, 1, 1) % 2 == 0;  // B-sharing pairs take vertically adjacent tiles
  // Unpaired first, and B-sharing before A-sharing: on a tie the simpler kernel wins.
  const TilePlan candidates[] = {{256, 1},    {128, 1},          {64, 1},          {128, 2},        {64, 2},
                                 {256, 1, 2}, {128, 1, 2, false}, {128, 1, 2, true}, {64, 1, 2, true}};
  TilePlan best;
  double best_cost = INFINITY;
  for (const TilePlan& c : candidates) {
    if (c.split > max_split || (c.split > 1 && k_tiles < kMinSplitSlices)) continue;
    if (c.pair > max_pair || (c.pair > 1 && !(c.share_a ? a_cut : (b_cut && even_rows)))) continue;
    // Asked only where a split or a pair is a candidate (the first time: an occupancy query).
    const bool clustered = c.split > 1 || c.pair > 1;
    const int64_t cluster_ctas = clustered ? resident_ctas(c, "gemm_f16 (tile_plan)") : sms;
    if (clustered && cluster_ctas < 2) continue;
    const int64_t slots = std::min(sms, cluster_ctas);  // CTAs resident at once
    // Work units in CTAs: tiles x split; an A-sharing pair covers 128 x 2w, its two CTAs a tile each
    // (the last one of a tile-row may lie wholly right of C where the tile-columns are odd).
    const int64_t ctas = c.share_a ? 2 * tile_count(p.M, p.N, 2 * c.width) : tile_count(p.M, p.N, c.width) * c.split;
    const int64_t waves = (ctas + slots - 1) / slots;
    const double per_unit = static_cast<double>(c.width) / plan_efficiency(c, rows_aligned) / c.split;
    const double reduce = c.split > 1 ? kReduceSlices / static_cast<double>(k_tiles / c.split) : 0.0;
    const double cost = static_cast<double>(waves) * per_unit * (1.0 + reduce);
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

int64_t resident_ctas(TilePlan plan, const char* op) {
  check_plan(plan, op);
  if (plan.split == 1 && plan.pair == 1) return sm_count();
  // Occupancy is the same for every layout (same threads, same shared memory): N/N's.
  int clusters = 0;
  if (plan.split == 2) {
    clusters = plan.width == 128 ? resident_clusters<false, false, 128, 2, 1, false>(op)
                                 : resident_clusters<false, false, 64, 2, 1, false>(op);
  } else if (plan.pair > 2) {
    HG_FAIL(op << ": the TMA GEMM's clusters of " << plan.pair << " are the lab's (bench/gemm/lab_families.h), "
               << "not gemm_f16's");
  } else if (plan.share_a) {
    clusters = plan.width == 128 ? resident_clusters<false, false, 128, 1, 2, true>(op)
                                 : resident_clusters<false, false, 64, 1, 2, true>(op);
  } else {
    clusters = plan.width == 256 ? resident_clusters<false, false, 256, 1, 2, false>(op)
                                 : resident_clusters<false, false, 128, 1, 2, false>(op);
  }
  return static_cast<int64_t>(plan.split * plan.pair) * clusters;
}

bool operands_supported(const GemmProblem& p) {
  return tensor_map_aligned(p.A, p.lda, 2) && tensor_map_aligned(p.B, p.ldb, 2);
}

void check_plan(TilePlan plan, const char* op) {
  const bool pair_ok =
      plan.pair == 1 ? !plan.share_a
      : plan.pair == 2
          ? plan.split == 1 && (plan.share_a ? plan.width <= 128 : plan.width >= 128)
          : (plan.pair == 4 || plan.pair == 8) && plan.split == 1 && plan.share_a && plan.width == 64;
  HG_CHECK((plan.width == 256 || plan.width == 128 || plan.width == 64) &&
               (plan.split == 1 || (plan.split == 2 && plan.width <= 128)) && pair_ok,
           op << ": the TMA GEMM is built for 128 x 256, 128 x 128 and 128 x 64 tiles, the narrow two also with K "
                 "split over 2 CTAs, the wide two also in pairs sharing B, the narrow two also in pairs sharing A, "
                 "the 64-wide also in clusters of 4 or 8 sharing A; got width "
              << plan.width << ", split " << plan.split << ", pair " << plan.pair << (plan.share_a ? " sharing A" : ""));
}

void operand_maps(const GemmProblem& p, bool a_trans, bool b_trans, int tile_n, CUtensorMap* map_a, CUtensorMap* map_b,
                  const char* op, int b_box_split, int a_box_split) {
  HG_CHECK(b_box_split == 1 || a_box_split == 1, op << ": the TMA GEMM's pair shares A or B, not both");
  check_plan({tile_n, 1, b_box_split * a_box_split, a_box_split >= 2}, op);
  // MN-major A cut in more parts than its two 64-wide panels: runs of k-rows (tma_multicast_part).
  const int a_box_k = a_box_split > 2 ? kBlockK * 2 / a_box_split : kBlockK;
  operand_map(map_a, p.A, p.M, p.K, p.lda, a_trans, kBlockM / a_box_split, a_box_k, op);
  operand_map(map_b, p.B, p.N, p.K, p.ldb, !b_trans, tile_n / b_box_split, kBlockK, op);
}

void launch(const GemmProblem& p, bool a_trans, bool b_trans, Schedule schedule, const char* op, Store store,
            TilePlan plan, Launch launch_mode) {
  HG_CHECK(device_supported(op), op << ": the TMA GEMM needs a compute capability 9.0 GPU");
  HG_CHECK(operands_supported(p), op << ": the TMA GEMM needs 16-byte aligned A and B and lda, ldb multiples of 8; got lda "
                                     << p.lda << ", ldb " << p.ldb);
  check_plan(plan, op);
  HG_CHECK(plan.pair <= 2, op << ": the TMA GEMM's clusters of " << plan.pair
                              << " are the lab's (bench/gemm/lab_families.h), not gemm_f16's");
  if (plan.pair == 2 && plan.share_a) {
    if (plan.width == 128) launch_plan<128, 1, 2, true>(p, a_trans, b_trans, schedule, store, launch_mode, op);
    if (plan.width == 64) launch_plan<64, 1, 2, true>(p, a_trans, b_trans, schedule, store, launch_mode, op);
  } else if (plan.pair == 2) {
    if (plan.width == 256) launch_plan<256, 1, 2>(p, a_trans, b_trans, schedule, store, launch_mode, op);
    if (plan.width == 128) launch_plan<128, 1, 2>(p, a_trans, b_trans, schedule, store, launch_mode, op);
  } else if (plan.split == 1) {
    if (plan.width == 256) launch_plan<256, 1>(p, a_trans, b_trans, schedule, store, launch_mode, op);
    if (plan.width == 128) launch_plan<128, 1>(p, a_trans, b_trans, schedule, store, launch_mode, op);
    if (plan.width == 64) launch_plan<64, 1>(p, a_trans, b_trans, schedule, store, launch_mode, op);
  } else {
    if (plan.width == 128) launch_plan<128, 2>(p, a_trans, b_trans, schedule, store, launch_mode, op);
    if (plan.width == 64) launch_plan<64, 2>(p, a_trans, b_trans, schedule, store, launch_mode, op);
  }
}

}  // namespace halfgrad::cuda::gemm_tma
