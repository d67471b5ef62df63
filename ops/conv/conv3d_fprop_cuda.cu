// conv3d_fprop_cuda.cu - the 16-bit (FP16 or BF16) Tensor Core implicit GEMM behind conv3d's fprop and
// dgrad and conv_transpose3d's forward (tc_igemm in conv_igemm.cuh).
//
// Math: C (M, N) = A (M, K) * B^T + bias, where A is gathered on the fly from a channels-last volume
// (conv_igemm.cuh: forward gather for fprop, transposed gather for dgrad) and B (N, K) is the weight
// reordered to KRSC by a small kernel per call (conv3d_cuda.cu):
//   fprop:   M = N*Do*Ho*Wo, N = Cout, K = T*Cin,  B[co][tap*Cin + ci]  = w[co][ci][tap]   (T = kd kh kw taps)
//   dgrad:   M = N*D*H*W,    N = Cin,  K = T*Cout, B[ci][tap*Cout + co] = w[co][ci][tap]
//            A = dy through the transposed gather (iz*sd = z + pd - a*dd per axis), so no flipped copy
//   conv_transpose3d, kernel == stride, padding 0 (the U-Net's 2x2x2 stride-2 up-convolution):
//            M = N*D*H*W of x, N = T*Cout, K = Cin (a pointwise GEMM), B[tap*Cout + co][ci] =
//            w[ci][co][tap], and the epilogue scatters column (tap, co) of row (b, z, y, x) to
//            y[b, z*kd + a, y*kh + bb, x*kw + e, co]: every output element is written exactly once.
// Layout: A's source and C are NDHWC (C row-major with N channels: the output volume itself).
//
// Parallel mapping: one block per BM x BN tile of C (blockIdx.x over M, blockIdx.y over N) and slice
// of K (blockIdx.z; one slice unless split K, below); the
// warps form a kWarpsM x kWarpsN grid, each owning a (BM/kWarpsM) x (BN/kWarpsN) tile made of
// mma.sync.m16n8k16 instructions. K advances in slices of kBlockK = 32 through a kStages = 3 deep
// cp.async pipeline (two slices in flight while the third is multiplied); fragments come from shared
// memory with ldmatrix. The pipeline (multistage_pipeline), the fragment loads and the mma loop
// (WarpFragments, WarpAccumulator) are ops/tensor_core/'s; this file's own are load_slice (the
// gather) and the epilogue. Tiles per output-channel count N: 128x16 and 128x32 (4 warps in a column:
// Cout 16 and 32 layers waste no MMA columns), 128x64 (2x2 warps), 128x128 (2x4 warps, 256 threads).
// Each block first decomposes its BM rows into (n, z0, y0, x0) once, in shared memory; a thread's
// 16-byte chunk always has the same column within a K-slice, so each slice costs one (tap, c)
// decomposition per thread and a bounds test per row.
// Tiles are named TileShapes (FpropTileN16 ... FpropTileN128 below, ops/tensor_core/tile_shape.h).
// Each kernel exists twice, for GatherKind::Cubic3 (3x3x3, stride 1, dilation 1: the U-Net's layers,
// tap decomposed by constants) and GatherKind::PerAxis (everything else); launch_for_gather picks.
//
// Channels that are not a multiple of 8 (Cin = 1 of the first layer, Cin = 3 or 17, Cout = 3): the
// 16-byte cp.async of 8 channels needs every chunk to start 16-byte aligned inside one tap, i.e.
// C % 8 == 0. Otherwise the slice is gathered element by element (2-byte loads, zeros for padding
// and past K) and stored into the same shared-memory tile, so the MMAs and the epilogue are the same
// and nothing falls off the Tensor Cores; since K = T*C is flattened across taps, a Cin = 1 3x3x3
// layer has K = 27 -> one 32-wide slice (84% useful), not 27 slices of 1 channel. B never needs
// predication: it is zero-padded to (n_pad, k_pad) when it is built. Output columns past N and rows
// past M are computed on zeros and not stored; odd N (Cout = 3) is stored element by element.
//
// Split K (conv_split_k.h has the rule and its worked figures): where the output has too few tiles for
// the SMs and K is long (the 256-channel layer at 4^3: 4 tiles, 216 K-blocks), gridDim.z = S slices;
// slice z walks the K-blocks [z * kb / S, (z + 1) * kb / S) of the kb = ceil(K / 32) (balanced; a
// slice is empty where S > kb and then writes zeros) and stores its raw FP32 sums to partial[z]
// (M, N) row-major, with no bias and no rounding. sum_slices_kernel then adds partial[0], partial[1],
// ... in that order for each element (no atomics: the same bits every run, whatever the schedule) and
// applies the epilogue through store_element, the function the unsplit epilogue's element stores use.
// S = 1 is the single kernel as it was: its epilogue and its bits are unchanged (the tests' oracle,
// ForceSplitK(1)). Split and unsplit differ in summation order only (FP32 either way).
// Reduce traffic: S x M x N x 4 bytes written by the slices and read back once (mostly from L2: 7.1 MB
// for the 256-channel layer at batch 4), M x N x 2 bytes of output.
//
// Precision: 16-bit operands T (the kernel is a template over T = __half or __nv_bfloat16, the same
// tiles and the .f16 or .bf16 MMA), FP32 accumulation in the MMA registers, bias added in FP32, the
// result rounded once to T (round to nearest even) or stored as FP32 (split K: FP32 partials, FP32
// sum of the slices, then the same bias and one rounding). Instantiated for both types.
//
// Shared memory: each tile row holds kBlockK + 8 16-bit words (80 bytes): the 8 rows one ldmatrix reads then
// start at byte offsets 0, 80, 160, ... = 8 different 16-byte slots modulo 128, so the 8 row reads
// hit 32 different banks (a 64-byte row would put rows r and r+2 on the same banks).
//
// Predicted and measured figures (before and after split K): bench/NOTES.md, "Lab notes moved out of
// the code".
#include <algorithm>

