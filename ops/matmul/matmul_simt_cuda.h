// matmul_simt_cuda.h - the FP32 GEMM that float32 matmul / linear run on CUDA (plain C++; kernel in
// matmul_simt_cuda.cu). It runs on the CUDA cores (FFMA), not on Tensor Cores: FP32 operands keep
// FP32 products (no TF32 rounding), so a float32 model on the GPU matches the CPU to FP32 rounding.
// Float16 operands go to gemm_cuda.h's Tensor Core GEMM instead.
//
//   C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, every matrix row-major with a leading
//   dimension; layouts as in gemm_cuda.h (N: stored as op(X); T: stored transposed).
#pragma once
#include <cstdint>

#include "ops/matmul/gemm_cuda.h"

namespace halfgrad::cuda {

struct GemmF32Args {
  int64_t M, N, K;
  const float* A;
  int64_t lda;
  GemmLayout a_layout;
  const float* B;
  int64_t ldb;
  GemmLayout b_layout;
  float* C;
  int64_t ldc;
  float alpha = 1;
  float beta = 0;
  const char* op = "gemm_f32";
};

/// C = alpha * op(A) * op(B) + beta * C in FP32 (beta == 0 never reads C). Any M, N, K >= 1.
void gemm_f32_simt(const GemmF32Args& args);

}  // namespace halfgrad::cuda
