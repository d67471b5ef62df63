// conv_igemm.cuh - what the CUDA convolution kernels of ops/conv/ share (internal; .cu files only):
// the implicit-GEMM view of a convolution over channels-last volumes, fast integer division, the
// Tensor Core primitives (cp.async, ldmatrix, mma.sync.m16n8k16) and the pointer-level launchers.
//
// The implicit GEMM (every kernel here computes one of these without materialising the column matrix):
//   A (M, K): row m = an output position (n, z, y, x) of the GEMM's row space (od, oh, ow),
//             column kk = (tap, c) = (a, b, e) * C + c, tap = (a * k + b) * k + e over the k^3 kernel taps.
//             A[m][kk] = src[n, iz, iy, ix, c] (NDHWC) or 0 where the tap falls in the padding, with
//               forward gather     (conv3d fprop and wgrad):  iz = z * stride - pad + a
//               transposed gather  (conv3d dgrad):            iz * stride = z + pad - a  (0 unless divisible)
//   K = k^3 * C, ordered tap-major, channel-minor: the order of a KRSC weight (Cout, kd, kh, kw, Cin).
// For stride 1 the transposed gather is the forward gather with a flipped kernel and padding k-1-pad,
// so dgrad runs at fprop's speed; for stride > 1 it is correct but (s^3 - 1) / s^3 of its taps are zero.
//
// Integers: m, kk and pixel indices are int32 (launchers check M, K and every volume < 2^31); element
// offsets are int64 (pixel * C).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda/check.cuh"

namespace halfgrad::ops::conv::igemm {

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
  int k = 1, stride = 1, pad = 0;
  bool transposed = false;        // forward or transposed gather (file comment)
  int M = 0, K = 0;               // K = k^3 * c
  FastDivmod div_ovol, div_ohw, div_ow, div_c, div_kk, div_k;

  void init() {
    M = n * od * oh * ow;
    K = k * k * k * c;
    div_ovol = FastDivmod(od * oh * ow);
    div_ohw = FastDivmod(oh * ow);
    div_ow = FastDivmod(ow);
    div_c = FastDivmod(c);
    div_kk = FastDivmod(k * k);
    div_k = FastDivmod(k);
  }
};

/// Where row m starts reading: (n, z0, y0, x0) with z0 = z * stride - pad (forward) or z + pad
/// (transposed); n = -1 marks a row past M (all zeros).
__device__ __forceinline__ int4 gather_row(const Gather& g, int m) {
  if (m >= g.M) return make_int4(-1, 0, 0, 0);
  int n, r, z, y, x;
  g.div_ovol.divmod(m, n, r);
  g.div_ohw.divmod(r, z, r);
  g.div_ow.divmod(r, y, x);
  if (g.transposed) return make_int4(n, z + g.pad, y + g.pad, x + g.pad);
  return make_int4(n, z * g.stride - g.pad, y * g.stride - g.pad, x * g.stride - g.pad);
}

/// The column kk as (a, b, e, c); a = -1 marks a column past K.
__device__ __forceinline__ int4 gather_col(const Gather& g, int kk) {
  if (kk >= g.K) return make_int4(-1, 0, 0, 0);
  int tap, c, a, r, b, e;
  g.div_c.divmod(kk, tap, c);
  g.div_kk.divmod(tap, a, r);
  g.div_k.divmod(r, b, e);
  return make_int4(a, b, e, c);
}

/// One source coordinate of the transposed gather: (o - t) / s when divisible, else -1.
__device__ __forceinline__ int transposed_coord(int o, int t, int s) {
  const int v = o - t;
  if (s == 1) return v;
  return (v >= 0 && v % s == 0) ? v / s : -1;
}