#include "core/cuda/check.cuh"
#include "ops/conv/conv_igemm.cuh"
#include "ops/tensor_core/epilogue.cuh"
#include "ops/tensor_core/pipeline.cuh"
#include "ops/tensor_core/warp_tile.cuh"
#include "ops/conv/conv_split_k.h"

namespace halfgrad::ops::conv::igemm {
namespace {

constexpr int kBlockK = 32;       // K per pipeline stage: two m16n8k16 steps
constexpr int kStages = 3;        // cp.async pipeline depth
constexpr int kSmemRow = kBlockK + 8;  // 16-bit words per shared tile row; +8: conflict-free ldmatrix (header)
constexpr int kInstrN = Mma16816::kN, kInstrK = Mma16816::kK;

/// A TileShape (ops/tensor_core/tile_shape.h) with K slices of kBlockK and kStages slots, plus this
/// kernel's shared-memory layout: padded rows of A and B per stage, then the block's row table.
template <class BlockT, class WarpT>
struct FpropTile : TileShape<BlockT, WarpT, Stages<kStages>> {
  using Base = TileShape<BlockT, WarpT, Stages<kStages>>;
  static_assert(Base::kBlockK == kBlockK, "the loaders walk K in slices of kBlockK");
  static constexpr int kStageHalfs = (Base::kBlockM + Base::kBlockN) * kSmemRow;
  static constexpr int kSmemBytes = kStages * kStageHalfs * 2 + Base::kBlockM * 16;  // + row table (int4)
  static_assert(Base::kWarpN % (2 * kInstrN) == 0, "warp tile: pairs of n8 columns (one ldmatrix.x4 of B)");
  static_assert(Base::kBlockN <= kPadN && kPadN % Base::kBlockN == 0, "B is padded to kPadN rows");
};

// The tile for N output columns (file comment): 4 warps in a column for Cout 16 and 32, then 2x2 and 2x4.
using FpropTileN16 = FpropTile<Block<128, 16, kBlockK>, Warp<32, 16>>;
using FpropTileN32 = FpropTile<Block<128, 32, kBlockK>, Warp<32, 32>>;
using FpropTileN64 = FpropTile<Block<128, 64, kBlockK>, Warp<64, 32>>;
using FpropTileN128 = FpropTile<Block<128, 128, kBlockK>, Warp<64, 32>>;

// Copies K-slice `kt` of A and B into stage buffers As, Bs.
template <class Cfg, typename T, GatherKind kKind>
__device__ __forceinline__ void load_slice(const Gather& g, const int4* rows, bool vector_a, const T* B, int k_pad,
                                           int block_n, int kt, T* As, T* Bs) {
  const int tid = threadIdx.x;
  const int k0 = kt * kBlockK;
  const T* src = static_cast<const T*>(g.src);
  if (vector_a) {
    const int kc = tid % (kBlockK / 8);  // this thread's 8-channel chunk within the slice (fixed)
    const int4 col = gather_col<kKind>(g, k0 + kc * 8);
    for (int idx = tid; idx < Cfg::kBlockM * (kBlockK / 8); idx += Cfg::kThreads) {
      const int r = idx / (kBlockK / 8);
      const int64_t off = gather_offset<kKind>(g, rows[r], col);
      cp_async_16(As + r * kSmemRow + kc * 8, off >= 0 ? src + off : src, off >= 0 ? 16 : 0);
    }
  } else {
    const int kc = tid % kBlockK;  // this thread's column within the slice (fixed)
    const int4 col = gather_col<kKind>(g, k0 + kc);
    constexpr int kPerThread = Cfg::kBlockM * kBlockK / Cfg::kThreads;
    T v[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int r = (tid + j * Cfg::kThreads) / kBlockK;
      const int64_t off = gather_offset<kKind>(g, rows[r], col);
      v[j] = off >= 0 ? src[off] : operand_from_float<T>(0.f);
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) As[((tid + j * Cfg::kThreads) / kBlockK) * kSmemRow + kc] = v[j];
  }
  for (int idx = tid; idx < Cfg::kBlockN * (kBlockK / 8); idx += Cfg::kThreads) {
    const int r = idx / (kBlockK / 8), kc = idx % (kBlockK / 8);
    cp_async_16(Bs + r * kSmemRow + kc * 8, B + static_cast<int64_t>(block_n + r) * k_pad + k0 + kc * 8, 16);
  }
}

/// C[m][n] = v (+ bias) through the epilogue e (the element's place: output_offset; row = m's gather
/// row, read only by the scatter): the element-wise store of a scatter or an odd-width output, and of
/// the split-K sum (row-major even-width outputs of the unsplit kernel go out in pairs through
/// ops/tensor_core/epilogue.cuh, with the same rounding).
template <typename T>
__device__ __forceinline__ void store_element(const Epilogue& e, int m, int4 row, int n, float v) {
  int ch;
  const int64_t off = output_offset(e, m, row, n, ch);
  if (e.bias) v += operand_to_float(static_cast<const T*>(e.bias)[ch]);
  if (e.out_operand) static_cast<T*>(e.out)[off] = operand_from_float<T>(v);
  else static_cast<float*>(e.out)[off] = v;
}

/// Results (m, n) and (m, n + 1) element by element (store_element), within the output's edges.
template <class Cfg, typename T>
__device__ __forceinline__ void store_output_pair(const Epilogue& e, const int4* rows, int block_m, int m, int n, float v0,
                                                  float v1, const Gather& g) {
  if (m >= g.M) return;
  const int4 row = rows[m - block_m];
  if (n < e.N) store_element<T>(e, m, row, n, v0);
  if (n + 1 < e.N) store_element<T>(e, m, row, n + 1, v1);
}

template <class Cfg, typename T, GatherKind kKind>
__global__ void __launch_bounds__(Cfg::kThreads) tc_igemm_kernel(Gather g, const T* __restrict__ B, int k_pad,
                                                                  Epilogue e, bool vector_a, float* __restrict__ partial) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  int4* rows = reinterpret_cast<int4*>(smem_raw + kStages * Cfg::kStageHalfs * 2);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp % Cfg::kWarpsM, warp_n = warp / Cfg::kWarpsM;
  const int block_m = blockIdx.x * Cfg::kBlockM, block_n = blockIdx.y * Cfg::kBlockN;

