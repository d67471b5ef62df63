// dense_problem.cuh - the GemmProblem (ops/matmul/gemm_mma_tiles.cuh) of a rung's dense N/N problem
// (gemm_rungs.h): A (M, K) with lda = K, B (K, N) with ldb = N, C FP32 with ldc = N, alpha 1, beta 0.
// The rungs that launch a production block function (5, 6, 7-13) all describe their problem so.
#pragma once
#include "bench/gemm/gemm_rungs.h"
#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::bench {

inline cuda::gemm_tiles::GemmProblem dense_problem(const DenseGemm& g) {
  cuda::gemm_tiles::GemmProblem p{};
  p.M = static_cast<int>(g.M);
  p.N = static_cast<int>(g.N);
  p.K = static_cast<int>(g.K);
  p.A = g.A;
  p.lda = g.K;
  p.B = g.B;
  p.ldb = g.N;
  // cudaMalloc'd C: 2- and 4-element stores are aligned when the row length allows them.
  p.out = {g.C, g.N, 1.f, 0.f, false, g.N % 2 == 0, g.N % 4 == 0};
  return p;
}

}  // namespace halfgrad::bench
