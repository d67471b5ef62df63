// conv3d_wgrad_cuda.cu - the 16-bit (FP16 or BF16) Tensor Core weight gradient of conv3d (tc_wgrad in conv_igemm.cuh),
// also conv_transpose3d's weight gradient (conv3d_cuda.cu swaps the roles of x and dy).
// The "same" 3x3x3 layers with <= 32 channels (FP16/BF16) run conv3d_wgrad_halo_cuda.cu instead; this
// kernel is their oracle in tests (conv3d_wgrad_paths.h forces it).
//
// Math: dW (Cout, K) = dy^T (Cout, M) * A (M, K), K = kd kh kw*Cin ordered (tap, ci) (KRSC), where
// A = im2col(x) is gathered on the fly (the forward gather of conv_igemm.cuh) and dy (M, Cout) is the
// output gradient, channels-last, M = N*Do*Ho*Wo. The reduction runs over M, which is huge (16 * 64^3
// = 4.2M) while Cout x K is small (16 x 432 ... 256 x 6912), so M is split: split s of `splits` sums
// a contiguous range of M rows into partial[s] (Cout, K) in FP32, and conv3d_cuda.cu adds the splits
// in a fixed order (deterministic; no atomics) while permuting KRSC back to (Cout, Cin, kd, kh, kw).
//
// Parallel mapping: grid (Cout / BM, K / BN, splits); one block owns a BM x BN tile of one split's
// partial and walks its M range in slices of kBlockK = 32 rows through a 3-stage cp.async pipeline.
// Shared tiles are stored as they arrive, M-major: dy's slice (32, BM) and A's slice (32, BN) with the
// channel dimension contiguous; both MMA operands are therefore K-major ("transposed") and come out
// of shared memory with ldmatrix.trans. Warps: BM x BN = 16x128 (1x4 warps, Cout <= 16), 32x128 (1x4),
// 64x128 (2x2), 128x128 (2x4, 256 threads). A thread's 16-byte chunk of A has the same column in
// every slice, so its (tap, c) decomposition is made once; each slice decomposes the thread's rows.
// Tiles are named TileShapes (WgradTileM16 ... WgradTileM128 below, ops/tensor_core/tile_shape.h);
// each kernel exists for GatherKind::Cubic3 and GatherKind::PerAxis (conv_igemm.cuh), picked per launch.
//
// Channels that are not a multiple of 8 (Cin = 1, 3, 17; Cout = 3): that operand's slice is gathered
// element by element into the same shared tile (zeros past M, past K and in the padding), so the MMAs
// are unchanged; see conv3d_fprop_cuda.cu.
//
// Precision: 16-bit operands T (a template over T = __half or __nv_bfloat16, instantiated for both),
// FP32 accumulation in the MMA registers and FP32 partials; the final sum of the splits is FP32,
// rounded once to the weight's dtype.
//
// Shared memory: rows of BM + 8 and BN + 8 16-bit words; for widths that are multiples of 16 the +8
// makes the row stride an odd multiple of 16 bytes, so the 8 rows of an ldmatrix hit 8 different
// 16-byte bank groups.
//
// The main loop (the multistage cp.async pipeline, the fragment loads, the mma loop) is
// ops/tensor_core/'s (pipeline.cuh, warp_tile.cuh); this file's own are load_slice (the gathers of dy
// and of A) and the epilogue.
#include <algorithm>

#include "core/cuda/check.cuh"
#include "ops/conv/conv_igemm.cuh"
#include "ops/tensor_core/pipeline.cuh"
#include "ops/tensor_core/warp_tile.cuh"