  for (int i = tid; i < Cfg::kBlockM; i += Cfg::kThreads) rows[i] = gather_row<kKind>(g, block_m + i);
  __syncthreads();

  auto stage_a = [&](int s) { return smem + s * Cfg::kStageHalfs; };
  auto stage_b = [&](int s) { return smem + s * Cfg::kStageHalfs + Cfg::kBlockM * kSmemRow; };

  // This block's K-blocks [kb_begin, kb_begin + num_k): all of K unsplit, slice blockIdx.z of gridDim.z
  // otherwise (balanced: slice z gets K-blocks [z * total / S, (z + 1) * total / S); empty where S > total).
  const int total_k = (g.K + kBlockK - 1) / kBlockK;
  const int kb_begin = static_cast<int>(int64_t{blockIdx.z} * total_k / gridDim.z);
  const int num_k = static_cast<int>(int64_t{blockIdx.z + 1} * total_k / gridDim.z) - kb_begin;

  // The main loop (ops/tensor_core/: the multistage schedule, the warp's fragments and mmas); what is
  // this kernel's own is load_slice, the gather. Both tiles keep K contiguous: A's rows are output
  // voxels, B's output channels.
  using Operand = SmemOperand<PaddedRows<kSmemRow>, true>;
  const LaneCoord a_at = LdmatrixX4::a<true>(lane), b_at = LdmatrixX4::b_pair<true>(lane);
  WarpAccumulator<Cfg::kMmaM, Cfg::kMmaN> acc;
  acc.zero();
  multistage_pipeline<kStages>(
      num_k,
      [&](int kt, int slot) {
        load_slice<Cfg, T, kKind>(g, rows, vector_a, B, k_pad, block_n, kb_begin + kt, stage_a(slot), stage_b(slot));
      },
      [&](int, int slot) {
        const uint32_t as = shared_address(stage_a(slot)), bs = shared_address(stage_b(slot));
#pragma unroll
        for (int ks = 0; ks < kBlockK / kInstrK; ++ks) {
          WarpFragments<Cfg::kMmaM, Cfg::kMmaN> f;
          f.template load<Operand, Operand>(as, bs, warp_m * Cfg::kWarpM, warp_n * Cfg::kWarpN, ks * kInstrK, a_at, b_at);
          acc.template mma<T>(f);
        }
      });

