// tile_shape.h - the named tile shape of halfgrad's Tensor Core kernels: the mma.sync kernels (the
// GEMM block of ops/matmul/gemm_mma_tiles.cuh, the implicit-GEMM convolutions of ops/conv/, the GEMM
// sweep of bench/gemm/) and the Hopper wgmma kernels (ops/matmul/gemm_tma.cuh's TmaTile, the lab's
// cp.async wgmma kernel): how a thread block's tile of C is cut into warp (or warpgroup) tiles and
// instructions, and how many K slices are in flight. Plain C++17, no CUDA: host code (launchers,
// benches, tests) reads the same constants as the kernels.
//
// The hierarchy (CUTLASS's threadblock / warp / instruction levels):
//   block        kBlockM x kBlockN of C per thread block, K walked in slices of kBlockK
//   warp         kWarpM x kWarpN of C per issuing group: a warp for mma.sync, a warpgroup of four
//                warps for wgmma (the instruction says which, Instr::kThreads); the block holds
//                kWarpsM x kWarpsN of them
//   instruction  mma.sync.m16n8k16 (Mma16816, the default) or wgmma.m64nNk16 (WgmmaM64NK16<N>):
//                each group issues kMmaM x kMmaN of them per k-step, kKSteps k-steps per slice
//   pipeline     kStages shared-memory slots (kStages - 1 slices in flight while one is multiplied)
//
// Every number is named where a shape is written, by the wrapper type that carries it, because a
// list of eight positional integers (which one is the warp N? the stages? the blocks per SM?) lets
// two swapped values compile silently into a different kernel:
//   using LargeTile = TileShape<Block<256, 128, 32>, Warp<64, 64>, Stages<4>, MinBlocksPerSm<1>,
//                               StagedEpilogue>;
// (C++17 cannot take a struct value as a template argument, hence one small type per quantity.) The
// optional tags after Stages may come in any order and default to: MinBlocksPerSm<1> (the occupancy
// __launch_bounds__ asks for), RasterGroupM<8> (tile-rows a group of consecutive blocks sweeps before
// moving right, for L2 reuse), no StagedEpilogue (results stored straight from the registers),
// Instruction<Mma16816>. Kernel-specific quantities (shared-memory layout, padding) are derived by
// each kernel from these.
#pragma once
#include <string>
#include <type_traits>

