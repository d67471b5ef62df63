// gemm_cuda.cu - the FP16 / BF16 Tensor Core GEMM behind gemm_cuda.h.
//
// Math: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, C row-major; op() is the identity
// for layout N and the transpose for layout T (shapes and leading dimensions: gemm_cuda.h). There is
// no backward here: the autograd ops build dA = dC op(B)^T and dB = op(A)^T dC from this same call by
// choosing the layouts, which is why all four N/T combinations are served.
//
// Parallel mapping (ops/matmul/gemm_mma_tiles.cuh, one block function for every tile shape): large
// problems get one 256-thread block per 256x128 tile of C, 8 warps in a 4x2 grid, each warp a
// 64x64 tile made of 4x8 mma.sync.m16n8k16 instructions, one block per SM; the results leave through
// shared memory as whole-row 16-byte (FP32) / 8-byte (FP16) stores. Problems too small to give
// every SM two such tiles get one 128-thread block per 64x128 tile, 4 warps (2x2) of 32x64, two
// blocks per SM (at 1024^3: 128 blocks instead of 32). Both: K in slices of 32 through a 4-stage
// cp.async pipeline into XOR-swizzled shared memory, fragments read with ldmatrix (.trans for an
// M- or N-contiguous tile) and double-buffered in registers; blocks rasterised in groups of 8
// tile-rows for L2 reuse. The shapes were chosen by `gemm_bench --sweep` (bench/gemm/README.md).
//
// Precision: FP16 operands, FP32 accumulation in the mma registers, alpha/beta applied in FP32,
// output written as FP32 or rounded once to FP16 (__float2half_rn, round to nearest even). BF16
// operands (GemmArgs::bf16) run the same kernels with mma.sync's .bf16 type and a BF16 (or FP32)
// output (__float2bfloat16_rn); loads and ldmatrix move 16-bit words either way.
//
// Edges by predication, not padding: a tile that sticks out of the matrix (M, N not multiples of
// the tile, K not a multiple of 32, K as small as 1) loads zeros for the missing elements straight
// into shared memory (cp.async with a source size of 0..16 bytes zero-fills the rest), and the
// epilogue skips stores outside C. Zero-padding the operands to tile multiples instead would cost an
// extra allocation and an extra read+write pass over A and B (and a copy back for C), all for the
// sake of the last tile; predication costs a compare per 16-byte copy.
//
// Hopper: on a compute capability 9.0 GPU, FP16 problems whose operands TMA can describe (A and B
// 16-byte aligned, lda and ldb multiples of 8; any M, N, K) run on the persistent warp-specialised
// TMA kernel (ops/matmul/gemm_tma.cuh: TMA loads, an mbarrier ring, a producer warpgroup and two
// wgmma consumer warpgroups, all four N/T layouts), with its TMA-store epilogue when beta == 0 and C
// is 16-byte aligned with a 16-byte row stride, on 128x256, 128x128 or 128x64 tiles, the narrow ones
// with K optionally split over a 2-CTA cluster, and, where the rows of A or B are not whole 32-byte
// sectors, tiles paired in a 2-CTA cluster that multicasts their common B (or A) slice (the plan that
// occupies the SMs best, gemm_tma::tile_plan; gemm_f16_choice names it); otherwise (beta != 0: C read in the epilogue, or an
// unaligned C) on 128x256 tiles only where that measured faster than mma.sync (hopper_path).
// mma.sync tops out near half of Hopper's Tensor Core rate. The older cp.async wgmma kernel (rung 6)
// won no measured shape and lives in the lab now (bench/gemm/lab_families.h). Everything else
// takes the kernels below, and so does every BF16 problem: the Hopper kernels are FP16-only for now
// (their descriptors and instruction would need the .bf16 variant and its own measurement).
//
// Two load paths, chosen per call: 16-byte cp.async when lda, ldb are multiples of 8 halfs and A, B
// are 16-byte aligned (every 16-byte chunk then starts aligned); otherwise 2-byte loads and 2-byte shared
// stores (any leading dimension, any alignment; same Tensor Core math, but synchronous loads, so
// slower).
#include "ops/matmul/gemm_cuda.h"