  if (partial) {  // split K: this slice's raw FP32 sums to partial[z] (M, N); sum_slices_kernel does the epilogue
    float* part = partial + int64_t{blockIdx.z} * g.M * e.N;
    acc.for_each_pair(lane, [&](int, int, int, int row, int col, float v0, float v1) {
      const int m = block_m + warp_m * Cfg::kWarpM + row;
      const int n = block_n + warp_n * Cfg::kWarpN + col;
      if (m >= g.M || n >= e.N) return;
      const int64_t off = static_cast<int64_t>(m) * e.N + n;  // even when N is: float2-aligned
      if (e.N % 2 == 0) {
        *reinterpret_cast<float2*>(part + off) = make_float2(v0, v1);
      } else {
        part[off] = v0;
        if (n + 1 < e.N) part[off + 1] = v1;
      }
    });
    return;
  }

  // Epilogue (unsplit): bias, rounding and the store, straight from the accumulators. A row-major
  // output of even width goes out in pairs through the Tensor Core kernels' one store
  // (ops/tensor_core/epilogue.cuh: alpha 1, beta 0, C (M, N) with ldc N); a scatter or an odd width
  // element by element (store_output_pair).
  const bool pair_store = !e.scatter && e.N % 2 == 0;
  const cuda::tensor_core::Epilogue out{e.out, e.N, 1.f, 0.f, e.out_operand, /*pair_ok=*/true, /*quad_ok=*/false,
                                  std::is_same_v<T, __nv_bfloat16>};
  acc.for_each_pair(lane, [&](int, int, int, int row, int col, float v0, float v1) {
    const int m = block_m + warp_m * Cfg::kWarpM + row;
    const int n = block_n + warp_n * Cfg::kWarpN + col;
    if (pair_store) {
      if (m >= g.M || n >= e.N) return;
      if (e.bias) {
        const T* bias = static_cast<const T*>(e.bias);
        v0 += operand_to_float(bias[n]);
        v1 += operand_to_float(bias[n + 1]);
      }
      cuda::tensor_core::store_pair(out, g.M, e.N, m, n, v0, v1);  // rounds to T (RNE) as store_element does
    } else {
      store_output_pair<Cfg, T>(e, rows, block_m, m, n, v0, v1, g);
    }
  });
}

/// Split K: partial (slices, M, N) FP32 -> C[m][n] = sum over s = 0, 1, ..., slices - 1 of partial[s][m][n],
/// added in that order (the same bits every run), then the epilogue (store_element: bias, rounding,
/// scatter). One thread per output element, grid-stride; consecutive threads read consecutive
/// floats of each slice. Memory-bound: slices x 4 + (2 or 4) bytes per element.
template <typename T>
__global__ void sum_slices_kernel(const float* __restrict__ partial, int slices, Gather g, Epilogue e) {
  const int64_t total = static_cast<int64_t>(g.M) * e.N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < slices; ++s) v += partial[s * total + i];
    const int m = static_cast<int>(i / e.N), n = static_cast<int>(i % e.N);
    const int4 row = e.scatter ? gather_row<GatherKind::PerAxis>(g, m) : make_int4(0, 0, 0, 0);  // scatter reads it
    store_element<T>(e, m, row, n, v);
  }
}

