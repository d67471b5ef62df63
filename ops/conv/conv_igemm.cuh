// conv_igemm.cuh - what the CUDA convolution kernels of ops/conv/ share (internal; .cu files only):
// the implicit-GEMM view of a convolution over channels-last volumes, fast integer division and the
// pointer-level launchers. The Tensor Core primitives (cp.async, ldmatrix, mma.sync.m16n8k16), the
// lanes' fragment maps, the shared-memory tile layouts and fragment loads, the warp's accumulator tile,
// the cp.async pipeline schedules and the tile-shape vocabulary are ops/tensor_core/'s (ptx.cuh,
// fragment.cuh, warp_tile.cuh, pipeline.cuh, tile_shape.h), shared with the GEMM: each kernel keeps
// its gather (how a slice of its operands reaches shared memory) and its epilogue.
//
// 16-bit operands: the Tensor Core kernels are templates over their operand type T, __half (FP16) or
// __nv_bfloat16 (BF16; mma.sync.m16n8k16 has .f16 and .bf16 forms on sm_80+, ldmatrix and cp.async
// move 16-bit words whatever they hold); both accumulate in FP32 and the epilogue rounds to T once.
// The host launchers take the type as a TcOperand tag, so a dtype maps to it in one line.
//
// The implicit GEMM (every kernel here computes one of these without materialising the column matrix):
//   A (M, K): row m = an output position (n, z, y, x) of the GEMM's row space (od, oh, ow),
//             column kk = (tap, c) = (a, b, e) * C + c, tap = (a * kh + b) * kw + e over the kd kh kw
//             kernel taps.
//             A[m][kk] = src[n, iz, iy, ix, c] (NDHWC) or 0 where the tap falls in the padding, with, on
//             each axis (shown for D; H and W alike with their own stride, padding and dilation)
//               forward gather     (conv3d fprop and wgrad):  iz = z * sd - pd + a * dd
//               transposed gather  (conv3d dgrad):            iz * sd = z + pd - a * dd  (0 unless divisible)
//   K = kd kh kw * C, ordered tap-major, channel-minor: the order of a KRSC weight (Cout, kd, kh, kw, Cin).
// Per-axis values: gather_row applies the strides and paddings once per row, gather_col the dilations
// once per column (it returns a * dd, not a), and the transposed gather's divisibility test is skipped
// on an axis of stride 1, where it is the forward gather with a flipped kernel: dgrad runs at fprop's
// speed; on an axis of stride s > 1 it is correct but (s - 1) / s of that axis's taps are zero.
// They are not free: the per-axis gather made the U-Net's cubic convolutions measurably slower than
// the single-k/stride/pad gather it replaced (bench/NOTES.md; what it adds to the hot loops: three dilation multiplies per column, three strides and paddings in
// registers where there was one, per-axis stride tests in the transposed gather). So the gather
// functions are templates over a GatherKind chosen per launch (gather_kind()): Cubic3 (3x3x3 kernel,
// stride 1 and dilation 1 on every axis: the U-Net's convolutions) decomposes the tap by the constants
// 9 and 3, multiplies by no stride or dilation and tests no divisibility; PerAxis is the general path
// for every other geometry.
//
// Integers: m, kk and pixel indices are int32 (launchers check M, K and every volume < 2^31); element
// offsets are int64 (pixel * C).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "ops/tensor_core/fragment.cuh"
#include "ops/tensor_core/ptx.cuh"
#include "ops/tensor_core/tile_shape.h"

