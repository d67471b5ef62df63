// tensor_map.h - building the TMA descriptors (CUtensorMap) of row-major matrices on the host, for
// the Hopper GEMM kernels (ops/matmul/gemm_tma.cuh, bench/gemm/tma_*.cu ...). Private to
// ops/matmul/ and bench/gemm/; include only from CUDA translation units.
//
// cuTensorMapEncodeTiled is a CUDA *driver* API function. halfgrad does not link libcuda (CI builds and
// loads every program on machines without a driver), so the function is looked up once, at the first
// call, through the runtime's cudaGetDriverEntryPointByVersion and cached. Without a driver, or with
// one older than CUDA 12.0, the first call throws a halfgrad::Error that says so.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only)

#include <cstdint>

namespace halfgrad::cuda {

/// What a 2D tensor map describes: a row-major matrix of `rows` x `cols` elements of `dtype`
/// (FLOAT16 or FLOAT32), `ld` elements from one row start to the next, and the box that one TMA
/// instruction moves: box_cols (innermost, contiguous) x box_rows elements, landing in shared memory
/// row after row with the given swizzle (SWIZZLE_128B: box_cols * element size must be <= 128).
struct MatrixTensorMap {
  const void* base;
  int64_t rows, cols, ld;
  CUtensorMapDataType dtype;
  int box_cols, box_rows;
  CUtensorMapSwizzle swizzle;
};

/// Encodes `m` into `*map`. Throws halfgrad::Error naming `op` when TMA cannot describe it: base not
/// 16-byte aligned, ld * element size not a multiple of 16 bytes, ld < cols, extents < 1 or >= 2^31,
/// a box side outside 1..256, a swizzled box row wider than the swizzle span, no driver, or the
/// driver's own CUresult.
void encode_tensor_map(CUtensorMap* map, const MatrixTensorMap& m, const char* op);

/// Whether encode_tensor_map accepts a matrix at `base` with leading dimension `ld` of elements of
/// `element_bytes` (the alignment conditions only; no driver call).
bool tensor_map_aligned(const void* base, int64_t ld, int element_bytes);

}  // namespace halfgrad::cuda