/// One instantiation of the implicit GEMM, as a tag: tile Cfg, gather kind kKind, operand type T.
template <class Cfg_, GatherKind kKind_, typename T_>
struct Config {
  using Cfg = Cfg_;
  using T = T_;
  static constexpr GatherKind kKind = kKind_;
};

// The tile for N output columns (file comment): its block N, the one place the thresholds live.
int tile_columns(int N) {
  return N <= 16 ? FpropTileN16::kBlockN : N <= 32 ? FpropTileN32::kBlockN : N <= 64 ? FpropTileN64::kBlockN : FpropTileN128::kBlockN;
}
static_assert(FpropTileN16::kBlockM == FpropTileN128::kBlockM && FpropTileN32::kBlockM == FpropTileN64::kBlockM &&
                  FpropTileN16::kBlockM == FpropTileN32::kBlockM,
              "tc_igemm_slices counts tiles of one block M");

/// f(Config<...>{}) for the instantiation that serves (g, type, N): the tile for N, the gather kind of
/// g (conv_igemm.cuh: Cubic3 for the U-Net's 3x3x3 stride-1 convolutions, PerAxis otherwise), T.
template <class F>
auto with_config(const Gather& g, TcOperand type, int N, F&& f) {
  auto by_tile = [&](auto kind, auto type_tag) {
    constexpr GatherKind kKind = decltype(kind)::value;
    using T = decltype(type_tag);
    switch (tile_columns(N)) {
      case FpropTileN16::kBlockN: return f(Config<FpropTileN16, kKind, T>{});
      case FpropTileN32::kBlockN: return f(Config<FpropTileN32, kKind, T>{});
      case FpropTileN64::kBlockN: return f(Config<FpropTileN64, kKind, T>{});
      default: return f(Config<FpropTileN128, kKind, T>{});
    }
  };
  auto by_kind = [&](auto type_tag) {
    if (gather_kind(g) == GatherKind::Cubic3)
      return by_tile(std::integral_constant<GatherKind, GatherKind::Cubic3>{}, type_tag);
    return by_tile(std::integral_constant<GatherKind, GatherKind::PerAxis>{}, type_tag);
  };
  if (type == TcOperand::BFloat16) return by_kind(__nv_bfloat16{});
  return by_kind(__half{});
}

/// Opts the kernel of C in to its > 48 KiB of dynamic shared memory, once per instantiation.
template <class C>
void configure(const char* op) {
  static const bool configured = [&] {
    const auto kernel = tc_igemm_kernel<typename C::Cfg, typename C::T, C::kKind>;
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::Cfg::kSmemBytes));
    return true;
  }();
  (void)configured;
}

