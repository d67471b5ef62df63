// tma_mbarrier_pipeline.cu - rung 7 of the GEMM ladder: rung 6's math (wgmma.m64n256k16 from
// 128-byte-swizzled shared memory, two warpgroups on a 128 x 256 tile), with the operands brought in
// by the Tensor Memory Accelerator and the pipeline run by mbarriers instead of cp.async and
// __syncthreads. Needs an sm_90 GPU; compiled for the sm_90a target only (bench/gemm/CMakeLists.txt).
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: one 256-thread CTA per 128 x 256 tile of C = 2 warpgroups of 64 x 256 (128 FP32
// accumulators per thread); K in slices of 64 through a ring of kStages = 4 slots of 48 KiB.
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over wgmma_hopper:
//  * TMA loads (cp.async.bulk.tensor.2d, ops/tensor_core/tma.cuh): one thread issues a whole tile
//    (A: one box of 64 k x 128 m; B, N-contiguous: four boxes of 64 n x 64 k, one per MN panel),
//    described by tensor maps built on the host (ops/matmul/tensor_map.h). The hardware walks the
//    addresses, applies the 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B lands the boxes exactly in
//    the layout rung 6's descriptors read) and zero-fills what lies outside the matrix. Rung 6 spent
//    24 cp.async instructions, their address arithmetic and predicates per thread per slice; here 255
//    of 256 threads issue no load at all, and their registers and issue slots go to the math.
//  * a K-stage ring with full and empty mbarriers waited by phase parity: slot s's full barrier is
//    armed by the issuing thread with the slice's byte count (arrive.expect_tx) and completes when
//    TMA has written them; each warpgroup releases the slot of slice kt - 1 (one thread arrives on
//    its empty barrier) once wgmma.wait_group 1 says those wgmmas are done, and the issuing thread
//    refills it with slice kt + 3 after waiting on that empty barrier. No CTA-wide __syncthreads in
//    the main loop: a warpgroup waits only for the data it needs.
//  * what it lacks (rung 8): thread 0 is both the loader and a consumer, so its warpgroup stalls
//    whenever the other warpgroup is late to release a slot, and all 256 threads carry the consumer's
//    register budget.
// Predicted on H200: ~600-650 TFLOP/s at 4096^3 and 8192^3 (0.8-0.9x cuBLAS, rung 6: 546 / 558).
// Measured (H200, 2026-12-01): 553 TFLOP/s at 4096^3, 0.75x cuBLAS: no gain over rung 6 (README.md says why).
//
// Edges: M, N, K any (TMA zero-fills outside the matrix, stores are predicated), but TMA needs the
// row strides K * 2 and N * 2 bytes to be multiples of 16: K and N multiples of 8.
#include <cuda.h>
#include <cuda_runtime.h>

#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/check.cuh"
#include "ops/matmul/gemm_tma.cuh"
#include "ops/matmul/gemm_tma_cuda.h"
#include "ops/matmul/gemm_wgmma.cuh"
#include "ops/tensor_core/tma.cuh"

namespace halfgrad::bench {
namespace {

namespace gt = cuda::gemm_tma;
namespace gw = cuda::gemm_wgmma;

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 4;
constexpr int kSmemBytes = kStages * gt::kStageBytes + 2 * kStages * 8 + 1024;

__global__ void __launch_bounds__(kThreads, 1)
    tma_pipeline_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        int M, int N, int K, float* C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace tc = cuda::tensor_core;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const int tid = static_cast<int>(threadIdx.x);
  const int warpgroup = tid / 128;
  const uint32_t smem = (cuda::gemm_tiles::shared_address(smem_raw) + 1023) & ~1023u;
  const uint32_t full_bar = smem + kStages * gt::kStageBytes;
  const uint32_t empty_bar = full_bar + kStages * 8;
  auto a_tile = [&](int slot) { return smem + slot * gt::kStageBytes; };
  auto b_tile = [&](int slot) { return smem + slot * gt::kStageBytes + gt::kATileBytes; };
  int tile_m, tile_n;
  gt::tile_origin(static_cast<int>(blockIdx.x), M, N, &tile_m, &tile_n);
  const int k_tiles = (K + gt::kBlockK - 1) / gt::kBlockK;
  // Dense N/N: A is K-major, B (K, N) is MN-major.
  auto issue = [&](int slot, int kt) {
    tc::mbarrier_arrive_expect_tx(full_bar + 8 * slot, gt::kStageBytes);
    gt::tma_load_operand<gt::kBlockM, false>(a_tile(slot), &map_a, full_bar + 8 * slot, tile_m, kt * gt::kBlockK);
    gt::tma_load_operand<gt::kBlockN, true>(b_tile(slot), &map_b, full_bar + 8 * slot, tile_n, kt * gt::kBlockK);
  };

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      tc::mbarrier_init(full_bar + 8 * s, 1);
      tc::mbarrier_init(empty_bar + 8 * s, kWarpgroups);
    }
    tc::fence_mbarrier_init();
  }
  __syncthreads();
  if (tid == 0)
    for (int s = 0; s < kStages && s < k_tiles; ++s) issue(s, s);  // the ring starts full

  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int slot = kt % kStages;
    tc::mbarrier_wait(full_bar + 8 * slot, (kt / kStages) & 1);
    gw::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < gt::kBlockK / gt::kInstrK; ++ks) {
      const uint64_t desc_a = gw::operand_descriptor<false>(a_tile(slot), warpgroup * 64, ks);
      const uint64_t desc_b = gw::operand_descriptor<true>(b_tile(slot), 0, ks);
      gw::wgmma_m64n256k16<0, 1>(d, desc_a, desc_b);
    }
    gw::wgmma_commit();
    gw::wgmma_wait<1>();  // slice kt - 1's wgmmas are done reading their slot
    if (kt > 0) {
      const int prev = (kt - 1) % kStages;
      if (tid % 128 == 0) tc::mbarrier_arrive(empty_bar + 8 * prev);
      const int refill = kt - 1 + kStages;
      if (tid == 0 && refill < k_tiles) {
        tc::mbarrier_wait(empty_bar + 8 * prev, ((kt - 1) / kStages) & 1);  // both warpgroups released it
        issue(prev, refill);
      }
    }
  }
  gw::wgmma_wait<0>();
  gw::fence_accumulators(d);

  const int warp = (tid % 128) / 32;
  const int lane = tid % 32;
  const int row = tile_m + warpgroup * 64 + warp * 16 + lane / 4;
  const int col0 = tile_n + 2 * (lane % 4);
  const cuda::gemm_tiles::Epilogue out{C, N, 1.f, 0.f, false, true, true};
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    cuda::gemm_tiles::store_pair(out, M, N, row, col0 + 8 * j, d[4 * j], d[4 * j + 1]);
    cuda::gemm_tiles::store_pair(out, M, N, row + 8, col0 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never launched (device_supported), loud if it were
#endif
}

}  // namespace

const char* gemm_tma_mbarrier_pipeline(const DenseGemm& g) {
  if (!cuda::gemm_tma::device_supported("tma_mbarrier_pipeline")) return "needs an sm_90 GPU (wgmma, TMA)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  CUtensorMap map_a, map_b;
  gt::operand_maps(p, false, false, gt::kBlockN, &map_a, &map_b, "tma_mbarrier_pipeline");
  static const bool configured = [] {
    HG_CUDA_CHECK("tma_mbarrier_pipeline",
                  cudaFuncSetAttribute(tma_pipeline_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  const auto ctas = static_cast<unsigned>(gt::tiles_m(p.M) * gt::tiles_n(p.N));
  tma_pipeline_kernel<<<ctas, kThreads, kSmemBytes, cuda::stream()>>>(map_a, map_b, p.M, p.N, p.K, g.C);
  HG_CUDA_LAUNCH_CHECK("tma_mbarrier_pipeline");
  return nullptr;
}

}  // namespace halfgrad::bench
