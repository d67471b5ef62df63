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

/// How the CTAs cover the tiles: one CTA per 128 x 256 tile (kPerTile, rung 8), or one CTA per SM
/// each walking tiles in the grouped order (kPersistent, rung 9 and production).
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

/// Output tiles (128 x 256) of an M x N problem.
int64_t tile_count(int64_t M, int64_t N);

/// Queues the kernel on stream(). a_trans: A stored (K, M); b_trans: B stored (N, K). Needs
/// gemm_wgmma::device_supported() and operands_supported(p) (checked: halfgrad::Error naming op).
void launch(const GemmProblem& p, bool a_trans, bool b_trans, Schedule schedule, const char* op,
            Store store = Store::kRegisters);

/// The tensor maps of A and B as gemm_tma.cuh's tma_load_operand reads them into 64-wide K slices of
/// 128 x 256 tiles (128-byte swizzle; box 64 k x 128 / 256 rows for a K-major operand, 64 x 64 for
/// an MN-major one). Throws halfgrad::Error naming op when operands_supported(p) is false.
void operand_maps(const GemmProblem& p, bool a_trans, bool b_trans, CUtensorMap* map_a, CUtensorMap* map_b,
                  const char* op);

}  // namespace halfgrad::cuda::gemm_tma
