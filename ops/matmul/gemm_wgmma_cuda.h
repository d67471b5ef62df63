// gemm_wgmma_cuda.h - the Hopper (sm_90a, wgmma) path of gemm_f16, as gemm_cuda.cu calls it. Private
// to ops/matmul/; the public API stays halfgrad::cuda::gemm_f16 (gemm_cuda.h).
#pragma once
#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::cuda::gemm_wgmma {

using gemm_tiles::GemmProblem;

/// True when the current device can run the wgmma kernel (compute capability exactly 9.0).
bool device_supported(const char* op);

/// Whether gemm_f16 should take the wgmma path for this problem: a supported device, 16-byte loads
/// (lda, ldb % 8 == 0, A and B 16-byte aligned), M, N, K multiples of 8, and 128x256 tiles for at
/// least 3/4 of the SMs (smaller problems run better on the mma.sync kernel's small tile).
bool suits(const GemmProblem& p, bool vector, int64_t sm_count, const char* op);

/// Queues the 128x256x64 wgmma kernel (gemm_wgmma.cuh) on stream(); needs suits() == true.
/// a_trans: A stored (K, M); b_trans: B stored (N, K).
void launch(const GemmProblem& p, bool a_trans, bool b_trans, const char* op);

}  // namespace halfgrad::cuda::gemm_wgmma
