// cluster_multicast.cu - rung 10 of the GEMM ladder: rung 9 (persistent, warp-specialised, TMA) with
// the CTAs paired into 2-CTA thread-block clusters that share their B tile through TMA multicast.
// Needs an sm_90 GPU; compiled for the sm_90a target only (gemm_bench_sm90a).
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping: clusters of 2 CTAs of 384 threads (1 producer + 2 consumer warpgroups, 128 x 256
// tiles), one CTA per SM, as many clusters as fit at once (cudaOccupancyMaxActiveClusters). Cluster
// c walks tile pairs c, c + #clusters, ...; pair q is tiles 2q and 2q + 1 of the grouped order, which
// are vertically adjacent (same tile_n, tile_m and tile_m + 128) when the number of tile-rows is even.
// Precision: FP16 operands, FP32 accumulation, FP32 output.
//
// What it adds over persistent:
//  * TMA multicast (cp.async.bulk.tensor ... .multicast::cluster): both CTAs of a pair need the same
//    256-wide B slice. CTA r loads B panels 2r and 2r + 1 (16 KiB) once from L2 and the TMA unit
//    writes them into the shared memory of both CTAs, completing on the full barrier at the same
//    offset in each. Per slice a CTA reads 16 KiB of A + 16 KiB of B from L2 instead of 48 KiB:
//    a third less L2 -> SM traffic, which is what limits the persistent kernel once the Tensor Cores
//    are fed (each SM pulls ~48 KiB per ~0.35 us slice, ~130 GB/s x 132 SMs = 17 TB/s of L2 reads).
//  * cluster-scope slot release: a slot of CTA r is written by both producers, so it may be refilled
//    only after the consumers of both CTAs have released it. Every consumer warpgroup arrives on the
//    empty barrier of its own CTA and, through mapa + mbarrier.arrive.release.cluster, on the peer's:
//    empty barriers count 4 arrivals. A full barrier still counts one arrival (its own producer's
//    arrive.expect_tx of 48 KiB); the peer's multicast bytes may land before that arrival, which
//    the transaction count allows (it only completes the phase once the arrival is there too).
//  * cluster barriers (barrier.cluster) after the barrier inits (the peer may multicast into this
//    CTA's memory and arrive on its barriers from the start) and before exit (it may still do so to
//    the end).
// Predicted on H200: +3-5% over persistent at 4096^3 and 8192^3 (0.98-1.08x cuBLAS); fewer clusters
// than SM pairs may fit (a cluster must sit in one GPC), which can eat the gain at 4096^3.
// Measured (H200, 2026-12-01): 562 TFLOP/s at 4096^3, 0.76x cuBLAS: 18% SLOWER than rung 9, not yet
// understood (README.md lists the candidates).
//
// Edges: M, N, K any with an even number of 128-row tile-rows (else n/a); K, N multiples of 8.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>

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

constexpr int kClusterSize = 2;
constexpr int kBPanels = gt::kBlockN / gw::kPanel;           // 4
[[maybe_unused]] constexpr int kPanelsPerCta = kBPanels / kClusterSize;        // 2
[[maybe_unused]] constexpr int kPanelBytes = gt::kBlockK * gw::kRowBytes;      // 8 KiB

__global__ void __cluster_dims__(kClusterSize, 1, 1) __launch_bounds__(gt::kThreads, 1)
    cluster_multicast_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                             int M, int N, int K, float* C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace tc = cuda::tensor_core;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const int tid = static_cast<int>(threadIdx.x);
  const int warpgroup = tid / 128;
  const uint32_t rank = tc::cluster_ctarank();
  const uint32_t peer = rank ^ 1u;
  const uint32_t smem = (cuda::gemm_tiles::shared_address(smem_raw) + 1023) & ~1023u;
  const uint32_t full_bar = smem + gt::kStages * gt::kStageBytes;
  const uint32_t empty_bar = full_bar + gt::kStages * 8;
  auto a_tile = [&](int slot) { return smem + slot * gt::kStageBytes; };
  auto b_tile = [&](int slot) { return smem + slot * gt::kStageBytes + gt::kATileBytes; };

  if (tid == 0) {
    tc::tma_prefetch_map(&map_a);
    tc::tma_prefetch_map(&map_b);
    for (int s = 0; s < gt::kStages; ++s) {
      tc::mbarrier_init(full_bar + 8 * s, 1);
      tc::mbarrier_init(empty_bar + 8 * s, gt::kConsumers * kClusterSize);
    }
    tc::fence_mbarrier_init();
  }
  tc::cluster_sync();

  const int pairs = gt::tiles_m(M) * gt::tiles_n(N) / kClusterSize;
  const int clusters = static_cast<int>(gridDim.x) / kClusterSize;
  const int first_pair = static_cast<int>(blockIdx.x) / kClusterSize;
  const int k_tiles = (K + gt::kBlockK - 1) / gt::kBlockK;

  if (warpgroup == 0) {
    tc::setmaxnreg_dec<gt::kProducerRegs>();
    if (tid == 0) {
      int it = 0;
      for (int q = first_pair; q < pairs; q += clusters) {
        int tile_m, tile_n;
        gt::tile_origin(kClusterSize * q + static_cast<int>(rank), M, N, &tile_m, &tile_n);
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int slot = it % gt::kStages;
          const uint32_t full = full_bar + 8 * slot;
          tc::mbarrier_wait(empty_bar + 8 * slot, ((it / gt::kStages) & 1) ^ 1);  // free in both CTAs
          tc::mbarrier_arrive_expect_tx(full, gt::kStageBytes);
          tc::tma_load_2d(a_tile(slot), &map_a, full, kt * gt::kBlockK, tile_m);
          for (int i = 0; i < kPanelsPerCta; ++i) {
            const int panel = kPanelsPerCta * static_cast<int>(rank) + i;
            tc::tma_load_2d_multicast(b_tile(slot) + panel * kPanelBytes, &map_b, full, tile_n + panel * gw::kPanel,
                                      kt * gt::kBlockK, static_cast<uint16_t>((1u << kClusterSize) - 1));
          }
        }
      }
    }
  } else {
    tc::setmaxnreg_inc<gt::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const bool releases = tid % 128 == 0;
    auto release = [&](int slot) {
      tc::mbarrier_arrive(empty_bar + 8 * slot);
      tc::mbarrier_arrive_cluster(empty_bar + 8 * slot, peer);
    };
    const int warp = (tid % 128) / 32;
    const int lane = tid % 32;
    const cuda::gemm_tiles::Epilogue out{C, N, 1.f, 0.f, false, true, true};
    int it = 0;
    float d[128];
    for (int q = first_pair; q < pairs; q += clusters) {
      int tile_m, tile_n;
      gt::tile_origin(kClusterSize * q + static_cast<int>(rank), M, N, &tile_m, &tile_n);
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.f;
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int slot = it % gt::kStages;
        tc::mbarrier_wait(full_bar + 8 * slot, (it / gt::kStages) & 1);
        gw::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < gt::kBlockK / gt::kInstrK; ++ks) {
          const uint64_t desc_a = gw::operand_descriptor<false>(a_tile(slot), consumer * gt::kWarpgroupM, ks);
          const uint64_t desc_b = gw::operand_descriptor<true>(b_tile(slot), 0, ks);
          gw::wgmma_m64n256k16<0, 1>(d, desc_a, desc_b);
        }
        gw::wgmma_commit();
        gw::wgmma_wait<1>();
        if (kt > 0 && releases) release((it - 1) % gt::kStages);
      }
      gw::wgmma_wait<0>();
      gw::fence_accumulators(d);
      if (releases) release((it - 1) % gt::kStages);
      const int row = tile_m + consumer * gt::kWarpgroupM + warp * 16 + lane / 4;
      const int col0 = tile_n + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        cuda::gemm_tiles::store_pair(out, M, N, row, col0 + 8 * j, d[4 * j], d[4 * j + 1]);
        cuda::gemm_tiles::store_pair(out, M, N, row + 8, col0 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
      }
    }
  }
  // Neither CTA leaves while the other may still multicast into it or arrive on its barriers.
  tc::cluster_sync();
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never launched (device_supported), loud if it were
#endif
}

}  // namespace