namespace halfgrad::ops::conv::igemm {
namespace {

constexpr int kBlockK = 32;  // M rows per pipeline stage
constexpr int kStages = 3;
constexpr int kInstrN = Mma16816::kN, kInstrK = Mma16816::kK;

/// A TileShape (ops/tensor_core/tile_shape.h) over (Cout, K) with slices of kBlockK rows of M and
/// kStages slots, plus this kernel's shared-memory layout: padded rows of dy's and A's slices.
template <class BlockT, class WarpT>
struct WgradTile : TileShape<BlockT, WarpT, Stages<kStages>> {
  using Base = TileShape<BlockT, WarpT, Stages<kStages>>;
  static constexpr int kBlockM = Base::kBlockM, kBlockN = Base::kBlockN, kThreads = Base::kThreads;
  static_assert(Base::kBlockK == kBlockK, "the loaders walk M in slices of kBlockK rows");
  static constexpr int kRowA = kBlockM + 8, kRowB = kBlockN + 8;  // 16-bit words per shared row (header)
  static constexpr int kStageHalfs = kBlockK * (kRowA + kRowB);
  static constexpr int kSmemBytes = kStages * kStageHalfs * 2;
  static_assert(Base::kWarpN % (2 * kInstrN) == 0, "warp tile: pairs of n8 columns (one ldmatrix.x4 of B)");
  static_assert(kThreads % (kBlockN / 8) == 0 && kThreads % kBlockN == 0 && kThreads % (kBlockM / 8 > 0 ? kBlockM / 8 : 1) == 0,
                "a thread's column of A (and of dy) is the same in every slice");
};

// The tile for Cout (file comment): BM = Cout rounded up to 16, 32, 64 or 128; BN = 128 of K.
using WgradTileM16 = WgradTile<Block<16, 128, kBlockK>, Warp<16, 32>>;
using WgradTileM32 = WgradTile<Block<32, 128, kBlockK>, Warp<32, 32>>;
using WgradTileM64 = WgradTile<Block<64, 128, kBlockK>, Warp<32, 64>>;
using WgradTileM128 = WgradTile<Block<128, 128, kBlockK>, Warp<64, 32>>;

template <typename T>
struct WgradArgs {
  Gather g;
  const T* dy;       // (M, cout)
  int cout;
  float* partial;    // (splits, cout, K)
  int rows_per_split;  // a multiple of kBlockK
  bool vector_a, vector_dy;
};

template <class Cfg, typename T, GatherKind kKind>
__device__ __forceinline__ void load_slice(const WgradArgs<T>& p, int m0, int m_end, int co0, int n0, T* As, T* Bs) {
  const int tid = threadIdx.x;
  const Gather& g = p.g;
  // dy slice (kBlockK rows, BM channels) -> As
  if (p.vector_dy) {
    for (int idx = tid; idx < kBlockK * (Cfg::kBlockM / 8); idx += Cfg::kThreads) {
      const int r = idx / (Cfg::kBlockM / 8), cc = idx % (Cfg::kBlockM / 8);
      const int m = m0 + r, co = co0 + cc * 8;
      const bool ok = m < m_end && co < p.cout;
      const T* src = ok ? p.dy + static_cast<int64_t>(m) * p.cout + co : p.dy;
      cp_async_16(As + r * Cfg::kRowA + cc * 8, src, ok ? 16 : 0);
    }
  } else {
    for (int idx = tid; idx < kBlockK * Cfg::kBlockM; idx += Cfg::kThreads) {
      const int r = idx / Cfg::kBlockM, c = idx % Cfg::kBlockM;
      const int m = m0 + r, co = co0 + c;
      As[r * Cfg::kRowA + c] =
          (m < m_end && co < p.cout) ? p.dy[static_cast<int64_t>(m) * p.cout + co] : operand_from_float<T>(0.f);
    }
  }
  // A slice (kBlockK rows, BN columns of K) -> Bs
  const T* src = static_cast<const T*>(g.src);
  if (p.vector_a) {
    const int kc = tid % (Cfg::kBlockN / 8);
    const int4 col = gather_col<kKind>(g, n0 + kc * 8);
    for (int idx = tid; idx < kBlockK * (Cfg::kBlockN / 8); idx += Cfg::kThreads) {
      const int r = idx / (Cfg::kBlockN / 8);
      const int m = m0 + r;
      const int64_t off = m < m_end ? gather_offset<kKind>(g, gather_row<kKind>(g, m), col) : -1;
      cp_async_16(Bs + r * Cfg::kRowB + kc * 8, off >= 0 ? src + off : src, off >= 0 ? 16 : 0);
    }
  } else {
    const int c = tid % Cfg::kBlockN;
    const int4 col = gather_col<kKind>(g, n0 + c);
    for (int idx = tid; idx < kBlockK * Cfg::kBlockN; idx += Cfg::kThreads) {
      const int r = idx / Cfg::kBlockN;
      const int m = m0 + r;
      const int64_t off = (m < m_end && col.x >= 0) ? gather_offset<kKind>(g, gather_row<kKind>(g, m), col) : -1;
      Bs[r * Cfg::kRowB + c] = off >= 0 ? src[off] : operand_from_float<T>(0.f);
    }
  }
}

template <class Cfg, typename T, GatherKind kKind>
__global__ void __launch_bounds__(Cfg::kThreads) tc_wgrad_kernel(WgradArgs<T> p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp % Cfg::kWarpsM, warp_n = warp / Cfg::kWarpsM;
  const int co0 = blockIdx.x * Cfg::kBlockM, n0 = blockIdx.y * Cfg::kBlockN;
  const int m_begin = blockIdx.z * p.rows_per_split;
  const int m_end = min(p.g.M, m_begin + p.rows_per_split);

  auto stage_a = [&](int s) { return smem + s * Cfg::kStageHalfs; };
  auto stage_b = [&](int s) { return smem + s * Cfg::kStageHalfs + kBlockK * Cfg::kRowA; };

  // The main loop (ops/tensor_core/: the multistage schedule, the warp's fragments and mmas); what is
  // this kernel's own is load_slice, the gather. Both tiles keep the GEMM's M / N contiguous (rows are
  // k, the voxels): A (k = M rows, m = cout), B (k = M rows, n = K cols), read with ldmatrix.trans.
  using OperandA = SmemOperand<PaddedRows<Cfg::kRowA>, false>;
  using OperandB = SmemOperand<PaddedRows<Cfg::kRowB>, false>;
  const LaneCoord a_at = LdmatrixX4::a<false>(lane), b_at = LdmatrixX4::b_pair<false>(lane);
  WarpAccumulator<Cfg::kMmaM, Cfg::kMmaN> acc;
  acc.zero();
  const int num_k = m_end > m_begin ? (m_end - m_begin + kBlockK - 1) / kBlockK : 0;
  multistage_pipeline<kStages>(
      num_k,
      [&](int kt, int slot) {
        load_slice<Cfg, T, kKind>(p, m_begin + kt * kBlockK, m_end, co0, n0, stage_a(slot), stage_b(slot));
      },
      [&](int, int slot) {
        const uint32_t as = shared_address(stage_a(slot)), bs = shared_address(stage_b(slot));
#pragma unroll
        for (int ks = 0; ks < kBlockK / kInstrK; ++ks) {
          WarpFragments<Cfg::kMmaM, Cfg::kMmaN> f;
          f.template load<OperandA, OperandB>(as, bs, warp_m * Cfg::kWarpM, warp_n * Cfg::kWarpN, ks * kInstrK, a_at, b_at);
          acc.template mma<T>(f);
        }
      });

  float* out = p.partial + static_cast<int64_t>(blockIdx.z) * p.cout * p.g.K;
  acc.for_each(lane, [&](int row, int col, float v) {
    const int co = co0 + warp_m * Cfg::kWarpM + row;
    const int kk = n0 + warp_n * Cfg::kWarpN + col;
    if (co < p.cout && kk < p.g.K) out[static_cast<int64_t>(co) * p.g.K + kk] = v;
  });
}

template <class Cfg, GatherKind kKind, typename T>
void launch(const WgradArgs<T>& p, int splits, const char* op) {
  auto kernel = tc_wgrad_kernel<Cfg, T, kKind>;
  static const bool configured = [&] {
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid((p.cout + Cfg::kBlockM - 1) / Cfg::kBlockM, (p.g.K + Cfg::kBlockN - 1) / Cfg::kBlockN, splits);
  HG_CHECK(grid.y <= 65535 && grid.z <= 65535, op << ": wgrad grid (" << grid.x << ", " << grid.y << ", " << grid.z
                                                  << ") exceeds the limits");
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, cuda::stream()>>>(p);
  HG_CUDA_LAUNCH_CHECK(op);
}

int tile_m(int cout) { return cout <= 16 ? 16 : cout <= 32 ? 32 : cout <= 64 ? 64 : 128; }

template <GatherKind kKind, typename T>
void launch_for_tile(const WgradArgs<T>& p, int splits, const char* op) {
  switch (tile_m(p.cout)) {
    case 16: launch<WgradTileM16, kKind>(p, splits, op); break;
    case 32: launch<WgradTileM32, kKind>(p, splits, op); break;
    case 64: launch<WgradTileM64, kKind>(p, splits, op); break;
    default: launch<WgradTileM128, kKind>(p, splits, op); break;
  }
}

// The tile for Cout (file comment) and the gather kind, on operands of type T.
template <typename T>
void launch_for_cout(const Gather& g, const T* dy, int cout, float* partial, int splits, const char* op) {
  WgradArgs<T> p{g, dy, cout, partial, 0, false, false};
  const int per = (g.M + splits - 1) / splits;
  p.rows_per_split = (per + kBlockK - 1) / kBlockK * kBlockK;
  p.vector_a = g.c % 8 == 0 && reinterpret_cast<uintptr_t>(g.src) % 16 == 0;
  p.vector_dy = cout % 8 == 0 && reinterpret_cast<uintptr_t>(dy) % 16 == 0;
  // The gather kind (conv_igemm.cuh): Cubic3 for 3x3x3 stride-1 undilated convolutions, else PerAxis.
  if (gather_kind(g) == GatherKind::Cubic3) launch_for_tile<GatherKind::Cubic3>(p, splits, op);
  else launch_for_tile<GatherKind::PerAxis>(p, splits, op);
}

}  // namespace

int wgrad_splits(int64_t M, int cout, int K, bool tensor_cores) {
  const int64_t bm = tensor_cores ? tile_m(cout) : 64, bn = tensor_cores ? 128 : 64;
  const int64_t tiles = ((cout + bm - 1) / bm) * ((K + bn - 1) / bn);
  const int64_t target = 4LL * cuda::sm_count();  // enough blocks to fill every SM a few times
  int64_t splits = (target + tiles - 1) / tiles;
  splits = std::min<int64_t>(splits, (M + 511) / 512);  // at least 512 rows per split
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, (int64_t{16} << 20) / (int64_t{cout} * K)));  // <= 64 MiB of partials
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(splits, 65535)));
}

void tc_wgrad(const Gather& g, TcOperand type, const void* dy, int cout, float* partial, int splits, const char* op) {
  HG_CHECK(g.M >= 1 && g.K >= 1 && cout >= 1 && splits >= 1,
           op << ": wgrad needs M, K, Cout, splits >= 1; got M=" << g.M << " K=" << g.K << " Cout=" << cout << " splits=" << splits);
  HG_CHECK(!g.transposed, op << ": wgrad gathers its input with the forward gather");
  if (type == TcOperand::BFloat16) launch_for_cout(g, static_cast<const __nv_bfloat16*>(dy), cout, partial, splits, op);
  else launch_for_cout(g, static_cast<const __half*>(dy), cout, partial, splits, op);
}

}  // namespace halfgrad::ops::conv::igemm
