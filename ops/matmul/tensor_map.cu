// tensor_map.cu - host side of tensor_map.h: the cached driver entry point and the checks around
// cuTensorMapEncodeTiled (CUDA driver API reference, "Tensor Map Object Management": global address
// 16-byte aligned, strides multiples of 16 bytes, box sides <= 256, inner box side * element size
// <= the swizzle span). Host code only; compiled with the other ops/*.cu for every target.
#include "ops/matmul/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <mutex>

#include "core/error.h"

namespace halfgrad::cuda {
namespace {

int element_bytes(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
      return 4;
    default:
      return 0;
  }
}

int swizzle_span(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B:
      return 128;
    default:
      return 0;  // none: any width
  }
}

/// cuTensorMapEncodeTiled from the driver, looked up once (thread-safe), or nullptr with `why`.
PFN_cuTensorMapEncodeTiled_v12000 encode_function(const char** why) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static const char* failure = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess) {
      failure = cudaGetErrorString(err);
      cudaGetLastError();  // the lookup's error is reported here, not left for the next launch check
    } else if (found != cudaDriverEntryPointSuccess || p == nullptr) {
      failure = "the driver has no cuTensorMapEncodeTiled (needs a CUDA 12.0+ driver)";
    } else {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
  });
  *why = failure;
  return fn;
}

}  // namespace

bool tensor_map_aligned(const void* base, int64_t ld, int element_bytes) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * element_bytes) % 16 == 0;
}

void encode_tensor_map(CUtensorMap* map, const MatrixTensorMap& m, const char* op) {
  const int eb = element_bytes(m.dtype);
  HG_CHECK(eb != 0, op << ": tensor map: unsupported element type " << static_cast<int>(m.dtype));
  HG_CHECK(m.rows >= 1 && m.cols >= 1 && m.rows < (int64_t(1) << 31) && m.cols < (int64_t(1) << 31),
           op << ": tensor map: matrix " << m.rows << " x " << m.cols << " outside 1 .. 2^31 - 1");
  HG_CHECK(m.ld >= m.cols, op << ": tensor map: ld " << m.ld << " < cols " << m.cols);
  HG_CHECK(tensor_map_aligned(m.base, m.ld, eb),
           op << ": tensor map: TMA needs a 16-byte aligned base and a row stride that is a multiple of 16 bytes; got base "
              << m.base << ", ld " << m.ld << " x " << eb << " bytes");
  HG_CHECK(m.box_cols >= 1 && m.box_cols <= 256 && m.box_rows >= 1 && m.box_rows <= 256,
           op << ": tensor map: box " << m.box_cols << " x " << m.box_rows << " outside 1..256 per side");
  const int span = swizzle_span(m.swizzle);
  HG_CHECK(span == 0 || m.box_cols * eb <= span, op << ": tensor map: a box row of " << m.box_cols * eb
                                                     << " bytes is wider than the " << span << "-byte swizzle");
  HG_CHECK((m.box_cols * eb) % 16 == 0, op << ": tensor map: a box row of " << m.box_cols * eb
                                           << " bytes is not a multiple of 16 bytes");
  const char* why = nullptr;
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function(&why);
  HG_CHECK(encode != nullptr, op << ": tensor map: cannot get cuTensorMapEncodeTiled from the driver: " << why);

  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(m.cols), static_cast<cuuint64_t>(m.rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(m.ld * eb)};  // bytes, dimension 1 only
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(m.box_cols), static_cast<cuuint32_t>(m.box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, m.dtype, 2, const_cast<void*>(m.base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, m.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HG_CHECK(r == CUDA_SUCCESS, op << ": cuTensorMapEncodeTiled failed (CUresult " << static_cast<int>(r) << ") for "
                                 << m.rows << " x " << m.cols << " ld " << m.ld << " box " << m.box_cols << " x "
                                 << m.box_rows);
}

}  // namespace halfgrad::cuda
