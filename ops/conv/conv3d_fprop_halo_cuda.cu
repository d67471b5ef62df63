// conv3d_fprop_halo_cuda.cu - the "same" 3x3x3 convolution (kernel 3, stride 1, padding 1, dilation 1
// on every axis) of 16-bit operands (FP16 or BF16) on a halo tile in shared memory: conv3d's fprop and
// dgrad for the U-Net's level-0 layers (16 or 32 output channels). tc_halo_conv in conv_igemm.cuh;
// conv3d_cuda.cu calls it where halo_conv_applies (conv_halo_path.h) holds, else tc_igemm.
//
// Math (the implicit GEMM of conv_igemm.cuh, per output voxel, with the halo as A's source):
//   y[n, z, y, x, co] = bias[co] + sum over taps (a, b, e) in 0..2^3 and c < C of
//                       src[n, z - 1 + a, y - 1 + b, x - 1 + e, c] * B[co][tap * C + c]   (zero outside)
//   fprop: src = x (C = Cin), B packed PackOrder::Fprop, co < Cout.
//   dgrad: src = dy (C = Cout), B packed PackOrder::Dgrad (B[ci][tap * Cout + co] = w[co][ci][tap]),
//          co < Cin; the transposed gather of stride 1, padding 1 reads iz = z + 1 - a, i.e. the forward
//          gather of the flipped tap 26 - tap, so the kernel stores B's tap t in shared-memory tap slot
//          26 - t once per block and the main loop is the same for both.
// Layout: src (n, d, h, w, C) and y (n, d, h, w, N) channels-last, the kernel's 16-bit type T; B (n_pad,
// k_pad) row-major, as pack_weights builds it for tc_igemm; bias (N) in T or null.
//
// Parallel mapping: a tile is 8 x 8 x 8 output voxels (z, y, x) of one sample; the grid is persistent
// (as many blocks as fit on the GPU at once, each looping over tiles tile = blockIdx.x, + gridDim.x, ...),
// so each block loads the weights once, not once per tile. Per tile the block (8 warps, 256 threads)
// copies the halo, (8 + 2)^3 voxels x C channels, into shared memory with 16-byte cp.async, zero-filled
// outside the volume (that is the padding). Warp w owns output slice z = w: 64 voxels = 4 m16 tiles, tile
// i holding rows y = 2i, 2i + 1 (row r of the tile: y = 2i + r / 8, x = r % 8). For each tap and each
// 16-channel step of C the warp does one ldmatrix.x4 of A per m16 tile (lane l gives the address of
// halo voxel (w + a, 2i + (l % 16) / 8 + b, l % 8 + e), channels 16 kc + 8 (l / 16): the tap is only a
// different row address, an offset common to all lanes), one ldmatrix.x4 of B per pair of n8 columns, and
// 4 x N/8 mma.sync.m16n8k16. MMAs per tile: 32 m16 tiles x N/8 x 27 C/16 (16 -> 16: 1728).
// Why 8^3: the halo costs (10/8)^3 = 1.95x the tile's voxels (4x8x8 would cost 2.34x), 8 warps keep
// the 64-voxel slices whole, and 8 divides the U-Net's extents (64, 32, 16), so no lane idles there;
// a tile that sticks out of the volume computes on zeros and stores only its inside voxels.
// Why persistent: the 16 -> 16 weights (14 KB) are a third of the halo's 48 KB; reloading them per
// tile would add a third to the L2 traffic. Several blocks per SM (occupancy below) overlap one
// block's halo copy with another's MMAs, so no double buffer is needed.
//
// Epilogue: bias added in FP32, rounded once to T, written as pairs into a staging tile (the halo's
// shared memory, free once every warp has finished its MMAs), then copied out as 16-byte stores:
// consecutive threads store consecutive 16-byte chunks of consecutive x, coalesced.
//
// BatchNorm fusion (conv_bn_halo.cuh, tc_halo_conv_bn; fprop, C = 16 or 32, no bias), two template
// switches of halo_mma_kernel, each off in the plain convolution:
//   kNormIn (prologue): src is the previous conv's raw output y'; the halo copy goes through registers
//     (16-byte global loads instead of cp.async) and stores relu((y' - mean_c) * scale_c + beta_c),
//     FP32 fmaf, rounded once to T (batch_norm's apply and relu, in one rounding instead of two: the
//     unfused path rounds the BN output and relu keeps it); voxels outside the volume stay 0, the
//     padding of the normalised tensor. (mean, scale, beta) of the C channels sit in shared memory.
//   kStats (epilogue): after the staging tile is written, thread t sums channel t % N over the voxels
//     t / N, + 256 / N, ... inside the volume: K = the tile's voxel-0 value of the channel (0 if not
//     finite), s1 = sum (y - K), s2 = sum (y - K)^2 in FP32 over the rounded y; then N threads add
//     the 256 / N partials of their channel in order and write {K, s1, s2, count} to tile_stats[tile][c].
//     No atomics: every tile's record is written by one thread, so the bits do not depend on the grid.
//   Cost: 3 KB more static shared memory per block (the blocks per SM above are unchanged: 16 -> 16
//   needs 3 x 66.2 KB, 32 -> 16 2 x 112 KB of the 228 KB), 512 x N / 256 shared loads per thread and
//   tile for the statistics (64 for N = 32, against the 27 x 5 ldmatrix.x4 of the main loop), and in the
//   prologue a subtract, an FMA and a compare per loaded 16-bit value (each voxel is loaded about 1.95
//   times, the halo factor). The direct kernel (C = 1) has kStats too: it stages its rounded outputs in
//   a static [512][N] tile (16 / 32 KB) for the same write_tile_stats; it has no kNormIn (its input is
//   the network's).
//
// Shared memory (bytes), rows padded to an odd number of 16-byte chunks (the bank argument below):
//   halo    1000 voxels x (C + 8) halfs   C = 16: 48,000   C = 32: 80,000   (staging reuses it:
//                                          512 voxels x (N + 8) halfs = 24,576 / 40,960, always smaller)
//   weights N rows x (27 C + 8) halfs      16 -> 16: 14,080  16 -> 32: 28,160  32 -> 16: 27,904  32 -> 32: 55,808
//   per block: 16 -> 16 62,080 (3 blocks/SM on H200, 24 warps), 16 -> 32 76,160 and 32 -> 16 107,904
//   (2 blocks, 16 warps), 32 -> 32 135,808 (1 block, 8 warps; fits the A100's 163 KB too).
// Banks: the 8 rows one 8x8 ldmatrix matrix reads are 8 consecutive halo voxels along x (the tap only
// shifts them), 16 bytes each. With a row stride of S 16-byte chunks, S odd, the 8 rows fall on 8
// distinct 16-byte slots modulo 128 bytes, i.e. all 32 banks once: conflict-free. Unpadded, C = 16 (S =
// 2) would be 2-way and C = 32 (S = 4) 4-way conflicted. The weight rows (8 consecutive output channels
// per matrix) and the staging rows (8 voxels x 4 lanes x 4 bytes per store) are padded the same way.
//
// C = 1 (the first layer, K = 27): halo_direct_kernel, no Tensor Cores. Each thread computes 2 voxels
// (z and z + 4, same y, x) x N outputs in FP32 FMAs from a float halo (1000 x 4 bytes) and float
// weights [tap][N] read as broadcast float4 loads: 27 x N x 2 FMAs per 54 halo and 27 N/4 weight loads.
// Chosen over padding K 27 -> 32 for the MMA: with one channel per voxel no ldmatrix row is 16
// contiguous bytes of A, so every A fragment would be built from scalar 2-byte shared loads (8 per
// lane per m16 x k16 fragment, against one ldmatrix), and the N = 16 MMA tile is narrow; and the
// FMA work is small: 432 FMAs per voxel (N = 16) are ~14 us of FP32 issue for the 1 M voxels of
// batch 4 at 64^3, below the ~9-25 us that x (2 MB) and y (34 MB) take to move plus the latency.
//
// Precision: 16-bit operands, products exact in FP32, FP32 accumulation (MMA registers or FMAs), bias
// in FP32, one rounding to T (round to nearest even). The summation order is fixed by the code (taps in
// order, channels in 16-steps inside the MMA), so a given input gives the same bits on every run and
// every grid size; it differs from tc_igemm's order (32-wide K slices), so the two agree to the
// rounding tolerance, not bit for bit.

