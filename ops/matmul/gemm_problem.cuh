// gemm_problem.cuh - gemm_f16's checks of its arguments and the kernels' problem made from them, for
// the code that launches gemm_f16's kernels by other routes (bench/gemm/lab_families.cu: the lab's
// families). Private to ops/matmul/ and bench/gemm/.
#pragma once
#include "ops/matmul/gemm_cuda.h"
#include "ops/matmul/gemm_mma_tiles.cuh"

namespace halfgrad::cuda {

/// Checks a's extents (>= 1, within int32 with a tile's margin), pointers (not null) and leading
/// dimensions (at least the rows' widths) as gemm_f16 does, throwing halfgrad::Error naming op, and
/// returns them as the kernels' problem (with the output's pair / quad store alignment worked out).
gemm_tiles::GemmProblem checked_gemm_problem(const GemmArgs& a, const char* op);

/// Whether A and B take the 16-byte load path: lda and ldb multiples of 8 halfs, A and B 16-byte aligned.
bool gemm_vector_loads(const GemmArgs& a);

}  // namespace halfgrad::cuda
