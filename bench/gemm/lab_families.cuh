// lab_families.cuh - the lab's TMA launches on the kernels' problem (gemm_tiles::GemmProblem), for the
// ladder's rungs 17 and 18 (multicast_a_cluster.cu, cp_async_producer.cu); lab_families.h is the
// GemmArgs-level view. Persistent launches, queued serially. Needs gemm_tma::device_supported() and
// gemm_tma::operands_supported(p) (checked: halfgrad::Error naming op).
#pragma once
#include <cstdint>

#include "ops/matmul/gemm_mma_tiles.cuh"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::cuda::gemm_lab {

/// 128 x 64 tiles, `tiles` (4 or 8) horizontally adjacent ones in one cluster sharing A's slices by
/// TMA multicast (rung 17). Throws when no such cluster fits on the GPU.
void launch_tma_cluster(const gemm_tiles::GemmProblem& p, bool a_trans, bool b_trans, int tiles,
                        gemm_tma::Store store, const char* op);
/// How many CTAs of launch_tma_cluster's kernel (`tiles` 4 or 8) can be resident at once.
int64_t cluster_resident_ctas(int tiles, const char* op);
/// Unclustered 128 x width tiles (width 128 or 64) whose slices the producer's 128 threads load with
/// cp.async (rung 18, cp_async_producer.cuh).
void launch_tma_cp_async(const gemm_tiles::GemmProblem& p, bool a_trans, bool b_trans, int width,
                         gemm_tma::Store store, const char* op);

}  // namespace halfgrad::cuda::gemm_lab