namespace halfgrad::ops::conv::igemm {

// The PTX wrappers (cp_async_16, ldmatrix_x4, mma_m16n8k16, ...), the warp-level fragment maps
// (LdmatrixX4, Mma16816Accumulator) and TileShape: ops/tensor_core/.
using namespace cuda::tensor_core;
/// Where each lane's accumulator pairs lie in an m16n8 tile (fragment.cuh), for every kernel here.
using Acc = Mma16816Accumulator;

// ---- fast division by a runtime constant ------------------------------------------------------------
/// n / d and n % d for 0 <= n < 2^31 by a multiply-high and a shift (CUTLASS's FastDivmod): with
/// l = ceil(log2 d), p = 31 + l and mul = ceil(2^p / d), n / d = umulhi(n, mul) >> (p - 32). Integer
/// division is ~20 instructions on the GPU; the gathers divide in every tile, so this matters.
struct FastDivmod {
  int divisor = 1;
  unsigned multiplier = 0, shift = 0;
  FastDivmod() = default;
  explicit FastDivmod(int d) : divisor(d) {
    if (d == 1) return;
    unsigned l = 0;
    while ((1ull << l) < static_cast<unsigned long long>(d)) ++l;
    const unsigned p = 31 + l;
    multiplier = static_cast<unsigned>(((1ull << p) + d - 1) / d);
    shift = p - 32;
  }
  __device__ __forceinline__ int div(int n) const {
    return divisor == 1 ? n : static_cast<int>(__umulhi(static_cast<unsigned>(n), multiplier) >> shift);
  }
  __device__ __forceinline__ void divmod(int n, int& q, int& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

// ---- the gather of A ----------------------------------------------------------------------------
struct Gather {
  const void* src = nullptr;      // (n, d, h, w, c) channels-last, the kernel's element type
  int n = 0, d = 0, h = 0, w = 0, c = 0;  // source extents
  int od = 0, oh = 0, ow = 0;    // the GEMM's row space: M = n * od * oh * ow
  int kd = 1, kh = 1, kw = 1;     // kernel extents per axis
  int sd = 1, sh = 1, sw = 1;     // strides
  int pd = 0, ph = 0, pw = 0;     // paddings
  int dd = 1, dh = 1, dw = 1;     // dilations
  bool transposed = false;        // forward or transposed gather (file comment)
  int M = 0, K = 0;               // K = kd kh kw * c
  FastDivmod div_ovol, div_ohw, div_ow, div_c, div_khw, div_kw;

  void init() {
    M = n * od * oh * ow;
    K = kd * kh * kw * c;
    div_ovol = FastDivmod(od * oh * ow);
    div_ohw = FastDivmod(oh * ow);
    div_ow = FastDivmod(ow);
    div_c = FastDivmod(c);
    div_khw = FastDivmod(kh * kw);
    div_kw = FastDivmod(kw);
  }
};

/// What a kernel knows of the gather's geometry at compile time (file comment).
///   PerAxis: nothing; kernel extents, strides, paddings and dilations are read from Gather per axis.
///   Cubic3:  a 3x3x3 kernel, stride 1 and dilation 1 on every axis; the paddings are still read.
enum class GatherKind : int { PerAxis, Cubic3 };

/// The most specific GatherKind that describes g (host side, at the launch).
inline GatherKind gather_kind(const Gather& g) {
  const bool cubic3 = g.kd == 3 && g.kh == 3 && g.kw == 3;
  const bool unit_stride = g.sd == 1 && g.sh == 1 && g.sw == 1;
  const bool undilated = g.dd == 1 && g.dh == 1 && g.dw == 1;
  return cubic3 && unit_stride && undilated ? GatherKind::Cubic3 : GatherKind::PerAxis;
}

/// Where row m starts reading: (n, z0, y0, x0) with z0 = z * sd - pd (forward) or z + pd
/// (transposed), per axis; n = -1 marks a row past M (all zeros).
template <GatherKind kKind = GatherKind::PerAxis>
__device__ __forceinline__ int4 gather_row(const Gather& g, int m) {
  if (m >= g.M) return make_int4(-1, 0, 0, 0);
  int n, r, z, y, x;
  g.div_ovol.divmod(m, n, r);
  g.div_ohw.divmod(r, z, r);
  g.div_ow.divmod(r, y, x);
  if (g.transposed) return make_int4(n, z + g.pd, y + g.ph, x + g.pw);
  if constexpr (kKind == GatherKind::Cubic3) return make_int4(n, z - g.pd, y - g.ph, x - g.pw);
  return make_int4(n, z * g.sd - g.pd, y * g.sh - g.ph, x * g.sw - g.pw);
}

/// The column kk as (a dd, b dh, e dw, c): the tap's offsets along each axis, dilated; a = -1 marks a
/// column past K.
template <GatherKind kKind = GatherKind::PerAxis>
__device__ __forceinline__ int4 gather_col(const Gather& g, int kk) {
  if (kk >= g.K) return make_int4(-1, 0, 0, 0);
  int tap, c;
  g.div_c.divmod(kk, tap, c);
  if constexpr (kKind == GatherKind::Cubic3) {  // tap = (a * 3 + b) * 3 + e, division by constants
    const unsigned t = static_cast<unsigned>(tap);
    const unsigned a = t / 9u, r = t - 9u * a, b = r / 3u;
    return make_int4(static_cast<int>(a), static_cast<int>(b), static_cast<int>(r - 3u * b), c);
  } else {
    int a, r, b, e;
    g.div_khw.divmod(tap, a, r);
    g.div_kw.divmod(r, b, e);
    return make_int4(a * g.dd, b * g.dh, e * g.dw, c);
  }
}

/// One source coordinate of the transposed gather: (o - t) / s when divisible, else -1.
__device__ __forceinline__ int transposed_coord(int o, int t, int s) {
  const int v = o - t;
  if (s == 1) return v;
  return (v >= 0 && v % s == 0) ? v / s : -1;
}

/// Element offset of A[row][col] in src, or -1 where A is zero (padding, past M or past K).
template <GatherKind kKind = GatherKind::PerAxis>
__device__ __forceinline__ int64_t gather_offset(const Gather& g, int4 row, int4 col) {
  if (row.x < 0 || col.x < 0) return -1;
  int iz, iy, ix;
  if (g.transposed) {
    if constexpr (kKind == GatherKind::Cubic3) {  // stride 1: no divisibility test
      iz = row.y - col.x;
      iy = row.z - col.y;
      ix = row.w - col.z;
    } else {
      iz = transposed_coord(row.y, col.x, g.sd);
      iy = transposed_coord(row.z, col.y, g.sh);
      ix = transposed_coord(row.w, col.z, g.sw);
    }
  } else {
    iz = row.y + col.x;
    iy = row.z + col.y;
    ix = row.w + col.z;
  }
  if (static_cast<unsigned>(iz) >= static_cast<unsigned>(g.d) || static_cast<unsigned>(iy) >= static_cast<unsigned>(g.h) ||
      static_cast<unsigned>(ix) >= static_cast<unsigned>(g.w))
    return -1;
  const int pix = ((row.x * g.d + iz) * g.h + iy) * g.w + ix;
  return static_cast<int64_t>(pix) * g.c + col.w;
}

// ---- the 16-bit operand types ------------------------------------------------------------------
/// The Tensor Core kernels' operand type, as the host names it: FP16 (__half) or BF16 (__nv_bfloat16).
enum class TcOperand : int { Half, BFloat16 };

/// FP32 <-> T conversions of the kernels (round to nearest even), for T = __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ float operand_to_float(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T operand_from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return __float2half_rn(v);
}
/// Two FP32 values rounded to T and stored as one 32-bit word at p (p 4-byte aligned).
template <typename T>
__device__ __forceinline__ void store_operand_pair(T* p, float v0, float v1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
  else *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
}

// ---- the epilogue's output --------------------------------------------------------------------
/// C (M, N) of the fprop/dgrad GEMM goes to out[m * N + n] (NDHWC with N channels), or, with
/// `scatter` (conv_transpose3d with kernel == stride per axis, no padding, dilation 1, no
/// output_padding), column n = tap * cout + co of row m = (b, z, y, x) of the input, tap = (a * kh + bb)
/// * kw + e, goes to out[b, z*kd + a, y*kh + bb, x*kw + e, co] of (b, od, oh, ow, cout).
struct Epilogue {
  void* out = nullptr;
  bool out_operand = false;       // out holds the Tensor Core kernel's 16-bit operand type T (else FP32)
  const void* bias = nullptr;     // (cout) in the kernel's element type, or null
  int N = 0;                      // GEMM columns
  bool scatter = false;
  int cout = 0, kd = 1, kh = 1, kw = 1, od = 1, oh = 1, ow = 1;  // scatter geometry (cout = N / (kd kh kw))
  FastDivmod div_cout, div_khw, div_kw;
};

/// Output element offset of C[m][n] given m's gather row (scatter: row = (b, z, y, x) of the
/// pointwise gather, so z0 = z etc.).
__device__ __forceinline__ int64_t output_offset(const Epilogue& e, int m, int4 row, int n, int& channel) {
  if (!e.scatter) {
    channel = n;
    return static_cast<int64_t>(m) * e.N + n;
  }
  int tap, co, a, r, b, c;
  e.div_cout.divmod(n, tap, co);
  e.div_khw.divmod(tap, a, r);
  e.div_kw.divmod(r, b, c);
  channel = co;
  const int pix = ((row.x * e.od + row.y * e.kd + a) * e.oh + row.z * e.kh + b) * e.ow + row.w * e.kw + c;
  return static_cast<int64_t>(pix) * e.cout + co;
}

// ---- pointer-level launchers (conv3d_cuda.cu calls them; each checks its own preconditions) --------
/// C = A(g) * B^T (+ bias) on Tensor Cores, 16-bit operands of type `type` (g.src, B and the bias;
/// an out_operand output too): B (n_pad, k_pad) row-major, zero beyond (N, K), n_pad a multiple of 128
/// and k_pad of 32 (pack_weights). K is split into `slices` ranges of K-blocks (split K,
/// conv_split_k.h): slices = 1 is the single kernel (partial unused, may be null); slices > 1 needs
/// partial (slices, M, N) FP32 as workspace, summed in slice order (deterministic) before the epilogue.
/// Throws halfgrad::Error naming op for an empty problem, a bad B, or slices outside 1..65535.
void tc_igemm(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e, float* partial, int slices,
              const char* op);
/// tc_igemm's slice count for (g, type, e): forced_split_k() while a ForceSplitK lives on this thread,
/// else split_k_slices (conv_split_k.h) for the kernel tc_igemm picks, its wave being this GPU's SM
/// count times the blocks of that kernel one SM holds (the occupancy calculator; CUDA errors name op).
int tc_igemm_slices(const Gather& g, TcOperand type, const Epilogue& e, const char* op);
/// The FP32 SIMT twin of tc_igemm (FFMA), B (n_pad, k_pad) FP32.
void simt_igemm(const Gather& g, const float* B, int k_pad, const Epilogue& e, const char* op);
/// Split partials of dW (cout, K) = dy^T (cout, M) * A(g) (M, K): partial[s] (cout, K) FP32 for split s
/// of `splits` equal ranges of M; dy (M, cout) channels-last in the element type. Returns nothing; the
/// caller sums the splits (deterministic: no atomics).
/// tc_wgrad: g.src and dy of the 16-bit type `type`.
void tc_wgrad(const Gather& g, TcOperand type, const void* dy, int cout, float* partial, int splits, const char* op);
void simt_wgrad(const Gather& g, const float* dy, int cout, float* partial, int splits, const char* op);
/// The number of M-splits of a wgrad for this problem (about 4 blocks per SM, at least 512 rows each).
int wgrad_splits(int64_t M, int cout, int K, bool tensor_cores);
/// The halo-tiled wgrad of the "same" 3x3x3 convolution (conv3d_wgrad_halo_cuda.cu): applies where
/// halo_wgrad_supported(g, cout): forward gather, 3x3x3 kernel, stride 1, dilation 1, padding 1 on
/// every axis, Cin 1 or a multiple of 8 <= 32, Cout a multiple of 8 <= 32, g.src 16-byte aligned.
bool halo_wgrad_supported(const Gather& g, int cout);
/// Its number of splits: one persistent block per resident slot on this GPU, at most one per tile.
int halo_wgrad_splits(const Gather& g, TcOperand type, int cout, const char* op);
/// dW (cout, K = 27 * Cin) FP32 into partial[0], partial (splits, cout, K) its scratch: split s's
/// partial sum, then the splits added in a fixed order (deterministic), so the caller sums 1 split;
/// dy (M, cout) 16-byte aligned. Throws halfgrad::Error naming op where the problem is not supported
/// or splits is outside 1..tiles.
void halo_wgrad(const Gather& g, TcOperand type, const void* dy, int cout, float* partial, int splits, const char* op);

// fprop / dgrad: the halo-tiled "same" 3x3x3 convolution (conv3d_fprop_halo_cuda.cu).
/// Whether tc_halo_conv serves (g, e): kernel 3, stride 1, padding 1, dilation 1 on every axis (forward
/// or transposed gather), g.c in {1, 16, 32} gathered channels, e.N in {16, 32} 16-bit output channels
/// (out_operand), no scatter, e.out and (C > 1) g.src 16-byte aligned, M >= 1.
bool halo_conv_supported(const Gather& g, const Epilogue& e);
/// The same C = A(g) * B^T (+ bias) as tc_igemm, B packed as for it, computed from halo tiles in shared
/// memory (C = 16, 32: mma.sync; C = 1: FP32 FMAs). Throws halfgrad::Error where !halo_conv_supported or
/// B is not 16-byte aligned.
void tc_halo_conv(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e, const char* op);

constexpr int kPadN = 128;  // B's rows are padded to a multiple of every kernel's block N
constexpr int kPadK = 32;   // and its columns to a multiple of every kernel's block K

}  // namespace halfgrad::ops::conv::igemm

// ---- Tensor-level helpers shared by conv3d_cuda.cu and conv_transpose3d_cuda.cu -------------------
#include "core/tensor.h"
#include "ops/conv/vol2col.h"

namespace halfgrad::ops::conv {

/// The three orders in which pack_weights lays a weight out as the GEMM's B (conv3d_cuda.cu).
enum class PackOrder : int { Fprop, Dgrad, Scatter };
/// t cast to dt (when it differs) and in channels-last (NDHWC) storage.
Tensor to_channels_last(const Tensor& t, Dtype dt);
/// B (n_pad, k_pad) in w's dtype from w (A0, A1, kd, kh, kw), zero-padded to kPadN / kPadK multiples.
Tensor pack_weights(const Tensor& w, PackOrder order, const char* op);
/// The gather of A over the channels-last src_cl (N, C, ...): forward (rows = g's output extents) or
/// transposed (rows = g's input extents, src = an output gradient).
igemm::Gather make_gather(const Tensor& src_cl, const ConvGeometry& g, bool transposed, const char* op);
/// Whether dt runs on the Tensor Core kernels, and as which 16-bit operand type (float16 -> Half,
/// bfloat16 -> BFloat16). False for float32 (the FFMA kernels).
bool tensor_core_operand(Dtype dt, igemm::TcOperand* type);
/// tc_igemm for a 16-bit B (tensor_core_operand; split K by tc_igemm_slices, the workspace an FP32
/// Tensor), simt_igemm for FP32 B.
void run_igemm(const igemm::Gather& ga, const Tensor& B, const igemm::Epilogue& e, const char* op);
/// dx (N, Cin, D, H, W) = dgrad(dy, w) + b (b may be undefined), in `format`.
Tensor dgrad_with_bias(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& b, MemoryFormat format,
                       const char* op);

}  // namespace halfgrad::ops::conv
