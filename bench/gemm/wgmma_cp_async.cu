// wgmma_cp_async.cu - launches the lab's cp.async warpgroup-MMA block of wgmma_cp_async.cuh (math,
// layouts, mapping, pipeline and precision are described there): rung 6 (wgmma_hopper.cu) and the
// "wgmma" family of `gemm_bench --dispatch` (lab_families.cu).
//
// Math: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, C row-major, every N/T layout.
// Mapping: one 256-thread block (2 warpgroups of 64 x 256) per 128 x 256 tile of C, one block per SM
// (192 KiB of shared memory). Precision: FP16 operands, FP32 accumulation, FP32 or FP16 output.
//
// Build: this file must be compiled for the sm_90a target only (wgmma and its descriptors exist only
// there): CMake puts it in its own object library with CUDA_ARCHITECTURES 90a-real. If it is ever
// compiled for another target, the kernel body becomes a trap (loud, never a silent wrong result),
// and its callers only call launch() on a compute capability 9.0 device (gemm_tma::device_supported).
#include "bench/gemm/wgmma_cp_async.h"

#include "bench/gemm/wgmma_cp_async.cuh"
#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"

namespace halfgrad::cuda::gemm_wgmma {
namespace {

template <bool kATrans, bool kBTrans>
__global__ void __launch_bounds__(kThreads, 1) gemm_wgmma_kernel(GemmProblem p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem[];
  wgmma_gemm_block<kATrans, kBTrans>(p, smem);
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never launched (device_supported), loud if it were
#endif
}

template <bool kATrans, bool kBTrans>
void launch_layout(const GemmProblem& p, const char* op) {
  auto kernel = gemm_wgmma_kernel<kATrans, kBTrans>;
  static const bool configured = [&] {
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  const auto blocks = static_cast<unsigned>(tile_count(p.M, p.N));
  kernel<<<blocks, kThreads, kSmemBytes, stream()>>>(p);
  HG_CUDA_LAUNCH_CHECK(op);
}

}  // namespace

void launch(const GemmProblem& p, bool a_trans, bool b_trans, const char* op) {
  if (!a_trans && !b_trans) launch_layout<false, false>(p, op);
  if (!a_trans && b_trans) launch_layout<false, true>(p, op);
  if (a_trans && !b_trans) launch_layout<true, false>(p, op);
  if (a_trans && b_trans) launch_layout<true, true>(p, op);
}

}  // namespace halfgrad::cuda::gemm_wgmma