/// Blocks of C's kernel resident on one SM (the occupancy calculator: its registers, threads and
/// shared memory), asked once per instantiation (one device per process, core/cuda/runtime.h).
template <class C>
int resident_blocks(const char* op) {
  configure<C>(op);
  static const int blocks = [&] {
    const auto kernel = tc_igemm_kernel<typename C::Cfg, typename C::T, C::kKind>;
    int n = 0;
    HG_CUDA_CHECK(op, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, C::Cfg::kThreads, C::Cfg::kSmemBytes));
    return std::max(n, 1);
  }();
  return blocks;
}

// One instantiation of the implicit GEMM: grid (M tiles, N tiles, slices); with slices > 1 each z
// writes its partial and sum_slices_kernel finishes.
template <class C>
void launch(C, const Gather& g, const void* B, int k_pad, const Epilogue& e, bool vector_a, float* partial, int slices,
            const char* op) {
  using Cfg = typename C::Cfg;
  using T = typename C::T;
  configure<C>(op);
  const auto kernel = tc_igemm_kernel<Cfg, T, C::kKind>;
  const dim3 grid((g.M + Cfg::kBlockM - 1) / Cfg::kBlockM, (e.N + Cfg::kBlockN - 1) / Cfg::kBlockN, slices);
  HG_CHECK(grid.y <= 65535, op << ": " << e.N << " GEMM columns exceed the grid");
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, cuda::stream()>>>(g, static_cast<const T*>(B), k_pad, e, vector_a,
                                                                    slices > 1 ? partial : nullptr);
  HG_CUDA_LAUNCH_CHECK(op);
  if (slices > 1) {
    sum_slices_kernel<T><<<cuda::grid_for(int64_t{g.M} * e.N), 256, 0, cuda::stream()>>>(partial, slices, g, e);
    HG_CUDA_LAUNCH_CHECK(op);
  }
}

}  // namespace

int tc_igemm_slices(const Gather& g, TcOperand type, const Epilogue& e, const char* op) {
  if (const int forced = forced_split_k()) return forced;
  if (g.M < 1 || g.K < 1 || e.N < 1) return 1;  // tc_igemm names the empty problem
  return with_config(g, type, e.N, [&](auto config) {
    using Cfg = typename decltype(config)::Cfg;
    const int64_t tiles = ((int64_t{g.M} + Cfg::kBlockM - 1) / Cfg::kBlockM) * ((e.N + Cfg::kBlockN - 1) / Cfg::kBlockN);
    const int64_t wave = int64_t{cuda::sm_count()} * resident_blocks<decltype(config)>(op);
    return split_k_slices(tiles, (g.K + kBlockK - 1) / kBlockK, g.M, e.N, wave);
  });
}

void tc_igemm(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e, float* partial, int slices,
              const char* op) {
  HG_CHECK(g.M >= 1 && g.K >= 1 && e.N >= 1, op << ": implicit GEMM needs M, N, K >= 1; got M=" << g.M << " N=" << e.N
                                                 << " K=" << g.K);
  HG_CHECK(slices >= 1 && slices <= 65535 && (slices == 1 || partial != nullptr),
           op << ": split K needs 1..65535 slices and, for more than one, an FP32 workspace of slices x M x N; got "
              << slices << " slices, workspace " << (partial ? "given" : "null") << " (M=" << g.M << " N=" << e.N << ")");
  HG_CHECK(k_pad % kPadK == 0 && k_pad >= g.K, op << ": weight matrix row length " << k_pad << " must be a multiple of "
                                                  << kPadK << " and >= K=" << g.K);
  HG_CHECK(reinterpret_cast<uintptr_t>(B) % 16 == 0, op << ": weight matrix must be 16-byte aligned");
  HG_CHECK(!e.scatter || e.N == e.kd * e.kh * e.kw * e.cout,
           op << ": scatter epilogue needs N = kd kh kw * cout, got N=" << e.N << " k=(" << e.kd << ", " << e.kh << ", "
              << e.kw << ") cout=" << e.cout);
  // 16-byte chunks need 8 whole channels inside one tap, starting 16-byte aligned.
  const bool vector_a = g.c % 8 == 0 && reinterpret_cast<uintptr_t>(g.src) % 16 == 0;
  with_config(g, type, e.N, [&](auto config) { launch(config, g, B, k_pad, e, vector_a, partial, slices, op); });
}

}  // namespace halfgrad::ops::conv::igemm
