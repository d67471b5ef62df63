// tma_store_epilogue.cu - rung 11 of the GEMM ladder: rung 9 (persistent, warp-specialised, TMA
// loads) with the results leaving through shared memory and TMA stores. The block function is the
// production one (ops/matmul/gemm_tma.cuh, store_tile_tma), launched with Store::kTma. Needs an
// sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: rung 9's (one CTA per SM, 1 producer + 2 consumer warpgroups, 128 x 256 tiles).
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over persistent:
//  * each consumer writes its 64 x 256 results into 8 KiB boxes of 64 rows x 128 bytes in shared
//    memory (128-byte swizzled: conflict-free float2 / half2 writes) and one thread stores each box
//    with cp.async.bulk.tensor (global <- shared, bulk_group). Rung 9's stores come straight from the
//    accumulator fragment: each warp store instruction writes 8 rows x 32 bytes (FP32) or 8 rows x
//    16 bytes (FP16, half a 32-byte sector: a read-modify-write in L2); a TMA store writes whole
//    128-byte row segments and issues from one thread.
//  * two box buffers per consumer, recycled by bulk wait_group.read, so the writing of box i + 1
//    overlaps the TMA store of box i; the consumers go on to the next tile's wgmmas while the last
//    stores drain. Shared memory: 4 x 48 KiB slots + 4 x 8 KiB boxes = 224 KiB of the 227.
// Predicted on H200: +0-3% over persistent with FP32 output (its stores already fill sectors),
// +5-10% with FP16 output in gemm_f16 (FP16 stores only half-fill sectors from the registers).
// Measured (H200, 2026-12-01): 720 TFLOP/s at 4096^3, 0.98x cuBLAS (+5% over rung 9); in gemm_f16
// (--dispatch) 0.97-1.03x at 4096^3 and 8192^3 for FP32 and FP16 output.
//
// Edges: TMA skips the parts of a box outside C; K and N multiples of 8 (TMA row strides).
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_tma_store_epilogue(const DenseGemm& g) {
  const char* op = "tma_store_epilogue";
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  cuda::gemm_tma::launch(p, false, false, cuda::gemm_tma::Schedule::kPersistent, op, cuda::gemm_tma::Store::kTma);
  return nullptr;
}

}  // namespace halfgrad::bench
