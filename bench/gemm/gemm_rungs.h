// gemm_rungs.h - the rungs of the FP16 Tensor Core GEMM ladder (one .cu each in this folder), as
// gemm_bench.cu calls them. Every rung computes the same thing on the same data:
//   C (M, N) = A (M, K) * B (K, N), all row-major and dense (lda = K, ldb = N, ldc = N),
//   A and B FP16 (uint16_t bit patterns), C FP32, FP32 accumulation.
// A rung returns nullptr after queueing its kernel on halfgrad::cuda::stream(), or, launching
// nothing, the reason it cannot run this shape (each rung states what it needs in its header).
#pragma once
#include <cstdint>

namespace halfgrad::bench {

struct DenseGemm {
  int64_t M, N, K;
  const uint16_t* A;  // (M, K)
  const uint16_t* B;  // (K, N)
  float* C;           // (M, N)
};

const char* gemm_wmma_global(const DenseGemm& g);
const char* gemm_wmma_smem_tiled(const DenseGemm& g);
const char* gemm_mma_cp_async_pipeline(const DenseGemm& g);
const char* gemm_mma_ldmatrix_swizzle(const DenseGemm& g);
const char* gemm_mma_warp_tiled(const DenseGemm& g);
const char* gemm_wgmma_hopper(const DenseGemm& g);  // sm_90 only
const char* gemm_tma_mbarrier_pipeline(const DenseGemm& g);  // sm_90 only
const char* gemm_warp_specialized(const DenseGemm& g);       // sm_90 only
const char* gemm_persistent(const DenseGemm& g);             // sm_90 only
const char* gemm_cluster_multicast(const DenseGemm& g);      // sm_90 only
const char* gemm_tma_store_epilogue(const DenseGemm& g);     // sm_90 only
const char* gemm_tile_width(const DenseGemm& g);             // sm_90 only
const char* gemm_split_k_cluster(const DenseGemm& g);        // sm_90 only
const char* gemm_multicast_pair(const DenseGemm& g);         // sm_90 only
const char* gemm_dependent_launch(const DenseGemm& g);       // sm_90 only
const char* gemm_multicast_a_pair(const DenseGemm& g);       // sm_90 only
const char* gemm_multicast_a_cluster(const DenseGemm& g);    // sm_90 only
const char* gemm_cp_async_producer(const DenseGemm& g);      // sm_90 only

}  // namespace halfgrad::bench