#include <algorithm>
#include <cstring>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "ops/conv/conv_bn_halo.cuh"
#include "ops/conv/conv_igemm.cuh"
#include "ops/tensor_core/warp_tile.cuh"

namespace halfgrad::ops::conv::igemm {
namespace {

constexpr int kTile = 8;                          // output voxels per tile along z, y and x
constexpr int kHalo = kTile + 2;                  // halo extent per axis (one voxel of padding each side)
constexpr int kHaloVoxels = kHalo * kHalo * kHalo;
constexpr int kTileVoxels = kTile * kTile * kTile;
constexpr int kTaps = 27;
constexpr int kWarps = kTile;                     // warp w owns output slice z = w
constexpr int kThreads = kWarps * 32;
constexpr int kInstrM = Mma16816::kM, kInstrN = Mma16816::kN, kInstrK = Mma16816::kK;
constexpr int kMmaM = kTile * kTile / kInstrM;    // m16 tiles per warp (two y rows of 8 x each)
static_assert(kTile == 8 && kInstrM == 2 * kTile, "an m16 tile is two x-rows of 8 voxels");

/// Halfs per shared-memory row holding `halfs` values: rounded up to whole 16-byte chunks, then to an
/// odd number of chunks (file comment: conflict-free ldmatrix).
constexpr int odd_row(int halfs) {
  const int chunks = (halfs + 7) / 8;
  return (chunks % 2 ? chunks : chunks + 1) * 8;
}

/// The shared-memory layout of the Tensor Core kernel for C gathered and N output channels (file comment).
template <int kC, int kN>
struct HaloLayout {
  static_assert(kC % kInstrK == 0, "a 16-channel MMA step stays inside one tap");
  static_assert(kN % 16 == 0, "output channels come in pairs of n8 tiles (one ldmatrix.x4 of B)");
  static constexpr int kK = kTaps * kC;
  static constexpr int kVoxelRow = odd_row(kC);   // halfs per halo voxel
  static constexpr int kWeightRow = odd_row(kK);  // halfs per weight row (one output channel)
  static constexpr int kStageRow = odd_row(kN);   // halfs per staged output voxel
  static constexpr int kHaloBytes = kHaloVoxels * kVoxelRow * 2;
  static constexpr int kStageBytes = kTileVoxels * kStageRow * 2;
  static constexpr int kRegionBytes = kHaloBytes > kStageBytes ? kHaloBytes : kStageBytes;
  static constexpr int kSmemBytes = kRegionBytes + kN * kWeightRow * 2;
  // Blocks per SM the register cap is sized for (__launch_bounds__): as many as the shared memory of an
  // H200 SM allows (228 KB, 1 KB reserved per block), at most 3 for N = 16 (<= 80 registers per thread)
  // and 2 for N = 32 (<= 128: its 64 accumulators per thread would spill at 80).
  static constexpr int kBlocksBySmem = (228 * 1024) / (kSmemBytes + 1024);
  static constexpr int kMaxBlocks = kN == 16 ? 3 : 2;
  static constexpr int kMinBlocks = kBlocksBySmem < 1 ? 1 : kBlocksBySmem < kMaxBlocks ? kBlocksBySmem : kMaxBlocks;
};

/// What both kernels need besides the template arguments.
struct HaloArgs {
  const void* src;    // (n, d, h, w, C) channels-last, T
  const void* B;      // (n_pad, k_pad) packed weights, T
  int k_pad;
  const void* bias;   // (N) T, or null
  void* out;          // (n, d, h, w, N) channels-last, T
  int d, h, w;
  bool transposed;    // dgrad: B's tap t goes to slot 26 - t (file comment)
  int tiles_x, tiles_y, tiles_z, num_tiles;
  // BatchNorm fusion (conv_bn_halo.cuh; both null for the plain convolution):
  const float* norm_in;  // (3, C) mean, scale, beta of the previous BN: src is loaded as relu((src - mean) * scale + beta)
  float4* tile_stats;    // (num_tiles, N) per tile and output channel {K, sum (y - K), sum (y - K)^2, count}
  // kReluGrad (dgrad only): the output is da = dL/d(relu(BN(h))) of the layer whose raw output h is
  // relu_src (n, d, h, w, N), T; norm_out (3, N) its BN's (mean, scale, beta). The kernel writes
  // dz = relu'(a) da instead and tile_stats {sum dz, sum dz (h - mean), 0, count}.
  const float* norm_out;
  const void* relu_src;
};

/// Tile index -> sample and origin of its output voxels.
__device__ __forceinline__ void tile_origin(const HaloArgs& a, int tile, int& n, int& z0, int& y0, int& x0) {
  int r = tile;
  const int tx = r % a.tiles_x;
  r /= a.tiles_x;
  const int ty = r % a.tiles_y;
  r /= a.tiles_y;
  const int tz = r % a.tiles_z;
  n = r / a.tiles_z;
  z0 = tz * kTile;
  y0 = ty * kTile;
  x0 = tx * kTile;
}

__device__ __forceinline__ bool inside(const HaloArgs& a, int z, int y, int x) {
  return static_cast<unsigned>(z) < static_cast<unsigned>(a.d) && static_cast<unsigned>(y) < static_cast<unsigned>(a.h) &&
         static_cast<unsigned>(x) < static_cast<unsigned>(a.w);
}

__device__ __forceinline__ int64_t voxel_index(const HaloArgs& a, int n, int z, int y, int x) {
  return ((static_cast<int64_t>(n) * a.d + z) * a.h + y) * a.w + x;
}

// ---- the BatchNorm statistics of a staged tile (kStats; file comment) -----------------------------
constexpr int kStatFloats = 3 * kThreads;  // stat_s: per-thread s1, s2, count

/// Writes tile_stats[tile][c] for the kN channels of the staged tile `stage` (512 voxels, kStageRow halfs
/// apart, rounded as written), tile origin (z0, y0, x0). stat_s holds kStatFloats floats. Every thread
/// calls it after a __syncthreads that follows the staging stores; it leaves stage untouched and its
/// last reads of stat_s are behind the next tile's loop-start __syncthreads.
template <typename T, int kN, int kStageRow>
__device__ __forceinline__ void write_tile_stats(const HaloArgs& a, const T* stage, float* stat_s, int tile, int z0, int y0,
                                                 int x0) {
  constexpr int kStatGroups = kThreads / kN;  // threads per output channel
  static_assert(kThreads % kN == 0, "every channel gets the same number of threads");
  const int tid = threadIdx.x, c = tid % kN;
  // K = the channel's value at voxel 0 (always inside: the tile's origin is), or 0 if not finite
  // (norm_reduce.cuh's norm_shift rule: an inf among finite values then gives an inf mean, not NaN).
  float K = operand_to_float(stage[c]);
  if (!isfinite(K)) K = 0.f;
  float s1 = 0.f, s2 = 0.f, cnt = 0.f;
  for (int v = tid / kN; v < kTileVoxels; v += kStatGroups) {
    const int z = z0 + v / (kTile * kTile), y = y0 + (v / kTile) % kTile, x = x0 + v % kTile;
    if (!inside(a, z, y, x)) continue;
    const float d = operand_to_float(stage[v * kStageRow + c]) - K;
    s1 += d;
    s2 = fmaf(d, d, s2);
    cnt += 1.f;
  }
  stat_s[tid] = s1;
  stat_s[kThreads + tid] = s2;
  stat_s[2 * kThreads + tid] = cnt;
  __syncthreads();
  if (tid < kN) {  // the kStatGroups partials of channel tid, in group order: the same bits every run
    float t1 = 0.f, t2 = 0.f, tc = 0.f;
    for (int q = 0; q < kStatGroups; ++q) {
      t1 += stat_s[q * kN + tid];
      t2 += stat_s[kThreads + q * kN + tid];
      tc += stat_s[2 * kThreads + q * kN + tid];
    }
    a.tile_stats[static_cast<int64_t>(tile) * kN + tid] = make_float4(K, t1, t2, tc);
  }
}

/// kReluGrad's epilogue on the staged tile of da (file comment): per inside voxel and channel c, with h
/// from relu_src and (mean, scale, beta) = norm_out_s[c, N + c, 2N + c]: a = relu((h - mean) * scale +
/// beta) rounded to T exactly as the forward's prologue, dz = a > 0 or NaN ? da : 0 (relu's backward),
/// stored back into the stage (the copy-out then writes dz), and FP32 sums of dz and dz (h - mean)
/// written to tile_stats[tile][c] = {s1, s2, 0, count} in the fixed order of write_tile_stats.
template <typename T, int kN, int kStageRow>
__device__ __forceinline__ void relu_bn_grad_tile(const HaloArgs& a, T* stage, float* stat_s, const float* norm_out_s,
                                                  int tile, int n, int z0, int y0, int x0) {
  constexpr int kStatGroups = kThreads / kN;
  const int tid = threadIdx.x, c = tid % kN;
  const T* h_src = static_cast<const T*>(a.relu_src);
  const float mean = norm_out_s[c], scale = norm_out_s[kN + c], beta = norm_out_s[2 * kN + c];
  float s1 = 0.f, s2 = 0.f, cnt = 0.f;
  for (int v = tid / kN; v < kTileVoxels; v += kStatGroups) {
    const int z = z0 + v / (kTile * kTile), y = y0 + (v / kTile) % kTile, x = x0 + v % kTile;
    if (!inside(a, z, y, x)) continue;
    const float h = operand_to_float(h_src[voxel_index(a, n, z, y, x) * kN + c]);
    const float pre = fmaf(h - mean, scale, beta);
    const float act = operand_to_float(operand_from_float<T>(pre < 0.f ? 0.f : pre));
    T& slot = stage[v * kStageRow + c];
    const float dz = act <= 0.f ? 0.f : operand_to_float(slot);  // threshold_backward: NaN passes da
    slot = operand_from_float<T>(dz);  // exact: dz is da or 0
    s1 += dz;
    s2 = fmaf(dz, h - mean, s2);
    cnt += 1.f;
  }
  stat_s[tid] = s1;
  stat_s[kThreads + tid] = s2;
  stat_s[2 * kThreads + tid] = cnt;
  __syncthreads();  // also orders the dz stores before the copy-out
  if (tid < kN) {
    float t1 = 0.f, t2 = 0.f, tc = 0.f;
    for (int q = 0; q < kStatGroups; ++q) {
      t1 += stat_s[q * kN + tid];
      t2 += stat_s[kThreads + q * kN + tid];
      tc += stat_s[2 * kThreads + q * kN + tid];
    }
    a.tile_stats[static_cast<int64_t>(tile) * kN + tid] = make_float4(t1, t2, 0.f, tc);
  }
}

// ---- the Tensor Core kernel (C = 16, 32) ------------------------------------------------------------
// kNormIn: the halo is loaded through registers and normalised (BN + ReLU of the previous layer, the
// prologue fusion); kStats: the epilogue also writes per-tile BN partial sums of the rounded output.
// Both false is the plain convolution, whose code is unchanged by them (if constexpr).
// kReluGrad: the dgrad epilogue of relu_bn_grad_tile (the backward fusion; never with kStats).
template <typename T, int kC, int kN, bool kNormIn = false, bool kStats = false, bool kReluGrad = false>
__global__ void __launch_bounds__(kThreads, HaloLayout<kC, kN>::kMinBlocks) halo_mma_kernel(HaloArgs a) {
  using L = HaloLayout<kC, kN>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* halo = reinterpret_cast<T*>(smem_raw);  // also the output staging tile after the MMAs
  T* wts = reinterpret_cast<T*>(smem_raw + L::kRegionBytes);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const T* src = static_cast<const T*>(a.src);
  const T* B = static_cast<const T*>(a.B);

  // Weights, once per block: row co, tap t of B -> slot t (fprop) or 26 - t (dgrad), 16-byte chunks.
  constexpr int kChunksPerTap = kC / 8;
  for (int i = tid; i < kN * kTaps * kChunksPerTap; i += kThreads) {
    const int co = i / (kTaps * kChunksPerTap), r = i % (kTaps * kChunksPerTap);
    const int tap = r / kChunksPerTap, c = r % kChunksPerTap;
    const int slot = a.transposed ? kTaps - 1 - tap : tap;
    cp_async_16(wts + co * L::kWeightRow + slot * kC + c * 8, B + static_cast<int64_t>(co) * a.k_pad + tap * kC + c * 8, 16);
  }
  cp_async_commit();  // waited for with the first tile's halo

  // This lane's bias values: columns 8j + Acc::pair_col(lane) and + 1 of each n8 tile j.
  constexpr int kMmaN = kN / kInstrN;
  float bias[kMmaN][2];
#pragma unroll
  for (int j = 0; j < kMmaN; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      bias[j][h] = a.bias ? operand_to_float(static_cast<const T*>(a.bias)[j * kInstrN + Acc::pair_col(lane) + h]) : 0.f;

  // ldmatrix row offsets (halfs) at tap (0, 0, 0), channel step 0 (file comment: parallel mapping).
  // Both operands keep K (channels) contiguous: A's rows are voxels of the halo, the lane's row r of
  // m16 tile i being halo voxel (2i + r / 8, r % 8) of the warp's plane; B's rows output channels.
  const LaneCoord a_at = LdmatrixX4::a<true>(lane), b_at = LdmatrixX4::b_pair<true>(lane);
  int a_row[kMmaM];
#pragma unroll
  for (int i = 0; i < kMmaM; ++i)
    a_row[i] = ((warp * kHalo + 2 * i + a_at.row / 8) * kHalo + a_at.row % 8) * L::kVoxelRow + a_at.col;
  using Weights = SmemOperand<PaddedRows<L::kWeightRow>, true>;  // rows co, (tap, channel) contiguous
  const uint32_t halo_s = shared_address(halo), wts_s = shared_address(wts);  // byte addresses (.shared)

  // The previous BN's per-channel (mean, scale, beta), read by the halo load (kNormIn); the first
  // tile's __syncthreads orders these stores before any read.
  __shared__ float norm_s[kNormIn ? 3 * kC : 1];
  if constexpr (kNormIn)
    for (int i = tid; i < 3 * kC; i += kThreads) norm_s[i] = a.norm_in[i];
  __shared__ float stat_s[kStats || kReluGrad ? kStatFloats : 1];  // write_tile_stats' partials
  static_assert(!(kStats && kReluGrad), "one epilogue reduction per kernel");
  __shared__ float norm_out_s[kReluGrad ? 3 * kN : 1];  // (mean, scale, beta) of the output channels
  if constexpr (kReluGrad)
    for (int i = tid; i < 3 * kN; i += kThreads) norm_out_s[i] = a.norm_out[i];

  for (int tile = blockIdx.x; tile < a.num_tiles; tile += gridDim.x) {
    int n, z0, y0, x0;
    tile_origin(a, tile, n, z0, y0, x0);
    __syncthreads();  // the previous tile's staging reads are done: the halo may be overwritten

    for (int i = tid; i < kHaloVoxels * kChunksPerTap; i += kThreads) {
      const int v = i / kChunksPerTap, c = i % kChunksPerTap;
      const int hz = v / (kHalo * kHalo), hy = (v / kHalo) % kHalo, hx = v % kHalo;
      const int z = z0 - 1 + hz, y = y0 - 1 + hy, x = x0 - 1 + hx;
      const bool in = inside(a, z, y, x);
      if constexpr (kNormIn) {
        // relu((src - mean) * scale + beta), rounded once to T; outside the volume 0, the padding of the
        // normalised tensor (not relu(beta - mean * scale)). NaN stays NaN (v < 0 is false), as relu.
        int4 chunk = make_int4(0, 0, 0, 0);
        if (in) {
          chunk = *reinterpret_cast<const int4*>(src + voxel_index(a, n, z, y, x) * kC + c * 8);
          T* e = reinterpret_cast<T*>(&chunk);
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const int ch = c * 8 + k;
            const float val = fmaf(operand_to_float(e[k]) - norm_s[ch], norm_s[kC + ch], norm_s[2 * kC + ch]);
            e[k] = operand_from_float<T>(val < 0.f ? 0.f : val);
          }
        }
        *reinterpret_cast<int4*>(halo + v * L::kVoxelRow + c * 8) = chunk;
      } else {
        const T* p = in ? src + voxel_index(a, n, z, y, x) * kC + c * 8 : src;  // zero-fill: a valid address, 0 bytes read
        cp_async_16(halo + v * L::kVoxelRow + c * 8, p, in ? 16 : 0);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    WarpAccumulator<kMmaM, kMmaN> acc;
    acc.zero();

    // Taps (a, b) in a rolled loop, e and the channel steps unrolled: a full unroll let the compiler
    // hoist ldmatrix results far ahead of their MMAs (124..212 registers, spills under the cap).
    // A's rows are the halo's voxels shifted by the tap (this kernel's gather, a_row + shift); B is the
    // weight tile, K = (tap, channel) contiguous, read as ops/tensor_core/warp_tile.cuh's operand.
#pragma unroll 1
    for (int ab = 0; ab < 9; ++ab) {
#pragma unroll
    for (int e = 0; e < 3; ++e) {
      const int tap = ab * 3 + e;
      const int shift = ((ab / 3) * kHalo * kHalo + (ab % 3) * kHalo + e) * L::kVoxelRow;
#pragma unroll
      for (int kc = 0; kc < kC / kInstrK; ++kc) {
        uint32_t b[kMmaN][2];
#pragma unroll
        for (int j = 0; j < kMmaN; j += 2) Weights::load_b_pair(b[j], b[j + 1], wts_s, j * kInstrN, tap * kC + kc * kInstrK, b_at);
#pragma unroll
        for (int i = 0; i < kMmaM; ++i) {
          uint32_t af[4];
          LdmatrixX4::load_a<true>(af, halo_s + 2 * (a_row[i] + shift + kc * kInstrK));
          acc.template mma_row<T>(i, af, b);
        }
      }
    }
    }
    __syncthreads();  // every warp is done with the halo: it becomes the staging tile

    // Pair h of accumulator (i, j) is tile voxel 64 warp + row, columns col and col + 1.
    acc.for_each_pair(lane, [&](int, int j, int, int row, int col, float v0, float v1) {
      const int v = warp * kTile * kTile + row;
      store_operand_pair(halo + v * L::kStageRow + col, v0 + bias[j][0], v1 + bias[j][1]);
    });
    __syncthreads();

    // BN statistics of the staged tile; stat_s is next written after the next tile's MMAs.
    if constexpr (kStats) write_tile_stats<T, kN, L::kStageRow>(a, halo, stat_s, tile, z0, y0, x0);
    if constexpr (kReluGrad) relu_bn_grad_tile<T, kN, L::kStageRow>(a, halo, stat_s, norm_out_s, tile, n, z0, y0, x0);

    T* out = static_cast<T*>(a.out);
    constexpr int kOutChunks = kN / 8;
    for (int i = tid; i < kTileVoxels * kOutChunks; i += kThreads) {
      const int v = i / kOutChunks, c = i % kOutChunks;
      const int z = z0 + v / (kTile * kTile), y = y0 + (v / kTile) % kTile, x = x0 + v % kTile;
      if (!inside(a, z, y, x)) continue;
      *reinterpret_cast<int4*>(out + voxel_index(a, n, z, y, x) * kN + c * 8) =
          *reinterpret_cast<const int4*>(halo + v * L::kStageRow + c * 8);
    }
  }
}

// ---- the direct kernel (C = 1) -------------------------------------------------------------------
/// v0, v1 rounded to T (round to nearest even) as one 32-bit word, v0 in the low half (memory order).
template <typename T>
__device__ __forceinline__ int pack_pair(float v0, float v1) {
  uint32_t bits;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(v0, v1);
    memcpy(&bits, &p, 4);
  } else {
    const __half2 p = __floats2half2_rn(v0, v1);
    memcpy(&bits, &p, 4);
  }
  return static_cast<int>(bits);
}

constexpr int kDirectVoxels = kTileVoxels / kThreads;  // voxels per thread: z and z + 4 (same y, x)
static_assert(kDirectVoxels == 2, "the direct kernel's thread owns z and z + kTile / 2");

// Register cap: 3 blocks per SM for N = 16 (<= 80 registers; at 64 it spilled), 2 for N = 32 (the 64 accumulators).
// kStats: the rounded outputs are also staged in shared memory and write_tile_stats sums them (the
// BatchNorm statistics of the first layer, conv_bn_halo.cuh); off in the plain convolution.
template <typename T, int kN, bool kStats = false>
__global__ void __launch_bounds__(kThreads, kN == 16 ? 3 : 2) halo_direct_kernel(HaloArgs a) {
  static_assert(kN % 8 == 0, "outputs are stored as 16-byte chunks of 8 channels");
  __shared__ float halo[kHaloVoxels];
  __shared__ __align__(16) float wts[kTaps][kN];  // [slot][co]
  const int tid = threadIdx.x;
  const T* src = static_cast<const T*>(a.src);
  const T* B = static_cast<const T*>(a.B);
  for (int i = tid; i < kTaps * kN; i += kThreads) {
    const int co = i / kTaps, tap = i % kTaps;
    wts[a.transposed ? kTaps - 1 - tap : tap][co] = operand_to_float(B[static_cast<int64_t>(co) * a.k_pad + tap]);
  }
  __shared__ __align__(16) float bias[kN];
  for (int co = tid; co < kN; co += kThreads) bias[co] = a.bias ? operand_to_float(static_cast<const T*>(a.bias)[co]) : 0.f;
  // kStats: the tile's rounded outputs [voxel][co] (16 KB for N = 16, 32 KB for 32) and the partials.
  __shared__ __align__(16) uint16_t stage_bits[kStats ? kTileVoxels * kN : 8];  // T's bits (no constructor)
  T* stage = reinterpret_cast<T*>(stage_bits);
  __shared__ float stat_s[kStats ? kStatFloats : 1];

  const int lz = tid / (kTile * kTile), ly = (tid / kTile) % kTile, lx = tid % kTile;  // lz < kTile / 2
  for (int tile = blockIdx.x; tile < a.num_tiles; tile += gridDim.x) {
    int n, z0, y0, x0;
    tile_origin(a, tile, n, z0, y0, x0);
    __syncthreads();  // the previous tile's halo reads are done (and, the first time, the weights are stored)
    for (int v = tid; v < kHaloVoxels; v += kThreads) {
      const int z = z0 - 1 + v / (kHalo * kHalo), y = y0 - 1 + (v / kHalo) % kHalo, x = x0 - 1 + v % kHalo;
      halo[v] = inside(a, z, y, x) ? operand_to_float(src[voxel_index(a, n, z, y, x)]) : 0.f;
    }
    __syncthreads();

    float acc[kDirectVoxels][kN];
#pragma unroll
    for (int q = 0; q < kDirectVoxels; ++q)
#pragma unroll
      for (int co = 0; co < kN; ++co) acc[q][co] = 0.f;
#pragma unroll 1
    for (int ab = 0; ab < 9; ++ab) {  // rolled over (a, b) for the register cap, as in halo_mma_kernel
#pragma unroll
    for (int e = 0; e < 3; ++e) {
      const int tap = ab * 3 + e;
      const int base = ((lz + ab / 3) * kHalo + ly + ab % 3) * kHalo + lx + e;
      const float h0 = halo[base], h1 = halo[base + (kTile / 2) * kHalo * kHalo];
#pragma unroll
      for (int co = 0; co < kN; co += 4) {
        const float4 w4 = *reinterpret_cast<const float4*>(&wts[tap][co]);
        acc[0][co] = fmaf(h0, w4.x, acc[0][co]);
        acc[0][co + 1] = fmaf(h0, w4.y, acc[0][co + 1]);
        acc[0][co + 2] = fmaf(h0, w4.z, acc[0][co + 2]);
        acc[0][co + 3] = fmaf(h0, w4.w, acc[0][co + 3]);
        acc[1][co] = fmaf(h1, w4.x, acc[1][co]);
        acc[1][co + 1] = fmaf(h1, w4.y, acc[1][co + 1]);
        acc[1][co + 2] = fmaf(h1, w4.z, acc[1][co + 2]);
        acc[1][co + 3] = fmaf(h1, w4.w, acc[1][co + 3]);
      }
    }
    }

    T* out = static_cast<T*>(a.out);
#pragma unroll
    for (int q = 0; q < kDirectVoxels; ++q) {
      const int z = z0 + lz + q * (kTile / 2), y = y0 + ly, x = x0 + lx;
      if (!inside(a, z, y, x)) continue;
      T* dst = out + voxel_index(a, n, z, y, x) * kN;
#pragma unroll
      for (int co = 0; co < kN; co += 8) {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = acc[q][co + k] + bias[co + k];  // the bias after the sum, as tc_igemm
        const int4 chunk = make_int4(pack_pair<T>(v[0], v[1]), pack_pair<T>(v[2], v[3]), pack_pair<T>(v[4], v[5]),
                                     pack_pair<T>(v[6], v[7]));
        *reinterpret_cast<int4*>(dst + co) = chunk;
      }
    }
    if constexpr (kStats) {
      // Stage every voxel's rounded outputs (outside ones too: write_tile_stats skips them), then sum.
#pragma unroll
      for (int q = 0; q < kDirectVoxels; ++q) {
        const int v = (lz + q * (kTile / 2)) * kTile * kTile + ly * kTile + lx;  // tile voxel index
#pragma unroll
        for (int co = 0; co < kN; co += 8) {
          float w8[8];
#pragma unroll
          for (int k = 0; k < 8; ++k) w8[k] = acc[q][co + k] + bias[co + k];
          *reinterpret_cast<int4*>(stage + v * kN + co) = make_int4(
              pack_pair<T>(w8[0], w8[1]), pack_pair<T>(w8[2], w8[3]), pack_pair<T>(w8[4], w8[5]), pack_pair<T>(w8[6], w8[7]));
        }
      }
      __syncthreads();
      write_tile_stats<T, kN, kN>(a, stage, stat_s, tile, z0, y0, x0);  // stage is rewritten after two more syncs
    }
  }
}

// ---- launch ----------------------------------------------------------------------------------------
/// Launches `kernel` persistently: as many blocks as fit on the device at once (occupancy query, once
/// per kernel), at most one per tile.
template <void (*kKernel)(HaloArgs)>
void launch_persistent(int smem_bytes, const HaloArgs& a, const char* op) {
  const auto kernel = kKernel;
  static const int per_sm = [&] {
    if (smem_bytes > 48 * 1024)
      HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    int blocks = 0;
    HG_CUDA_CHECK(op, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem_bytes));
    return blocks;
  }();
  HG_CHECK(per_sm >= 1, op << ": the halo convolution kernel (" << smem_bytes << " bytes of shared memory) does not fit an SM");
  const int blocks = static_cast<int>(std::min<int64_t>(a.num_tiles, int64_t{per_sm} * cuda::sm_count()));
  kernel<<<blocks, kThreads, smem_bytes, cuda::stream()>>>(a);
  HG_CUDA_LAUNCH_CHECK(op);
}

template <typename T>
void launch_for_channels(const Gather& g, const HaloArgs& a, int N, const char* op) {
  if (g.c == 1) {
    if (N == 16) launch_persistent<halo_direct_kernel<T, 16>>(0, a, op);
    else launch_persistent<halo_direct_kernel<T, 32>>(0, a, op);
  } else if (g.c == 16) {
    if (N == 16) launch_persistent<halo_mma_kernel<T, 16, 16>>(HaloLayout<16, 16>::kSmemBytes, a, op);
    else launch_persistent<halo_mma_kernel<T, 16, 32>>(HaloLayout<16, 32>::kSmemBytes, a, op);
  } else {
    if (N == 16) launch_persistent<halo_mma_kernel<T, 32, 16>>(HaloLayout<32, 16>::kSmemBytes, a, op);
    else launch_persistent<halo_mma_kernel<T, 32, 32>>(HaloLayout<32, 32>::kSmemBytes, a, op);
  }
}

// The BatchNorm-fused variants: the Tensor Core kernel with either fusion; the direct kernel (C = 1, the
// network's input: nothing to normalise) with statistics only.
template <typename T, bool kNormIn, bool kStats>
void launch_bn_for_channels(const Gather& g, const HaloArgs& a, int N, const char* op) {
  if constexpr (kStats && !kNormIn) {
    if (g.c == 1) {
      if (N == 16) launch_persistent<halo_direct_kernel<T, 16, true>>(0, a, op);
      else launch_persistent<halo_direct_kernel<T, 32, true>>(0, a, op);
      return;
    }
  }
  if (g.c == 16) {
    if (N == 16) launch_persistent<halo_mma_kernel<T, 16, 16, kNormIn, kStats>>(HaloLayout<16, 16>::kSmemBytes, a, op);
    else launch_persistent<halo_mma_kernel<T, 16, 32, kNormIn, kStats>>(HaloLayout<16, 32>::kSmemBytes, a, op);
  } else {
    if (N == 16) launch_persistent<halo_mma_kernel<T, 32, 16, kNormIn, kStats>>(HaloLayout<32, 16>::kSmemBytes, a, op);
    else launch_persistent<halo_mma_kernel<T, 32, 32, kNormIn, kStats>>(HaloLayout<32, 32>::kSmemBytes, a, op);
  }
}

template <typename T>
void launch_bn(const Gather& g, const HaloArgs& a, int N, const char* op) {
  if (a.norm_in && a.tile_stats) launch_bn_for_channels<T, true, true>(g, a, N, op);
  else if (a.norm_in) launch_bn_for_channels<T, true, false>(g, a, N, op);
  else if (a.tile_stats) launch_bn_for_channels<T, false, true>(g, a, N, op);
  else launch_for_channels<T>(g, a, N, op);
}

template <typename T>
void launch_relu_grad(const Gather& g, const HaloArgs& a, int N, const char* op) {
  if (g.c == 16) {
    if (N == 16) launch_persistent<halo_mma_kernel<T, 16, 16, false, false, true>>(HaloLayout<16, 16>::kSmemBytes, a, op);
    else launch_persistent<halo_mma_kernel<T, 16, 32, false, false, true>>(HaloLayout<16, 32>::kSmemBytes, a, op);
  } else {
    if (N == 16) launch_persistent<halo_mma_kernel<T, 32, 16, false, false, true>>(HaloLayout<32, 16>::kSmemBytes, a, op);
    else launch_persistent<halo_mma_kernel<T, 32, 32, false, false, true>>(HaloLayout<32, 32>::kSmemBytes, a, op);
  }
}

HaloArgs halo_args(const Gather& g, const void* B, int k_pad, const Epilogue& e, const char* op) {
  HG_CHECK(halo_conv_supported(g, e),
           op << ": the halo convolution needs kernel 3, stride 1, padding 1, dilation 1 on every axis, 1, 16 or 32 "
                 "gathered channels, 16 or 32 16-bit output channels, a 16-byte aligned output and (C > 1) input; "
                 "got kernel ("
              << g.kd << ", " << g.kh << ", " << g.kw << "), padding (" << g.pd << ", " << g.ph << ", " << g.pw
              << "), C=" << g.c << ", N=" << e.N);
  HG_CHECK(k_pad % kPadK == 0 && k_pad >= g.K, op << ": weight matrix row length " << k_pad << " must be a multiple of "
                                                  << kPadK << " and >= K=" << g.K);
  HG_CHECK(reinterpret_cast<uintptr_t>(B) % 16 == 0, op << ": weight matrix must be 16-byte aligned");
  HaloArgs a{};
  a.src = g.src;
  a.B = B;
  a.k_pad = k_pad;
  a.bias = e.bias;
  a.out = e.out;
  a.d = g.d;
  a.h = g.h;
  a.w = g.w;
  a.transposed = g.transposed;
  a.tiles_x = (g.w + kTile - 1) / kTile;
  a.tiles_y = (g.h + kTile - 1) / kTile;
  a.tiles_z = (g.d + kTile - 1) / kTile;
  const int64_t tiles = halo_tile_count(g);
  HG_CHECK(tiles < INT32_MAX, op << ": " << tiles << " halo tiles exceed the 32-bit tile index");
  a.num_tiles = static_cast<int>(tiles);
  return a;
}

}  // namespace

int64_t halo_tile_count(const Gather& g) {
  return int64_t{g.n} * ((g.d + kTile - 1) / kTile) * ((g.h + kTile - 1) / kTile) * ((g.w + kTile - 1) / kTile);
}

void tc_halo_conv_bn(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e, const float* norm_in,
                     float* tile_stats, const char* op) {
  HG_CHECK(g.c == 16 || g.c == 32 || (g.c == 1 && norm_in == nullptr),
           op << ": the BatchNorm-fused halo convolution gathers 16 or 32 channels (or 1 without an input "
                 "normalisation: the direct kernel has statistics only), got C=" << g.c);
  HG_CHECK(!g.transposed, op << ": the BatchNorm-fused halo convolution is a forward convolution (no dgrad gather)");
  HG_CHECK(e.bias == nullptr, op << ": the BatchNorm-fused halo convolution takes no bias (BatchNorm's beta replaces it)");
  HaloArgs a = halo_args(g, B, k_pad, e, op);
  a.norm_in = norm_in;
  a.tile_stats = reinterpret_cast<float4*>(tile_stats);
  HG_CHECK(reinterpret_cast<uintptr_t>(tile_stats) % 16 == 0, op << ": the tile statistics buffer must be 16-byte aligned");
  if (type == TcOperand::BFloat16) launch_bn<__nv_bfloat16>(g, a, e.N, op);
  else launch_bn<__half>(g, a, e.N, op);
}

void tc_halo_dgrad_relu_bn(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e,
                           const float* norm_out, const void* relu_src, float* tile_stats, const char* op) {
  HG_CHECK(g.transposed && (g.c == 16 || g.c == 32),
           op << ": the ReLU/BatchNorm-gradient halo dgrad gathers 16 or 32 channels of dy (a transposed gather), got C="
              << g.c << (g.transposed ? "" : ", forward gather"));
  HG_CHECK(e.bias == nullptr && norm_out && relu_src && tile_stats,
           op << ": the ReLU/BatchNorm-gradient halo dgrad needs no bias, the forward's normalisation, its raw output "
                 "and a statistics buffer");
  HG_CHECK(reinterpret_cast<uintptr_t>(tile_stats) % 16 == 0, op << ": the tile statistics buffer must be 16-byte aligned");
  HaloArgs a = halo_args(g, B, k_pad, e, op);
  a.norm_out = norm_out;
  a.relu_src = relu_src;
  a.tile_stats = reinterpret_cast<float4*>(tile_stats);
  if (type == TcOperand::BFloat16) launch_relu_grad<__nv_bfloat16>(g, a, e.N, op);
  else launch_relu_grad<__half>(g, a, e.N, op);
}

bool halo_conv_supported(const Gather& g, const Epilogue& e) {
  const bool cubic = g.kd == 3 && g.kh == 3 && g.kw == 3 && g.sd == 1 && g.sh == 1 && g.sw == 1 && g.dd == 1 &&
                     g.dh == 1 && g.dw == 1 && g.pd == 1 && g.ph == 1 && g.pw == 1;
  const bool same = g.od == g.d && g.oh == g.h && g.ow == g.w;
  const bool channels = (g.c == 1 || g.c == 16 || g.c == 32) && (e.N == 16 || e.N == 32);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vectors = aligned(e.out) && (g.c == 1 || aligned(g.src));  // 16-byte cp.async and stores
  const bool nonempty = g.M >= 1;  // an empty batch goes to tc_igemm, which names the problem
  return cubic && same && channels && vectors && nonempty && e.out_operand && !e.scatter;
}

void tc_halo_conv(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e, const char* op) {
  const HaloArgs a = halo_args(g, B, k_pad, e, op);
  if (type == TcOperand::BFloat16) launch_for_channels<__nv_bfloat16>(g, a, e.N, op);
  else launch_for_channels<__half>(g, a, e.N, op);
}

}  // namespace halfgrad::ops::conv::igemm