namespace halfgrad::cuda::tensor_core {

/// The mma.sync instruction shape: D (16x8) += A (16x16) * B (16x8) (ptx.cuh's mma_m16n8k16), issued
/// by one warp.
struct Mma16816 {
  static constexpr int kM = 16, kN = 8, kK = 16;
  static constexpr int kThreads = 32;
};
/// The wgmma instruction shape: D (64xN) += A (64x16) * B (16xN) (ptx.cuh's wgmma_m64nk16), N a
/// multiple of 8 up to 256, issued by one warpgroup (four warps).
template <int N>
struct WgmmaM64NK16 {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma.m64nNk16: N = 8, 16, ..., 256");
  static constexpr int kM = 64, kN = N, kK = 16;
  static constexpr int kThreads = 128;
};

/// A thread block's tile of C (M x N) and its K slice.
template <int M, int N, int K>
struct Block {
  static constexpr int kM = M, kN = N, kK = K;
};
/// One warp's tile of C.
template <int M, int N>
struct Warp {
  static constexpr int kM = M, kN = N;
};
/// Shared-memory pipeline slots.
template <int S>
struct Stages {
  static constexpr int kValue = S;
};
/// Blocks per SM the kernel is compiled for (__launch_bounds__' second argument).
template <int B>
struct MinBlocksPerSm {
  static constexpr int kValue = B;
};
/// Rasterisation: consecutive blocks sweep G tile-rows before moving one tile right.
template <int G>
struct RasterGroupM {
  static constexpr int kValue = G;
};
/// The epilogue stages each warp's results through shared memory (whole-row vector stores).
struct StagedEpilogue {};
/// The instruction the warp tiles are cut into: Mma16816 (the default) or WgmmaM64NK16<N>.
template <class I>
struct Instruction {
  using Type = I;
};

namespace detail {
template <template <int> class Tag, class T>
struct TagValue {
  static constexpr bool kMatch = false;
  static constexpr int kValue = 0;
};
template <template <int> class Tag, int V>
struct TagValue<Tag, Tag<V>> {
  static constexpr bool kMatch = true;
  static constexpr int kValue = V;
};
/// The value of the Tag<v> among Options, or kDefault when there is none (at most one allowed).
template <template <int> class Tag, int kDefault, class... Options>
constexpr int option_value() {
  static_assert((0 + ... + int{TagValue<Tag, Options>::kMatch}) <= 1, "a tile-shape option is given twice");
  int v = kDefault;
  ((v = TagValue<Tag, Options>::kMatch ? TagValue<Tag, Options>::kValue : v), ...);
  return v;
}
template <class T>
struct IsInstruction : std::false_type {};
template <class I>
struct IsInstruction<Instruction<I>> : std::true_type {};
/// The I of the Instruction<I> among Options, or Mma16816 when there is none.
template <class... Options>
struct InstructionOf {
  using Type = Mma16816;
};
template <class I, class... Rest>
struct InstructionOf<Instruction<I>, Rest...> {
  using Type = I;
};
template <class First, class... Rest>
struct InstructionOf<First, Rest...> : InstructionOf<Rest...> {};
template <class T>
constexpr bool is_option_v = std::is_same_v<T, StagedEpilogue> || TagValue<MinBlocksPerSm, T>::kMatch ||
                             TagValue<RasterGroupM, T>::kMatch || IsInstruction<T>::value;
}  // namespace detail

/// The shape: Block<M, N, K>, Warp<M, N>, Stages<S>, then optional MinBlocksPerSm<B>,
/// RasterGroupM<G>, StagedEpilogue, Instruction<I> (file comment).
template <class BlockT, class WarpT, class StagesT, class... Options>
struct TileShape {
  static_assert((detail::is_option_v<Options> && ...),
                "TileShape options are MinBlocksPerSm<B>, RasterGroupM<G>, StagedEpilogue and Instruction<I>");
  static_assert((0 + ... + int{detail::IsInstruction<Options>::value}) <= 1, "a tile-shape option is given twice");
  using Instr = typename detail::InstructionOf<Options...>::Type;
  static constexpr int kBlockM = BlockT::kM, kBlockN = BlockT::kN, kBlockK = BlockT::kK;
  static constexpr int kWarpM = WarpT::kM, kWarpN = WarpT::kN;
  static constexpr int kWarpsM = kBlockM / kWarpM, kWarpsN = kBlockN / kWarpN;
  /// Threads of the warps (or warpgroups) that own the tiles; a kernel may add others (a producer).
  static constexpr int kThreads = Instr::kThreads * kWarpsM * kWarpsN;
  static constexpr int kInstrM = Instr::kM, kInstrN = Instr::kN, kInstrK = Instr::kK;
  static constexpr int kMmaM = kWarpM / kInstrM;     // instruction rows per warp (or warpgroup)
  static constexpr int kMmaN = kWarpN / kInstrN;     // instruction columns per warp (or warpgroup)
  static constexpr int kKSteps = kBlockK / kInstrK;  // k-steps per slice
  static constexpr int kStages = StagesT::kValue;
  static constexpr int kMinBlocks = detail::option_value<MinBlocksPerSm, 1, Options...>();
  static constexpr int kGroupM = detail::option_value<RasterGroupM, 8, Options...>();
  static constexpr bool kStagedEpilogue = (std::is_same_v<Options, StagedEpilogue> || ...);

  static_assert(kBlockM % kWarpM == 0 && kBlockN % kWarpN == 0, "warps tile the block exactly");
  static_assert(kWarpM % kInstrM == 0 && kWarpN % kInstrN == 0 && kBlockK % kInstrK == 0, "whole mma tiles");
  static_assert(kStages >= 2, "a pipeline needs at least two slots");
  static_assert(kMinBlocks >= 1 && kGroupM >= 1, "at least one block per SM and one tile-row per group");

  /// "256x128x32 s4, 4x2 warps of 64x64, 1/SM, group 8, staged epilogue" (block M x N x K, stages,
  /// warp grid and warp tile, blocks per SM, raster group): for benches and logs.
  static std::string describe() {
    std::string s = std::to_string(kBlockM) + "x" + std::to_string(kBlockN) + "x" + std::to_string(kBlockK) + " s" +
                    std::to_string(kStages) + ", " + std::to_string(kWarpsM) + "x" + std::to_string(kWarpsN) +
                    (Instr::kThreads == 32 ? " warps of " : " warpgroups of ") + std::to_string(kWarpM) + "x" + std::to_string(kWarpN) + ", " +
                    std::to_string(kMinBlocks) + "/SM, group " + std::to_string(kGroupM);
    if (kStagedEpilogue) s += ", staged epilogue";
    return s;
  }
};

}  // namespace halfgrad::cuda::tensor_core
