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
// Parallel mapping: one block per BM x BN tile of C (blockIdx.x over M, blockIdx.y over N); the
// warps form a kWarpsM x kWarpsN grid, each owning a (BM/kWarpsM) x (BN/kWarpsN) tile made of
// mma.sync.m16n8k16 instructions. K advances in slices of kBlockK = 32 through a kStages = 3 deep
// cp.async pipeline (two slices in flight while the third is multiplied); fragments come from shared
// memory with ldmatrix. Tiles per output-channel count N: 128x16 and 128x32 (4 warps in a column:
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
// Precision: 16-bit operands T (the kernel is a template over T = __half or __nv_bfloat16, the same
// tiles and the .f16 or .bf16 MMA), FP32 accumulation in the MMA registers, bias added in FP32, the
// result rounded once to T (round to nearest even) or stored as FP32. Instantiated for both types.
//
// Shared memory: each tile row holds kBlockK + 8 16-bit words (80 bytes): the 8 rows one ldmatrix reads then
// start at byte offsets 0, 80, 160, ... = 8 different 16-byte slots modulo 128, so the 8 row reads
// hit 32 different banks (a 64-byte row would put rows r and r+2 on the same banks).
//
// Predicted on H200 (sm_90, mma.sync, no TMA/wgmma): the 128x128 / 128x64 configurations reach
// ~60-70% of the ~700 dense FP16 mma.sync TFLOP/s on large K when the gather hits L2, so ~150-250
// TFLOP/s for the 64..256-channel 3x3x3 layers (fprop and dgrad alike); the Cout = 16 layers at 64^3
// are gather-bound (27 taps x 32 B per output pixel from L2) at ~60-100 TFLOP/s; the Cin = 1 first
// layer is element-gather bound (~0.3 ms at batch 16).
#include <algorithm>

#include "core/cuda/check.cuh"
#include "ops/conv/conv_igemm.cuh"

namespace halfgrad::ops::conv::igemm {
namespace {

constexpr int kBlockK = 32;       // K per pipeline stage: two m16n8k16 steps
constexpr int kStages = 3;        // cp.async pipeline depth
constexpr int kSmemRow = kBlockK + 8;  // 16-bit words per shared tile row; +8: conflict-free ldmatrix (header)
constexpr int kInstrM = Mma16816::kM, kInstrN = Mma16816::kN, kInstrK = Mma16816::kK;

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

template <class Cfg, typename T>
__device__ __forceinline__ void store_pair(const Epilogue& e, const int4* rows, int block_m, int m, int n, float v0,
                                           float v1, const Gather& g) {
  if (m >= g.M) return;
  const int4 row = rows[m - block_m];
  const T* bias = static_cast<const T*>(e.bias);
  for (int j = 0; j < 2; ++j) {
    const int nn = n + j;
    if (nn >= e.N) return;
    int ch;
    const int64_t off = output_offset(e, m, row, nn, ch);
    float v = j == 0 ? v0 : v1;
    if (bias) v += operand_to_float(bias[ch]);
    if (e.out_operand) static_cast<T*>(e.out)[off] = operand_from_float<T>(v);
    else static_cast<float*>(e.out)[off] = v;
  }
}

template <class Cfg, typename T, GatherKind kKind>
__global__ void __launch_bounds__(Cfg::kThreads) tc_igemm_kernel(Gather g, const T* __restrict__ B, int k_pad,
                                                                  Epilogue e, bool vector_a) {
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

  float acc[Cfg::kMmaM][Cfg::kMmaN][4];
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kMmaN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  const int num_k = (g.K + kBlockK - 1) / kBlockK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k) load_slice<Cfg, T, kKind>(g, rows, vector_a, B, k_pad, block_n, s, stage_a(s), stage_b(s));
    cp_async_commit();
  }

  for (int kt = 0; kt < num_k; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // slice kt has landed for every thread; stage (kt-1) % kStages is free again
    const int next = kt + kStages - 1;
    if (next < num_k)
      load_slice<Cfg, T, kKind>(g, rows, vector_a, B, k_pad, block_n, next, stage_a(next % kStages), stage_b(next % kStages));
    cp_async_commit();

    const T* As = stage_a(kt % kStages);
    const T* Bs = stage_b(kt % kStages);
#pragma unroll
    for (int ks = 0; ks < kBlockK / kInstrK; ++ks) {
      unsigned a[Cfg::kMmaM][4], b[Cfg::kMmaN][2];
#pragma unroll
      for (int i = 0; i < Cfg::kMmaM; ++i)
        ldmatrix_x4(a[i], As + (warp_m * Cfg::kWarpM + i * kInstrM + lane % 16) * kSmemRow + ks * kInstrK + (lane / 16) * 8);
#pragma unroll
      for (int j = 0; j < Cfg::kMmaN; j += 2) {
        unsigned r[4];
        ldmatrix_x4(r, Bs + (warp_n * Cfg::kWarpN + j * kInstrN + (lane / 16) * 8 + lane % 8) * kSmemRow + ks * kInstrK +
                           ((lane / 8) % 2) * 8);
        b[j][0] = r[0];
        b[j][1] = r[1];
        b[j + 1][0] = r[2];
        b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kMmaN; ++j) mma_m16n8k16<T>(acc[i][j], a[i], b[j]);
    }
  }
  cp_async_wait<0>();