/// Element offset of A[row][col] in src, or -1 where A is zero (padding, past M or past K).
__device__ __forceinline__ int64_t gather_offset(const Gather& g, int4 row, int4 col) {
  if (row.x < 0 || col.x < 0) return -1;
  int iz, iy, ix;
  if (g.transposed) {
    iz = transposed_coord(row.y, col.x, g.stride);
    iy = transposed_coord(row.z, col.y, g.stride);
    ix = transposed_coord(row.w, col.z, g.stride);
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

// ---- the epilogue's output --------------------------------------------------------------------
/// C (M, N) of the fprop/dgrad GEMM goes to out[m * N + n] (NDHWC with N channels), or, with
/// `scatter` (conv_transpose3d with kernel == stride, no padding), column n = tap * cout + co of row
/// m = (b, z, y, x) of the input goes to out[b, z*s + a, y*s + bb, x*s + e, co] of (b, od, oh, ow, cout).
struct Epilogue {
  void* out = nullptr;
  bool out_half = false;
  const void* bias = nullptr;     // (cout) in the kernel's element type, or null
  int N = 0;                      // GEMM columns
  bool scatter = false;
  int cout = 0, k = 1, od = 1, oh = 1, ow = 1;  // scatter geometry (cout = N / k^3)
  FastDivmod div_cout, div_kk, div_k;
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
  e.div_kk.divmod(tap, a, r);
  e.div_k.divmod(r, b, c);
  channel = co;
  const int pix = ((row.x * e.od + row.y * e.k + a) * e.oh + row.z * e.k + b) * e.ow + row.w * e.k + c;
  return static_cast<int64_t>(pix) * e.cout + co;
}

// ---- Tensor Core primitives (sm_80+) --------------------------------------------------------------
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
/// 16-byte asynchronous copy global -> shared; src_bytes 0 writes 16 zero bytes (src is not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

/// Four 8x8 FP16 matrices from shared memory; lane l supplies the row address of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
/// d (16x8, FP32) += a (16x16, FP16, row) * b (16x8, FP16, col).
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- pointer-level launchers (conv3d_cuda.cu calls them; each checks its own preconditions) --------
/// C = A(g) * B^T (+ bias) on Tensor Cores, FP16 operands: B (n_pad, k_pad) FP16 row-major, zero
/// beyond (N, K), n_pad a multiple of 128 and k_pad of 32 (weights_padded_extents).
void tc_igemm(const Gather& g, const __half* B, int k_pad, const Epilogue& e, const char* op);
/// The FP32 SIMT twin of tc_igemm (FFMA), B (n_pad, k_pad) FP32.
void simt_igemm(const Gather& g, const float* B, int k_pad, const Epilogue& e, const char* op);
/// Split partials of dW (cout, K) = dy^T (cout, M) * A(g) (M, K): partial[s] (cout, K) FP32 for split s
/// of `splits` equal ranges of M; dy (M, cout) channels-last in the element type. Returns nothing; the
/// caller sums the splits (deterministic: no atomics).
void tc_wgrad(const Gather& g, const __half* dy, int cout, float* partial, int splits, const char* op);
void simt_wgrad(const Gather& g, const float* dy, int cout, float* partial, int splits, const char* op);
/// The number of M-splits of a wgrad for this problem (about 4 blocks per SM, at least 512 rows each).
int wgrad_splits(int64_t M, int cout, int K, bool tensor_cores);

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
/// B (n_pad, k_pad) in w's dtype from w (A0, A1, k, k, k), zero-padded to kPadN / kPadK multiples.
Tensor pack_weights(const Tensor& w, PackOrder order, const char* op);
/// The gather of A over the channels-last src_cl (N, C, ...): forward (rows = g's output extents) or
/// transposed (rows = g's input extents, src = an output gradient).
igemm::Gather make_gather(const Tensor& src_cl, const ConvGeometry& g, bool transposed, const char* op);
/// tc_igemm for FP16 B, simt_igemm for FP32 B.
void run_igemm(const igemm::Gather& ga, const Tensor& B, const igemm::Epilogue& e, const char* op);
/// dx (N, Cin, D, H, W) = dgrad(dy, w) + b (b may be undefined), in `format`.
Tensor dgrad_with_bias(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& b, MemoryFormat format,
                       const char* op);

}  // namespace halfgrad::ops::conv
