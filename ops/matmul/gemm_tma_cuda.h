// gemm_tma_cuda.h - the warp-specialised TMA path of gemm_f16 on Hopper (sm_90a; device code in
// gemm_tma.cuh), as gemm_cuda.cu and the ladder rungs bench/gemm/warp_specialized.cu and
// persistent.cu call it. Private to ops/matmul/ and bench/gemm/; the public API stays
// halfgrad::cuda::gemm_f16 (gemm_cuda.h).
#pragma once
#include <cuda.h>  // CUtensorMap (a type only)

#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::cuda::gemm_tma {

using gemm_tiles::GemmProblem;

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

/// The TMA kernel's tile width (256, 128 or 64 columns; 128 rows) for an M x N problem on `sms` SMs:
/// gemm_f16's choice and rung 12 (bench/gemm/README.md). A persistent CTA takes ceil(tiles / sms)
/// tiles in turn, and a tile of width w costs about w / efficiency(w) (the narrow tiles do the same
/// MMAs with more barrier waits and operand bytes per FLOP), so the estimate is
/// waves(w) * w / efficiency(w); the least wins, the wider on a tie. The efficiencies
/// (gemm_tma_cuda.cu) are the narrow tiles' per-tile rates relative to the 256-wide one, from
/// `gemm_bench --dispatch` on the H200.
int tile_width(int64_t M, int64_t N, int64_t sms);

/// Throws halfgrad::Error naming op unless tile_n is a width the kernel is built for (256, 128, 64).
void check_tile_width(int tile_n, const char* op);

/// Queues the kernel on stream() with 128 x tile_n tiles (gemm_tma.cuh's TmaTile: 256, 128 or 64).
/// a_trans: A stored (K, M); b_trans: B stored (N, K). Needs gemm_wgmma::device_supported(),
/// operands_supported(p) and a built tile width (checked: halfgrad::Error naming op).
void launch(const GemmProblem& p, bool a_trans, bool b_trans, Schedule schedule, const char* op,
            Store store = Store::kRegisters, int tile_n = 256);

/// The tensor maps of A and B as gemm_tma.cuh's tma_load_operand reads them into 64-wide K slices of
/// 128 x tile_n tiles (128-byte swizzle; box 64 k x 128 (A) / tile_n (B) rows for a K-major operand,
/// 64 x 64 for an MN-major one). Throws halfgrad::Error naming op when operands_supported(p) is false
/// or tile_n is not 256, 128 or 64.
void operand_maps(const GemmProblem& p, bool a_trans, bool b_trans, int tile_n, CUtensorMap* map_a,
                  CUtensorMap* map_b, const char* op);

}  // namespace halfgrad::cuda::gemm_tma