  // Epilogue: accumulator (i, j) holds rows lane/4 and lane/4 + 8, columns 2*(lane%4) and +1.
  const bool pair_store = !e.scatter && e.N % 2 == 0;
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kMmaN; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = block_m + warp_m * Cfg::kWarpM + i * kInstrM + lane / 4 + h * 8;
        const int n = block_n + warp_n * Cfg::kWarpN + j * kInstrN + (lane % 4) * 2;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (pair_store) {
          if (m >= g.M || n >= e.N) continue;
          if (e.bias) {
            const T* bias = static_cast<const T*>(e.bias);
            v0 += operand_to_float(bias[n]);
            v1 += operand_to_float(bias[n + 1]);
          }
          const int64_t off = static_cast<int64_t>(m) * e.N + n;
          if (e.out_operand) store_operand_pair(static_cast<T*>(e.out) + off, v0, v1);
          else *reinterpret_cast<float2*>(static_cast<float*>(e.out) + off) = make_float2(v0, v1);
        } else {
          store_pair<Cfg, T>(e, rows, block_m, m, n, v0, v1, g);
        }
      }
}

template <class Cfg, GatherKind kKind, typename T>
void launch(const Gather& g, const T* B, int k_pad, const Epilogue& e, bool vector_a, const char* op) {
  auto kernel = tc_igemm_kernel<Cfg, T, kKind>;
  static const bool configured = [&] {  // opt in to > 48 KiB of dynamic shared memory, once per config
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid((g.M + Cfg::kBlockM - 1) / Cfg::kBlockM, (e.N + Cfg::kBlockN - 1) / Cfg::kBlockN);
  HG_CHECK(grid.y <= 65535, op << ": " << e.N << " GEMM columns exceed the grid");
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, cuda::stream()>>>(g, B, k_pad, e, vector_a);
  HG_CUDA_LAUNCH_CHECK(op);
}

// The tile for N output columns (file comment), on operands of type T, for one gather kind.
template <GatherKind kKind, typename T>
void launch_for_n(const Gather& g, const T* B, int k_pad, const Epilogue& e, bool vector_a, const char* op) {
  if (e.N <= 16) launch<FpropTileN16, kKind>(g, B, k_pad, e, vector_a, op);
  else if (e.N <= 32) launch<FpropTileN32, kKind>(g, B, k_pad, e, vector_a, op);
  else if (e.N <= 64) launch<FpropTileN64, kKind>(g, B, k_pad, e, vector_a, op);
  else launch<FpropTileN128, kKind>(g, B, k_pad, e, vector_a, op);
}

// The gather kind (conv_igemm.cuh) as a template argument: the U-Net's 3x3x3 stride-1 convolutions
// get the Cubic3 kernels, every other geometry the per-axis ones.
template <typename T>
void launch_for_gather(const Gather& g, const T* B, int k_pad, const Epilogue& e, bool vector_a, const char* op) {
  if (gather_kind(g) == GatherKind::Cubic3) launch_for_n<GatherKind::Cubic3>(g, B, k_pad, e, vector_a, op);
  else launch_for_n<GatherKind::PerAxis>(g, B, k_pad, e, vector_a, op);
}

}  // namespace

void tc_igemm(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e, const char* op) {
  HG_CHECK(g.M >= 1 && g.K >= 1 && e.N >= 1, op << ": implicit GEMM needs M, N, K >= 1; got M=" << g.M << " N=" << e.N
                                                 << " K=" << g.K);
  HG_CHECK(k_pad % kPadK == 0 && k_pad >= g.K, op << ": weight matrix row length " << k_pad << " must be a multiple of "
                                                  << kPadK << " and >= K=" << g.K);
  HG_CHECK(reinterpret_cast<uintptr_t>(B) % 16 == 0, op << ": weight matrix must be 16-byte aligned");
  HG_CHECK(!e.scatter || e.N == e.kd * e.kh * e.kw * e.cout,
           op << ": scatter epilogue needs N = kd kh kw * cout, got N=" << e.N << " k=(" << e.kd << ", " << e.kh << ", "
              << e.kw << ") cout=" << e.cout);
  // 16-byte chunks need 8 whole channels inside one tap, starting 16-byte aligned.
  const bool vector_a = g.c % 8 == 0 && reinterpret_cast<uintptr_t>(g.src) % 16 == 0;
  if (type == TcOperand::BFloat16) launch_for_gather(g, static_cast<const __nv_bfloat16*>(B), k_pad, e, vector_a, op);
  else launch_for_gather(g, static_cast<const __half*>(B), k_pad, e, vector_a, op);
}

}  // namespace halfgrad::ops::conv::igemm
