// lab_families.h - the GEMM kernel families that gemm_f16 never chooses, kept in the lab so that
// `gemm_bench --dispatch` still measures them beside gemm_f16's own (ops/matmul/gemm_paths.h) and the
// tests still check their bits: the cp.async wgmma kernel (rung 6: bench/gemm/wgmma_cp_async.cuh), the
// TMA kernel's clusters of 4 and 8 tiles sharing A (rung 17) and its cp.async producer (rung 18:
// cp_async_producer.cuh). Built on the same pieces as production (ops/matmul/gemm_tma.cuh and
// gemm_tma_launch.cuh, ops/tensor_core/), for sm_90a only; the library halfgrad_gemm_lab
// (bench/gemm/CMakeLists.txt), which gemm_bench and the CUDA tests link. Why each is not chosen:
// bench/NOTES.md and bench/gemm/README.md (rungs 6, 17, 18).
#pragma once
#include "ops/matmul/gemm_cuda.h"

namespace halfgrad::cuda::gemm_lab {

enum class Family {
  kWgmma,          // wgmma + cp.async, 128x256, one CTA per tile (rung 6); FP16
  kTmaQuadA64,     // the TMA-store kernel on 128x64 tiles, 4 horizontally adjacent in a 4-CTA cluster,
                   // A multicast (rung 17; any M, N)
  kTmaOctA64,      // likewise with 8 tiles in an 8-CTA cluster
  kTmaCpAsync128,  // the TMA-store kernel on 128x128 tiles with the slices loaded by the producer's
                   // 128 threads with cp.async (rung 18)
  kTmaCpAsync64,   // likewise on 128x64 tiles
};

/// The family's name as `gemm_bench --dispatch` prints it: "wgmma", "quad_a_64", "oct_a_64",
/// "cp_async_128", "cp_async_64".
const char* family_name(Family family);

/// gemm_f16(args) on the lab family: the arguments checked as gemm_f16 checks them (halfgrad::Error),
/// then queued on the current stream. Returns nullptr once queued, or, launching nothing, why the
/// family cannot run this problem on this device (every family needs compute capability 9.0 and FP16;
/// the TMA ones A and B as TMA describes them; wgmma the 16-byte load path and M, N, K multiples of 8).
const char* gemm_f16_on(const GemmArgs& args, Family family);

}  // namespace halfgrad::cuda::gemm_lab
