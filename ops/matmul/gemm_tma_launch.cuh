// gemm_tma_launch.cuh - the launch of gemm_tma.cuh's warp-specialised GEMM, as templates: the
// kernel, its cluster occupancy and the launch of one (layout, tile, split, pair, producer). Included
// by ops/matmul/gemm_tma_cuda.cu, which instantiates the plans gemm_f16 can choose (gemm_tma::launch),
// and by bench/gemm/lab_families.cu, which instantiates the lab's (clusters of 4 and 8 sharing A, the
// cp.async producer). The launch itself (grid, cluster and dependent-launch attributes, tensor maps)
// is described in gemm_tma_cuda.cu's header. Private to ops/matmul/ and bench/gemm/; sm_90a targets.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ops/matmul/gemm_tma.cuh"
#include "ops/matmul/gemm_tma_cuda.h"
#include "ops/matmul/tensor_map.h"

namespace halfgrad::cuda::gemm_tma {

template <bool kATrans, bool kBTrans, int kBN, int kSplit, int kPair, bool kShareA, class Producer = TmaProducer>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_tma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_c, bool tma_store, GemmProblem p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem[];
  warp_specialized_gemm_block<kATrans, kBTrans, kBN, kSplit, kPair, kShareA, Producer>(
      p, &map_a, &map_b, tma_store ? &map_c : nullptr, smem);
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never launched (device_supported), loud if it were
#endif
}

/// How many (kSplit x kPair)-CTA clusters of this kernel can be resident at once (a cluster must fit
/// in one GPC, so fewer than #SMs / 2 may), after the kernel's shared-memory opt-in; queried once per
/// kernel.
template <bool kATrans, bool kBTrans, int kBN, int kSplit, int kPair, bool kShareA, class Producer = TmaProducer>
int resident_clusters(const char* op) {
  constexpr int kSmem = TmaTile<kBN, kSplit>::kSmemBytes;
  constexpr int kCluster = kSplit * kPair;
  auto kernel = gemm_tma_kernel<kATrans, kBTrans, kBN, kSplit, kPair, kShareA, Producer>;
  static const int clusters = [&] {
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    if (kCluster == 1) return 1;  // not a cluster launch: only the opt-in was needed
    cudaLaunchConfig_t config = {};
    // (A cluster launch's grid is a whole number of clusters: 132 SMs hold no 16.5 clusters of 8.)
    config.gridDim = dim3(static_cast<unsigned>(kCluster * std::max(1, sm_count() / kCluster)));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSmem;
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = kCluster;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int n = 0;
    HG_CUDA_CHECK(op, cudaOccupancyMaxActiveClusters(&n, kernel, &config));
    return n;
  }();
  return clusters;
}

template <bool kATrans, bool kBTrans, int kBN, int kSplit, int kPair, bool kShareA, class Producer>
void launch_layout(const GemmProblem& p, Schedule schedule, Store store, Launch launch_mode, const char* op) {
  constexpr int kSmem = TmaTile<kBN, kSplit>::kSmemBytes;
  constexpr int kCluster = kSplit * kPair;
  auto kernel = gemm_tma_kernel<kATrans, kBTrans, kBN, kSplit, kPair, kShareA, Producer>;
  HG_CHECK(kPair == 1 || kShareA || tiles_m(p.M) % 2 == 0,
           op << ": the TMA GEMM's B-sharing pair plan needs an even number of 128-row tile-rows; M = " << p.M);
  const int clusters = resident_clusters<kATrans, kBTrans, kBN, kSplit, kPair, kShareA, Producer>(op);
  // A group is one CTA (as many as SMs), or one cluster of 2 CTAs that share a tile's K (split) or
  // a pair of tiles' A or B (pair), or of 4 or 8 that share their A (cluster plans).
  const int64_t max_groups = kCluster == 1 ? sm_count() : clusters;
  HG_CHECK(max_groups >= 1, op << ": no " << kCluster << "-CTA cluster of the TMA GEMM kernel fits on this GPU");
  // (A producer that reads A and B through plain pointers ignores the maps: none are made.)
  CUtensorMap map_a = {}, map_b = {};
  if constexpr (Producer::kUsesMaps) operand_maps(p, kATrans, kBTrans, kBN, &map_a, &map_b, op, kShareA ? 1 : kPair, kShareA ? kPair : 1);
  CUtensorMap map_c = {};
  const bool tma_store = store == Store::kTma && tma_store_possible(p);
  if (tma_store) {
    MatrixTensorMap m;
    m.base = p.out.C;
    m.rows = p.M;
    m.cols = p.N;
    m.ld = p.out.ldc;
    m.dtype = p.out.c_half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    m.box_cols = p.out.c_half ? 64 : 32;  // 128 bytes: the swizzle span
    m.box_rows = kStoreBoxRows;
    m.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    encode_tensor_map(&map_c, m, op);
  }
  // Tiles, or tile pairs: vertical ones (sharing B), or 128 x kPair * kBN units (sharing A).
  const int64_t units = kShareA ? tile_count(p.M, p.N, kPair * kBN) : tile_count(p.M, p.N, kBN) / kPair;
  const int64_t groups = schedule == Schedule::kPersistent ? std::min<int64_t>(units, max_groups) : units;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(groups * kCluster));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream();
  cudaLaunchAttribute attrs[2];
  unsigned n_attrs = 0;
  if (kCluster > 1) {
    cudaLaunchAttribute& cluster = attrs[n_attrs++];
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = kCluster;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
  }
  if (launch_mode == Launch::kDependent) {
    cudaLaunchAttribute& dependent = attrs[n_attrs++];
    dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent.val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attrs;
  config.numAttrs = n_attrs;
  HG_CUDA_CHECK(op, cudaLaunchKernelEx(&config, kernel, map_a, map_b, map_c, tma_store, p));
  HG_CUDA_LAUNCH_CHECK(op);
}

template <int kBN, int kSplit, int kPair = 1, bool kShareA = false, class Producer = TmaProducer>
void launch_plan(const GemmProblem& p, bool a_trans, bool b_trans, Schedule schedule, Store store, Launch launch_mode,
                 const char* op) {
  constexpr int S = kSplit, P = kPair;
  constexpr bool A = kShareA;
  using C = Producer;
  if (!a_trans && !b_trans) launch_layout<false, false, kBN, S, P, A, C>(p, schedule, store, launch_mode, op);
  if (!a_trans && b_trans) launch_layout<false, true, kBN, S, P, A, C>(p, schedule, store, launch_mode, op);
  if (a_trans && !b_trans) launch_layout<true, false, kBN, S, P, A, C>(p, schedule, store, launch_mode, op);
  if (a_trans && b_trans) launch_layout<true, true, kBN, S, P, A, C>(p, schedule, store, launch_mode, op);
}


}  // namespace halfgrad::cuda::gemm_tma
