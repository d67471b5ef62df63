// fragment.cuh - the warp-level layer above ptx.cuh: where each lane's share of a Tensor Core
// instruction lies in the tiles, written once for the GEMM kernels (ops/matmul/) and the implicit-GEMM
// convolutions (ops/conv/). Two things a kernel would otherwise work out for itself:
//
//   * The accumulator map: which (row, col) of the instruction's D tile each accumulator register of
//     a lane holds. mma.sync.m16n8k16 (Mma16816Accumulator): register e of lane l holds
//     D(l / 4 + 8 (e / 2), 2 (l % 4) + e % 2), so a lane holds two pairs of horizontally adjacent
//     values (pair h = 0, 1: registers 2h and 2h + 1, row l / 4 + 8h, columns 2 (l % 4) and + 1); that
//     pair is what every epilogue stores (PTX ISA, "Matrix Fragments for mma.m16n8k16", figure for
//     the f32 accumulator). wgmma.m64nNk16 (WgmmaAccumulator): the same pattern per warp of the
//     warpgroup, 16 rows each, repeated every 8 columns: register 4j + 2h + c of lane l in warp w
//     holds D(16 w + l / 4 + 8h, 8j + 2 (l % 4) + c) (PTX ISA, "Register fragment of wgmma .m64nNk16").
//
//   * The ldmatrix.x4 lane addresses (LdmatrixX4): the x4 form loads four 8x8 matrices, matrix q
//     from the eight row addresses of lanes 8q .. 8q + 7. For the A operand of m16n8k16 (16 x 16,
//     m x k) and for the B operands of two adjacent n8 columns (16 n x 16 k) the four matrices are
//     the four 8x8 quarters, in the order the instruction's registers take them; where the tile keeps
//     K contiguous each lane points at a row of 8 k, where it keeps M (or N) contiguous the .trans form
//     reads rows of 8 m (or n). The (row, col) a lane points at, counted in the tile's stored rows and
//     columns from the piece's corner, is:
//       A, K contiguous (rows m)          row = l % 16,                col = 8 (l / 16)        x4
//       A, M contiguous (rows k)          row = 8 (l / 16) + l % 8,    col = 8 ((l / 8) % 2)   x4.trans
//       B pair, K contiguous (rows n)     row = 8 (l / 16) + l % 8,    col = 8 ((l / 8) % 2)   x4
//       B pair, N contiguous (rows k)     row = l % 16,                col = 8 (l / 16)        x4.trans
//     and the B pair's registers 0-1 are column block n0's fragment, 2-3 block n0 + 8's. The tile
//     layouts that turn (row, col) into an address (padded rows, a swizzle) and the loads by layout
//     are warp_tile.cuh's; a halo of voxels shifted by a tap stays its kernel's.
//
// The B operand's registers as mma.sync reads them (Mma16816BFragment) are mapped too, for the one
// kernel that fills them from scalar loads (ops/conv/conv3d_wgrad_halo_cuda.cu, Cin = 1).
//
// Internal: .cu / .cuh files only; sm_80 or newer (ldmatrix, mma.sync).
#pragma once
#include <cstdint>

#include "ops/tensor_core/fragment_map.h"
#include "ops/tensor_core/ptx.cuh"

namespace halfgrad::cuda::tensor_core {

/// The lane addresses (LdmatrixX4Map: a, b_pair; fragment_map.h) and loads of ldmatrix.x4 for
/// m16n8k16's operands (file comment). The accumulator and B-register maps are fragment_map.h's.
struct LdmatrixX4 : LdmatrixX4Map {
  /// A's fragment from the shared address lane computed with a<kKContiguous>.
  template <bool kKContiguous>
  __device__ static void load_a(uint32_t (&a)[4], uint32_t addr) {
    if constexpr (kKContiguous) ldmatrix_x4(a, addr);
    else ldmatrix_x4_trans(a, addr);
  }
  /// B's fragments of column blocks n0 (b0) and n0 + 8 (b1) from the address computed with b_pair.
  template <bool kKContiguous>
  __device__ static void load_b_pair(uint32_t (&b0)[2], uint32_t (&b1)[2], uint32_t addr) {
    uint32_t r[4];
    if constexpr (kKContiguous) ldmatrix_x4(r, addr);
    else ldmatrix_x4_trans(r, addr);
    b0[0] = r[0];
    b0[1] = r[1];
    b1[0] = r[2];
    b1[1] = r[3];
  }
};

}  // namespace halfgrad::cuda::tensor_core