const char* gemm_cluster_multicast(const DenseGemm& g) {
  const char* op = "cluster_multicast";
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA, clusters)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  if (gt::tiles_m(static_cast<int>(g.M)) % kClusterSize != 0) return "needs an even number of 128-row tile-rows";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  CUtensorMap map_a, map_b;
  gt::operand_maps(p, false, false, gt::kBlockN, &map_a, &map_b, op);
  static const int max_clusters = [&] {
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(cluster_multicast_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           gt::kSmemBytes));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(cuda::sm_count()));
    config.blockDim = dim3(gt::kThreads);
    config.dynamicSmemBytes = gt::kSmemBytes;
    int clusters = 0;
    HG_CUDA_CHECK(op, cudaOccupancyMaxActiveClusters(&clusters, cluster_multicast_kernel, &config));
    return clusters;
  }();
  if (max_clusters < 1) return "no 2-CTA cluster of this kernel fits on the GPU";
  const int pairs = gt::tiles_m(p.M) * gt::tiles_n(p.N) / kClusterSize;
  const int clusters = std::min(pairs, max_clusters);
  cluster_multicast_kernel<<<static_cast<unsigned>(kClusterSize * clusters), gt::kThreads, gt::kSmemBytes,
                             cuda::stream()>>>(map_a, map_b, p.M, p.N, p.K, g.C);
  HG_CUDA_LAUNCH_CHECK(op);
  return nullptr;
}

}  // namespace halfgrad::bench
