// conv3d_simt_cuda.cu - the FP32 convolutions (no autocast): the same implicit GEMMs as the Tensor Core
// kernels, on the FP32 pipes (FFMA). simt_igemm serves fprop, dgrad and conv_transpose3d's forward;
// simt_wgrad the weight gradients (conv_igemm.cuh).
//
// Math (see conv3d_fprop_cuda.cu and conv3d_wgrad_cuda.cu for the full statement):
//   simt_igemm:  C (M, N) = A (M, K) * B^T + bias, A gathered from the channels-last source,
//                B (n_pad, k_pad) the KRSC weight in FP32; C written through the same Epilogue
//                (NDHWC output, or conv_transpose3d's scatter).
//   simt_wgrad:  partial[s] (Cout, K) = dy^T (Cout, rows of split s) * A (rows of split s, K).
//
// Parallel mapping: classic shared-memory tiled SGEMM. A 256-thread block owns a 64x64 tile of C; K
// (for wgrad: M rows) advances in slices of 16; each slice is loaded into registers while the previous
// one is multiplied (register double buffering), then stored K-major into shared memory, so that each
// thread reads 4 consecutive rows and 4 consecutive columns with two float4 loads per k and makes 16
// FFMAs from them. Thread (tx, ty) = (tid % 16, tid / 16) owns rows 4*ty..+3 and columns 4*tx..+3.
// Global loads: a thread's column within the slice is fixed (tid % 16, or tid % 64 for wgrad's A), so
// its (tap, c) decomposition is made once per slice (wgrad: once per launch) and consecutive threads
// read consecutive channels.
//
// Precision: FP32 operands and FP32 accumulation throughout (the products match the CPU's to ~1e-6
// relative); the accumulation order differs from the CPU's, so results agree to rounding, not bits.
//
// Shared memory: the K-major tiles have rows of 64 + 4 floats; +4 keeps the float4 reads 16-byte
// aligned while spreading the transposing stores (16 columns x 2 rows per warp) over more banks.

#include <algorithm>

#include "core/cuda/check.cuh"
#include "ops/conv/conv_igemm.cuh"

namespace halfgrad::ops::conv::igemm {
namespace {

constexpr int kTile = 64;          // block tile (both dimensions)
constexpr int kSlice = 16;         // K (or M rows for wgrad) per step
constexpr int kThreads = 256;
constexpr int kRow = kTile + 4;    // floats per shared row (header)
constexpr int kPerThread = kTile * kSlice / kThreads;  // 4 elements of each operand per thread per slice

__global__ void __launch_bounds__(kThreads) simt_igemm_kernel(Gather g, const float* __restrict__ B, int k_pad, Epilogue e) {
  __shared__ __align__(16) float As[kSlice][kRow];
  __shared__ __align__(16) float Bs[kSlice][kRow];
  __shared__ int4 rows[kTile];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int block_m = blockIdx.x * kTile, block_n = blockIdx.y * kTile;
  const float* src = static_cast<const float*>(g.src);
  for (int i = tid; i < kTile; i += kThreads) rows[i] = gather_row(g, block_m + i);
  __syncthreads();

  const int kc = tid % kSlice;  // this thread's column within every slice
  float ra[kPerThread], rb[kPerThread];
  auto fetch = [&](int k0) {
    const int4 col = gather_col(g, k0 + kc);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int r = (tid + j * kThreads) / kSlice;
      const int64_t off = gather_offset(g, rows[r], col);
      ra[j] = off >= 0 ? src[off] : 0.f;
      rb[j] = B[static_cast<int64_t>(block_n + r) * k_pad + k0 + kc];
    }
  };
  float acc[4][4] = {};
  const int num_k = (g.K + kSlice - 1) / kSlice;
  fetch(0);
  for (int kt = 0; kt < num_k; ++kt) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int r = (tid + j * kThreads) / kSlice;
      As[kc][r] = ra[j];
      Bs[kc][r] = rb[j];
    }
    __syncthreads();
    if (kt + 1 < num_k) fetch((kt + 1) * kSlice);  // in flight during the FFMAs below
#pragma unroll
    for (int k = 0; k < kSlice; ++k) {
      const float4 a = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }

  const float* bias = static_cast<const float*>(e.bias);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = block_m + ty * 4 + i;
    if (m >= g.M) continue;
    const int4 row = rows[ty * 4 + i];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = block_n + tx * 4 + j;
      if (n >= e.N) continue;
      int ch;
      const int64_t off = output_offset(e, m, row, n, ch);
      const float v = acc[i][j] + (bias ? bias[ch] : 0.f);
      static_cast<float*>(e.out)[off] = v;
    }
  }
}