#include <climits>
#include <string>

#include "core/cuda/check.cuh"
#include "ops/matmul/gemm_mma_tiles.cuh"
#include "ops/matmul/gemm_paths.h"
#include "ops/matmul/gemm_problem.cuh"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::cuda {
namespace {

using gemm_tiles::GemmProblem;
using gemm_tiles::GemmTileShape;

// The two tile shapes gemm_f16 chooses between (measured by `gemm_bench --sweep`, bench/gemm/README.md).
//   LargeTile: 256x128x32, 8 warps 64x64, staged epilogue; 0.52-0.53x cuBLAS in the sweep's run
//     (128x256 measured 0.49-0.52x, every 2-blocks/SM and K=64 shape lower).
//   SmallTile: 64x128x32, 4 warps 32x64, 2 blocks/SM; when LargeTile would leave SMs idle (fewer
//     than kMinWavesForLarge blocks per SM): 0.60x at 1024^3 where LargeTile gives 0.33x.
using gemm_tiles::Block;
using gemm_tiles::MinBlocksPerSm;
using gemm_tiles::StagedEpilogue;
using gemm_tiles::Stages;
using gemm_tiles::Warp;
using LargeTile = GemmTileShape<Block<256, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>, StagedEpilogue>;
using SmallTile = GemmTileShape<Block<64, 128, 32>, Warp<32, 64>, Stages<4>, MinBlocksPerSm<2>>;
constexpr int64_t kMinWavesForLarge = 2;

template <class S, bool kATrans, bool kBTrans, bool kVector, bool kBf16>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks) gemm_f16_kernel(GemmProblem p) {
  extern __shared__ __align__(128) uint16_t smem[];
  gemm_tiles::warp_tiled_gemm_block<S, kATrans, kBTrans, kVector, kBf16>(p, smem);
}

template <class S, bool kATrans, bool kBTrans, bool kVector, bool kBf16>
void launch(const GemmProblem& p, const char* op) {
  auto kernel = gemm_f16_kernel<S, kATrans, kBTrans, kVector, kBf16>;
  // Opt in to more than 48 KiB of dynamic shared memory once per instantiation.
  static const bool configured = [&] {
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes));
    return true;
  }();
  (void)configured;
  const auto blocks = static_cast<unsigned>(gemm_tiles::gemm_tile_count<S>(p.M, p.N));
  kernel<<<blocks, S::kThreads, S::kSmemBytes, stream()>>>(p);
  HG_CUDA_LAUNCH_CHECK(op);
}

template <class S, bool kBf16>
void launch_layouts(const GemmProblem& p, bool at, bool bt, bool vector, const char* op) {
  if (vector) {
    if (!at && !bt) launch<S, false, false, true, kBf16>(p, op);
    if (!at && bt) launch<S, false, true, true, kBf16>(p, op);
    if (at && !bt) launch<S, true, false, true, kBf16>(p, op);
    if (at && bt) launch<S, true, true, true, kBf16>(p, op);
  } else {
    if (!at && !bt) launch<S, false, false, false, kBf16>(p, op);
    if (!at && bt) launch<S, false, true, false, kBf16>(p, op);
    if (at && !bt) launch<S, true, false, false, kBf16>(p, op);
    if (at && bt) launch<S, true, true, false, kBf16>(p, op);
  }
}

template <class S>
void launch_shape(const GemmProblem& p, bool at, bool bt, bool vector, bool bf16, const char* op) {
  if (bf16) launch_layouts<S, true>(p, at, bt, vector, op);
  else launch_layouts<S, false>(p, at, bt, vector, op);
}

