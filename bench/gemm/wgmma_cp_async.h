// wgmma_cp_async.h - the lab's cp.async wgmma GEMM (wgmma_cp_async.cuh), as bench/gemm/ launches it.
#pragma once
#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::cuda::gemm_wgmma {

using gemm_tiles::GemmProblem;

/// Queues the 128x256x64 cp.async wgmma kernel on stream(). Needs a compute capability 9.0 device
/// (gemm_tma::device_supported), FP16 operands with 16-byte loads (lda, ldb % 8 == 0, A and B 16-byte
/// aligned) and M, N, K multiples of 8. a_trans: A stored (K, M); b_trans: B stored (N, K).
void launch(const GemmProblem& p, bool a_trans, bool b_trans, const char* op);

}  // namespace halfgrad::cuda::gemm_wgmma