__global__ void __launch_bounds__(kThreads) simt_wgrad_kernel(Gather g, const float* __restrict__ dy, int cout,
                                                               float* __restrict__ partial, int rows_per_split) {
  __shared__ __align__(16) float Ds[kSlice][kRow];  // (M rows, cout)
  __shared__ __align__(16) float Xs[kSlice][kRow];  // (M rows, K)
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int co0 = blockIdx.x * kTile, n0 = blockIdx.y * kTile;
  const int m_begin = blockIdx.z * rows_per_split, m_end = min(g.M, m_begin + rows_per_split);
  const float* src = static_cast<const float*>(g.src);
  const int c = tid % kTile;  // this thread's column of both slices
  const int4 col = gather_col(g, n0 + c);
  float rd[kPerThread], rx[kPerThread];
  auto fetch = [&](int m0) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int m = m0 + (tid + j * kThreads) / kTile;
      const bool in = m < m_end;
      rd[j] = (in && co0 + c < cout) ? dy[static_cast<int64_t>(m) * cout + co0 + c] : 0.f;
      const int64_t off = (in && col.x >= 0) ? gather_offset(g, gather_row(g, m), col) : -1;
      rx[j] = off >= 0 ? src[off] : 0.f;
    }
  };
  float acc[4][4] = {};
  const int num_k = m_end > m_begin ? (m_end - m_begin + kSlice - 1) / kSlice : 0;
  if (num_k > 0) fetch(m_begin);
  for (int kt = 0; kt < num_k; ++kt) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int r = (tid + j * kThreads) / kTile;
      Ds[r][c] = rd[j];
      Xs[r][c] = rx[j];
    }
    __syncthreads();
    if (kt + 1 < num_k) fetch(m_begin + (kt + 1) * kSlice);
#pragma unroll
    for (int k = 0; k < kSlice; ++k) {
      const float4 a = *reinterpret_cast<const float4*>(&Ds[k][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&Xs[k][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  float* out = partial + static_cast<int64_t>(blockIdx.z) * cout * g.K;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int co = co0 + ty * 4 + i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int kk = n0 + tx * 4 + j;
      if (co < cout && kk < g.K) out[static_cast<int64_t>(co) * g.K + kk] = acc[i][j];
    }
  }
}

}  // namespace

void simt_igemm(const Gather& g, const float* B, int k_pad, const Epilogue& e, const char* op) {
  HG_CHECK(g.M >= 1 && g.K >= 1 && e.N >= 1, op << ": implicit GEMM needs M, N, K >= 1; got M=" << g.M << " N=" << e.N
                                                 << " K=" << g.K);
  HG_CHECK(k_pad % kPadK == 0 && k_pad >= g.K, op << ": weight matrix row length " << k_pad << " must be a multiple of "
                                                  << kPadK << " and >= K=" << g.K);
  HG_CHECK(!e.out_operand, op << ": the FP32 kernel writes an FP32 output");
  const dim3 grid((g.M + kTile - 1) / kTile, (e.N + kTile - 1) / kTile);
  HG_CHECK(grid.y <= 65535, op << ": " << e.N << " GEMM columns exceed the grid");
  simt_igemm_kernel<<<grid, kThreads, 0, cuda::stream()>>>(g, B, k_pad, e);
  HG_CUDA_LAUNCH_CHECK(op);
}

void simt_wgrad(const Gather& g, const float* dy, int cout, float* partial, int splits, const char* op) {
  HG_CHECK(g.M >= 1 && g.K >= 1 && cout >= 1 && splits >= 1,
           op << ": wgrad needs M, K, Cout, splits >= 1; got M=" << g.M << " K=" << g.K << " Cout=" << cout << " splits=" << splits);
  HG_CHECK(!g.transposed, op << ": wgrad gathers its input with the forward gather");
  const int per = (g.M + splits - 1) / splits;
  const int rows_per_split = (per + kSlice - 1) / kSlice * kSlice;
  const dim3 grid((cout + kTile - 1) / kTile, (g.K + kTile - 1) / kTile, splits);
  HG_CHECK(grid.y <= 65535 && grid.z <= 65535, op << ": wgrad grid exceeds the limits");
  simt_wgrad_kernel<<<grid, kThreads, 0, cuda::stream()>>>(g, dy, cout, partial, rows_per_split);
  HG_CUDA_LAUNCH_CHECK(op);
}

}  // namespace halfgrad::ops::conv::igemm