/// Which Hopper family serves a problem the TMA kernel can take. With beta == 0 the TMA-store
/// epilogue (kTmaPlanned, on gemm_tma::tile_plan's tile width, split and pair) was the best family on
/// every shape `gemm_bench --dispatch` measures. With beta != 0 C has to be read (and TMA cannot store
/// a C whose base or row stride is not 16-byte aligned), so the epilogue runs from the registers: that
/// variant wins only with many tiles and a long K (the K >= 256 bound lies between measured shapes);
/// elsewhere mma.sync does. The measurements: bench/NOTES.md, "Lab notes moved out of the code".
GemmPath hopper_path(const GemmProblem& p, int64_t sms) {
  if (gemm_tma::tma_store_possible(p)) return GemmPath::kTmaPlanned;
  const bool many_tiles = 2 * gemm_tma::tile_count(p.M, p.N) >= sms;
  return many_tiles && p.K >= 256 ? GemmPath::kTmaPersistent : GemmPath::kMmaSync;
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

const char* layout_name(GemmLayout l) { return l == GemmLayout::N ? "N" : "T"; }

}  // namespace

GemmProblem checked_gemm_problem(const GemmArgs& a, const char* op) {
  HG_CHECK(a.M >= 1 && a.N >= 1 && a.K >= 1,
           op << ": gemm_f16 needs M, N, K >= 1; got M=" << a.M << " N=" << a.N << " K=" << a.K);
  // The kernels round M and N up to their tiles (at most 256) in int32.
  constexpr int64_t kMaxExtent = INT_MAX - 256;
  HG_CHECK(a.M <= kMaxExtent && a.N <= kMaxExtent && a.K <= INT_MAX,
           op << ": gemm_f16 extents must fit in int32 (M, N at most " << kMaxExtent << "); got M=" << a.M
              << " N=" << a.N << " K=" << a.K);
  HG_CHECK(a.A != nullptr && a.B != nullptr && a.C != nullptr, op << ": gemm_f16 got a null A, B or C pointer");
  const int64_t a_width = a.a_layout == GemmLayout::N ? a.K : a.M;
  const int64_t b_width = a.b_layout == GemmLayout::N ? a.N : a.K;
  HG_CHECK(a.lda >= a_width, op << ": gemm_f16 A (layout " << layout_name(a.a_layout) << ", M=" << a.M << " K=" << a.K
                                << ") needs lda >= " << a_width << "; got " << a.lda);
  HG_CHECK(a.ldb >= b_width, op << ": gemm_f16 B (layout " << layout_name(a.b_layout) << ", K=" << a.K << " N=" << a.N
                                << ") needs ldb >= " << b_width << "; got " << a.ldb);
  HG_CHECK(a.ldc >= a.N, op << ": gemm_f16 C (M=" << a.M << " N=" << a.N << ") needs ldc >= " << a.N << "; got " << a.ldc);

  // Tile counts of both shapes fit in int32 when the small one's does (it has more tiles).
  const int64_t small_tiles = gemm_tiles::gemm_tile_count<SmallTile>(a.M, a.N);
  HG_CHECK(small_tiles <= INT_MAX, op << ": gemm_f16 M=" << a.M << " N=" << a.N << " needs " << small_tiles
                                      << " blocks, more than one launch holds");

  GemmProblem p;
  p.M = static_cast<int>(a.M);
  p.N = static_cast<int>(a.N);
  p.K = static_cast<int>(a.K);
  p.A = a.A;
  p.lda = a.lda;
  p.B = a.B;
  p.ldb = a.ldb;
  p.out.C = a.C;
  p.out.ldc = a.ldc;
  p.out.alpha = a.alpha;
  p.out.beta = a.beta;
  p.out.c_half = a.c_half;
  p.out.c_bf16 = a.bf16;
  p.out.pair_ok = a.ldc % 2 == 0 && aligned(a.C, a.c_half ? 4 : 8);

  p.out.quad_ok = a.ldc % 4 == 0 && aligned(a.C, a.c_half ? 8 : 16);
  return p;
}

bool gemm_vector_loads(const GemmArgs& a) {
  return a.lda % 8 == 0 && a.ldb % 8 == 0 && aligned(a.A, 16) && aligned(a.B, 16);
}

std::string gemm_f16_choice(const GemmArgs& a) {
  const char* op = a.op ? a.op : "gemm";
  const GemmProblem p = checked_gemm_problem(a, op);
  const bool tma_ok = !a.bf16 && gemm_tma::device_supported(op) && gemm_tma::operands_supported(p);
  const GemmPath path = tma_ok ? hopper_path(p, sm_count()) : GemmPath::kMmaSync;
  if (path == GemmPath::kMmaSync) return "mma_sync";
  if (path == GemmPath::kTmaPersistent) return "tma";
  const gemm_tma::TilePlan plan = gemm_tma::tile_plan(p, sm_count());
  const std::string width = std::to_string(plan.width);
  if (plan.split == 2) return "split_" + width;
  if (plan.pair == 2) return (plan.share_a ? "pair_a_" : "pair_") + width;
  return plan.width == 256 ? "tma_store" : "tma_store_" + width;
}

const char* gemm_f16_on(const GemmArgs& a, GemmPath path) {
  const char* op = a.op ? a.op : "gemm";
  GemmProblem p = checked_gemm_problem(a, op);
  const bool vector = gemm_vector_loads(a);
  const bool at = a.a_layout == GemmLayout::T;
  const bool bt = a.b_layout == GemmLayout::T;
  // The Hopper kernels are FP16-only (their descriptors and instructions name .f16).
  const bool tma_ok = !a.bf16 && gemm_tma::device_supported(op) && gemm_tma::operands_supported(p);
  // gemm_f16's own choice queues the TMA kernel by programmatic dependent launch (rung 15,
  // bench/gemm/dependent_launch.cu); the forced families are the ladder's rungs as they were measured.
  const bool dependent = path == GemmPath::kAuto || path == GemmPath::kTmaPlanned;
  if (path == GemmPath::kAuto) path = tma_ok ? hopper_path(p, sm_count()) : GemmPath::kMmaSync;
  switch (path) {
    case GemmPath::kTmaPersistent:
    case GemmPath::kTmaStore:
    case GemmPath::kTmaStore128:
    case GemmPath::kTmaStore64:
    case GemmPath::kTmaSplit128:
    case GemmPath::kTmaSplit64:
    case GemmPath::kTmaPair256:
    case GemmPath::kTmaPair128:
    case GemmPath::kTmaPairA128:
    case GemmPath::kTmaPairA64:
    case GemmPath::kTmaPlanned:
    case GemmPath::kTmaPlannedSerial: {
      if (!tma_ok) return "needs sm_90, FP16, 16-byte aligned A and B, lda and ldb multiples of 8";
      gemm_tma::TilePlan plan;  // 128 x 256, K not split
      if (path == GemmPath::kTmaStore128) plan = {128, 1};
      if (path == GemmPath::kTmaStore64) plan = {64, 1};
      if (path == GemmPath::kTmaSplit128) plan = {128, 2};
      if (path == GemmPath::kTmaSplit64) plan = {64, 2};
      if (path == GemmPath::kTmaPair256) plan = {256, 1, 2};
      if (path == GemmPath::kTmaPair128) plan = {128, 1, 2};
      if (plan.pair == 2 && gemm_tma::tile_count(p.M, 1, 1) % 2 != 0) return "needs an even number of 128-row tile-rows";
      if (path == GemmPath::kTmaPairA128) plan = {128, 1, 2, true};
      if (path == GemmPath::kTmaPairA64) plan = {64, 1, 2, true};
      if (path == GemmPath::kTmaPlanned || path == GemmPath::kTmaPlannedSerial) plan = gemm_tma::tile_plan(p, sm_count());
      gemm_tma::launch(p, at, bt, gemm_tma::Schedule::kPersistent, op,
                       path == GemmPath::kTmaPersistent ? gemm_tma::Store::kRegisters : gemm_tma::Store::kTma, plan,
                       dependent ? gemm_tma::Launch::kDependent : gemm_tma::Launch::kSerial);
      return nullptr;
    }
    default:
      if (gemm_tiles::gemm_tile_count<LargeTile>(a.M, a.N) >= kMinWavesForLarge * sm_count()) {
        launch_shape<LargeTile>(p, at, bt, vector, a.bf16, op);
      } else {
        launch_shape<SmallTile>(p, at, bt, vector, a.bf16, op);
      }
      return nullptr;
  }
}

void gemm_f16(const GemmArgs& a) { gemm_f16_on(a, GemmPath::kAuto); }

}  // namespace halfgrad::cuda
