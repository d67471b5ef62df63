// conv3d_wgrad_halo_cuda.cu - the 16-bit (FP16 or BF16) Tensor Core weight gradient of the "same"
// 3x3x3 conv3d (stride 1, dilation 1, padding 1 on every axis) over a halo tile in shared memory
// (halo_wgrad in conv_igemm.cuh): the U-Net's level-0 layers (Cout = 16 at 64^3, Cin 1, 16, 32).
//
// Math: dW (Cout, K) = dy^T (Cout, M) * A (M, K), K = 27 * Cin ordered (tap, ci) (KRSC), as in
// conv3d_wgrad_cuda.cu; here A is never gathered from global memory. For tap = (a, b, e) (a, b, e in
// 0..2, tap = 9a + 3b + e), dW_tap (Cout, Cin) = sum over output voxels v of dy[v]^T x[v + (a, b, e) - 1],
// and x[v + shift] for the voxels of a spatial tile is a row of the tile's halo: the tile's x plus one
// voxel on every side (zeros outside the volume: the padding). So one block loads dy's tile and x's
// halo tile into shared memory once, and every one of the 27 taps reads its shifted rows from it: x is
// read ~2.3 times (the halo's overlap, from L2) instead of 27 times.
//
// Tile: 4 x 8 x 8 output voxels (z, y, x) of one sample = 256 voxels = 16 k-steps of the MMA; halo
// 6 x 10 x 10 = 600 voxels. Why this shape: x = 8 makes the 8 rows of an ldmatrix 8 consecutive halo
// rows whatever the tap (conflict-free, below); 8 x 8 x 4 keeps the halo overhead at 600 / 256 = 2.3x
// while two stages of (halo + dy) fit 80.25 KiB (82,176 bytes) at Cin = Cout = 16, so two blocks share an SM (8 x 8 x 8
// would read 1.95x but need 145 KiB for two stages: one block per SM). 64 divides by 4 and 8 (no
// partial tiles on the U-Net's volumes); other extents get tiles that stick out, whose missing voxels
// are zeros in dy and so add nothing.
//
// Parallel mapping (Cin a multiple of 8): blocks are persistent over a contiguous range of the tiles
// (split s of `splits` = one block), 9 warps (288 threads). Warp w owns the three taps (a, b, e) =
// (0..2, w / 3, w % 3) (the three depth offsets of one in-plane offset) and keeps their accumulators
// (3 x Cout x Cin FP32, e.g. 24 registers at 16 x 16) in registers across all its tiles. The MMA is
// mma.sync m16n8k16 with M = Cout (16 rows per MMA), N = Cin (8 per MMA), K = 16 voxels: two y rows of
// 8 x at one z. For each y pair the warp loads dy's fragments (A = dy^T) of the 4 planes z with
// ldmatrix.x4.trans, then walks the 6 halo planes hz: x's fragment there (B = 16 shifted voxels x
// Cin, ldmatrix.x4.trans at row addresses moved by (b, e)) is the B of tap a at plane z = hz - a for
// every a with 0 <= z < 4, so one B load feeds up to three taps (24 B loads per warp and tile instead
// of 48; the shared-memory reads are this kernel's limit, bench/NOTES.md).
// Operands are padded at compile time to Cout, Cin in {16, 32} (zeros in shared memory for channels
// past the real count; those accumulators are not written), so Cin, Cout in {8, 16, 24, 32} run on
// 4 instantiations per operand type.
// Pipeline: two shared stages; while the block multiplies tile t from one stage, cp.async brings tile
// t + 1 (dy and halo, zero-filled outside the volume and past the channels) into the other
// (ops/tensor_core/pipeline.cuh's double_buffered_pipeline; the accumulators and dy's fragment loads
// are warp_tile.cuh's, the halo addressing this file's gather).
// At the end each thread writes its accumulators to partial[split] (Cout, K) FP32, every element of it
// exactly once. reduce_splits_kernel (below) then adds the splits into partial[0] in a fixed order,
// 32 warps per 32 elements (one block per SM slot gives 264-400 splits, too many for a serial walk),
// and conv3d_cuda.cu's sum_splits, called with one split, permutes KRSC to (Cout, Cin, kd, kh, kw) and
// rounds once. Same bits every run on the same GPU (the split count depends on its SM count); no atomics.
//
// Cin = 1 (the first layer, K = 27): N = Cin does not map onto the MMA, so N = taps instead: B (voxel,
// tap) = halo[voxel shifted by tap], 27 taps padded to 32 (4 n8 blocks; the padding taps are zeros),
// fragments built from scalar 16-bit shared loads (per n8 block a lane needs 2 voxels in each of the
// two k halves: 4 scalar loads per MMA at Cout = 16, cheap next to the 32 bytes of dy per voxel the
// layer must read).
// 8 warps (256 threads); warp w takes k-steps w and w + 8 of every tile with all 27 taps (16 or 32
// accumulator registers), and the 8 warps' partials are added in shared memory in warp order at the
// end (deterministic). The halo (600 scalars) is loaded through registers (2-byte voxels cannot
// cp.async): tile t + 1's values are read before tile t is multiplied and stored after it.
// Why the MMA and not an FP32 direct kernel: a direct kernel does 27 * Cout FMAs per voxel (432 at
// Cout = 16: 1.8 GFMA for the layer, 57 us at the H200's FP32 peak of ~32 TFMA/s, more in practice,
// plus a reduction over the voxels), the MMA form ~16x fewer instructions, so this layer's time is
// dy's read (134 MB at 16 x 64^3 x 16 channels: ~35 us at 4 TB/s), not math.
//
// Shared memory (16-bit words): halo[stage] (600, kRowX) and dy[stage] (256, kRowDy), voxel-major
// with channels contiguous; kRowX = CinPad + 8, kRowDy = CoutPad + 8 (Cin = 1: halo (600) scalars).
// ldmatrix reads 8 rows of 16 bytes per phase; rows of 48 or 80 bytes (16 + 8 or 32 + 8 words) are an
// odd number of 16-byte units apart, so 8 consecutive rows (8 consecutive x of the tile, or of the
// halo at any tap shift) land in 8 different 16-byte bank groups: conflict-free. dy's A fragment reads
// 8 consecutive voxels of dy's tile, the same arithmetic. The Cin = 1 scalar loads of one register
// (32 lanes: 8 taps x 4 voxel pairs) touch 8 tap offsets {100a + 10b + e} + 2t: a few 2-way conflicts.
//
// Precision: 16-bit operands T (a template over T = __half or __nv_bfloat16, instantiated for both),
// FP32 accumulation in the MMA registers, FP32 partials, FP32 split sum rounded once to the weight's
// dtype: the same as tc_wgrad; results differ from it only by the order of the FP32 sums. As there, a
// non-finite dy times a padding zero is NaN (the GradScaler skips such steps).

#include <algorithm>

#include "core/cuda/check.cuh"
#include "ops/conv/conv_igemm.cuh"
#include "ops/tensor_core/pipeline.cuh"
#include "ops/tensor_core/warp_tile.cuh"

namespace halfgrad::ops::conv::igemm {
namespace {

constexpr int kInstrM = Mma16816::kM, kInstrN = Mma16816::kN, kInstrK = Mma16816::kK;
constexpr int kStages = 2;  // shared stages: one multiplied while the next tile lands

/// The spatial tile (file comment) and its halo.
struct HaloGeometry {
  static constexpr int kTz = 4, kTy = 8, kTx = 8;
  static constexpr int kVoxels = kTz * kTy * kTx;                // 256
  static constexpr int kHz = kTz + 2, kHy = kTy + 2, kHx = kTx + 2;
  static constexpr int kHalo = kHz * kHy * kHx;                  // 600
  static constexpr int kKSteps = kVoxels / kInstrK;              // 16: two y rows of 8 x per k-step
  static constexpr int kStepsPerZ = kTy * kTx / kInstrK;         // 4
  static_assert(kTx == 8 && kInstrK == 2 * kTx, "a k-step is two rows of 8 x: the 8 rows of each ldmatrix");
};

/// Words per shared row of a channel count padded to 16 or 32: + 8 makes the row an odd number of
/// 16-byte units (file comment: conflict-free ldmatrix).
constexpr int padded_row(int channels) { return channels + 8; }

/// The Cin >= 8 kernel's shape: channels padded to kCinPad, kCoutPad in {16, 32}.
template <int kCinPad, int kCoutPad>
struct HaloTile : HaloGeometry {
  static_assert((kCinPad == 16 || kCinPad == 32) && (kCoutPad == 16 || kCoutPad == 32), "padded channels");
  static constexpr bool kOneChannel = false;
  static constexpr int kWarps = 9, kTapsPerWarp = 3, kThreads = 32 * kWarps;  // 27 taps, 3 per warp
  static_assert(kWarps * kTapsPerWarp == 27, "every tap has one warp");
  static constexpr int kRowX = padded_row(kCinPad), kRowDy = padded_row(kCoutPad);
  static constexpr int kStageHalfs = kHalo * kRowX + kVoxels * kRowDy;
  static constexpr int kSmemBytes = kStages * kStageHalfs * 2;
  // Two blocks per SM where their shared memory fits (228 KiB per SM, 1 KiB reserved per block):
  // __launch_bounds__ then caps the registers at 65536 / (2 * 288) = 113 (Cin/Cout 16/32 needs 116
  // unbounded; 16/16 70). The Cin = 32 tiles are held to one block by shared memory anyway.
  static constexpr int kMinBlocks = 2 * (kSmemBytes + 1024) <= 228 * 1024 ? 2 : 1;
  static constexpr int kMmaM = kCoutPad / kInstrM, kMmaN = kCinPad / kInstrN;
  static constexpr int kChunksX = kCinPad / 8, kChunksDy = kCoutPad / 8;  // 16-byte chunks per row
};

/// The Cin = 1 kernel's shape: N = 27 taps padded to 32.
template <int CoutPad>
struct HaloTileC1 : HaloGeometry {
  static constexpr int kCoutPad = CoutPad;
  static_assert(kCoutPad == 16 || kCoutPad == 32, "padded channels");
  static constexpr bool kOneChannel = true;
  static constexpr int kWarps = 8, kThreads = 32 * kWarps;
  static constexpr int kTapsPad = 32;
  static constexpr int kRowDy = padded_row(kCoutPad);
  static constexpr int kHaloHalfs = (kHalo + 7) / 8 * 8;  // keeps dy's rows 16-byte aligned
  static constexpr int kStageHalfs = kHaloHalfs + kVoxels * kRowDy;
  static constexpr int kReduceBytes = kWarps * kCoutPad * kTapsPad * 4;  // the warps' partials, FP32
  static constexpr int kSmemBytes = kStages * kStageHalfs * 2 > kReduceBytes ? kStages * kStageHalfs * 2 : kReduceBytes;
  static constexpr int kMmaM = kCoutPad / kInstrM, kMmaN = kTapsPad / kInstrN;
  static constexpr int kChunksDy = kCoutPad / 8;
  static constexpr int kHaloPerThread = (kHalo + kThreads - 1) / kThreads;  // 3
  static_assert(kKSteps == 2 * kWarps, "each warp takes two k-steps of a tile");
};

template <typename T>
struct HaloArgs {
  const T* x;        // (n, d, h, w, cin) channels-last
  const T* dy;       // (n, d, h, w, cout) channels-last (same extents: padding 1)
  float* partial;    // (splits, cout, 27 * cin)
  int n, d, h, w, cin, cout;
  int tiles_z, tiles_y, tiles_x, tiles;  // tiles per axis and in all
  int tiles_per_split;
};

/// Tile t as (sample, z0, y0, x0) of its first output voxel.
template <typename T>
__device__ __forceinline__ int4 tile_origin(const HaloArgs<T>& p, int t) {
  const int per_sample = p.tiles_z * p.tiles_y * p.tiles_x;
  const int nn = t / per_sample, r = t - nn * per_sample;
  const int tz = r / (p.tiles_y * p.tiles_x), r2 = r - tz * p.tiles_y * p.tiles_x;
  const int ty = r2 / p.tiles_x, tx = r2 - ty * p.tiles_x;
  return make_int4(nn, tz * HaloGeometry::kTz, ty * HaloGeometry::kTy, tx * HaloGeometry::kTx);
}

/// cp.async of dy's tile (kVoxels rows of kChunks 16-byte chunks) into dys; zeros outside the volume
/// and past cout.
template <int kThreads, int kChunks, int kRow, typename T>
__device__ __forceinline__ void load_dy_tile(const HaloArgs<T>& p, int4 o, T* dys) {
  for (int idx = threadIdx.x; idx < HaloGeometry::kVoxels * kChunks; idx += kThreads) {
    const int v = idx / kChunks, cc = idx % kChunks;
    const int z = o.y + v / (HaloGeometry::kTy * HaloGeometry::kTx), y = o.z + (v / HaloGeometry::kTx) % HaloGeometry::kTy,
              x = o.w + v % HaloGeometry::kTx;
    const bool ok = z < p.d && y < p.h && x < p.w && cc * 8 < p.cout;
    const T* src = ok ? p.dy + (static_cast<int64_t>(((o.x * p.d + z) * p.h + y) * p.w + x) * p.cout + cc * 8) : p.dy;
    cp_async_16(dys + v * kRow + cc * 8, src, ok ? 16 : 0);
  }
}

/// Halo voxel hv of tile o: its pixel index in x, or -1 in the padding.
template <typename T>
__device__ __forceinline__ int halo_pixel(const HaloArgs<T>& p, int4 o, int hv) {
  const int hz = hv / (HaloGeometry::kHy * HaloGeometry::kHx), hy = (hv / HaloGeometry::kHx) % HaloGeometry::kHy,
            hx = hv % HaloGeometry::kHx;
  const int z = o.y - 1 + hz, y = o.z - 1 + hy, x = o.w - 1 + hx;
  const bool in = static_cast<unsigned>(z) < static_cast<unsigned>(p.d) && static_cast<unsigned>(y) < static_cast<unsigned>(p.h) &&
                  static_cast<unsigned>(x) < static_cast<unsigned>(p.w);
  return in ? ((o.x * p.d + z) * p.h + y) * p.w + x : -1;
}

// ---- Cin a multiple of 8 --------------------------------------------------------------------------

template <class Cfg, typename T>
__device__ __forceinline__ void load_tile(const HaloArgs<T>& p, int t, T* stage) {
  const int4 o = tile_origin(p, t);
  T* xs = stage;
  for (int idx = threadIdx.x; idx < Cfg::kHalo * Cfg::kChunksX; idx += Cfg::kThreads) {
    const int hv = idx / Cfg::kChunksX, cc = idx % Cfg::kChunksX;
    const int pix = cc * 8 < p.cin ? halo_pixel(p, o, hv) : -1;
    const T* src = pix >= 0 ? p.x + (static_cast<int64_t>(pix) * p.cin + cc * 8) : p.x;
    cp_async_16(xs + hv * Cfg::kRowX + cc * 8, src, pix >= 0 ? 16 : 0);
  }
  load_dy_tile<Cfg::kThreads, Cfg::kChunksDy, Cfg::kRowDy>(p, o, stage + Cfg::kHalo * Cfg::kRowX);
}

template <class Cfg, typename T>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) halo_wgrad_kernel(HaloArgs<T> p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int t_begin = blockIdx.x * p.tiles_per_split, t_end = min(p.tiles, t_begin + p.tiles_per_split);

  WarpAccumulator<Cfg::kMmaM, Cfg::kMmaN> acc[Cfg::kTapsPerWarp];  // one warp tile per tap a of the warp
#pragma unroll
  for (int j = 0; j < Cfg::kTapsPerWarp; ++j) acc[j].zero();

  // This lane's ldmatrix rows. A (dy^T): matrix lane / 8 covers voxels ((lane / 16) * 8 + 0..7) of
  // the k-step and channels ((lane / 8) % 2) * 8 + 0..7 (conv3d_wgrad_cuda.cu's addressing). B (x):
  // voxel vl = ((lane / 8) % 2) * 8 + lane % 8 of the k-step (y row vl / 8, x = vl % 8), channels
  // (lane / 16) * 8 + 0..7; its halo row for tap (a, b, e) is that voxel moved by (a, b, e) in the
  // halo. The warp's taps are (a, tb, te), a = 0..2 (file comment), so (tb, te) is folded in here;
  // the halo plane hz = z + a and the y pair are added in the loop.
  const LaneCoord a_at = LdmatrixX4::a<false>(lane), b_at = LdmatrixX4::b_pair<false>(lane);
  using Dy = SmemOperand<PaddedRows<Cfg::kRowDy>, false>;  // rows k (voxels), cout contiguous
  const int tb = warp / 3, te = warp % 3;
  const int b_row = (b_at.row / 8 + tb) * Cfg::kHx + b_at.row % 8 + te, b_col = b_at.col;

  // The double-buffered schedule (ops/tensor_core/pipeline.cuh); load_tile is this kernel's gather.
  double_buffered_pipeline(
      max(t_end - t_begin, 0), [&](int t, int slot) { load_tile<Cfg>(p, t_begin + t, smem + slot * Cfg::kStageHalfs); },
      [&](int, int slot) {
        const T* xs = smem + slot * Cfg::kStageHalfs;
        const T* dys = xs + Cfg::kHalo * Cfg::kRowX;
#pragma unroll
        for (int yp = 0; yp < Cfg::kStepsPerZ; ++yp) {
          // The y pair yp (tile rows 2 yp, 2 yp + 1) at every z: k-steps ks = z * kStepsPerZ + yp.
          uint32_t a[Cfg::kTz][Cfg::kMmaM][4];
#pragma unroll
          for (int z = 0; z < Cfg::kTz; ++z)
#pragma unroll
            for (int i = 0; i < Cfg::kMmaM; ++i)
              Dy::load_a(a[z][i], shared_address(dys), i * kInstrM, (z * Cfg::kStepsPerZ + yp) * kInstrK, a_at);
          // Halo plane hz serves tap a at tile plane z = hz - a: one B fragment, up to three taps.
#pragma unroll
          for (int hz = 0; hz < Cfg::kHz; ++hz) {
            const T* xrow = xs + (b_row + hz * Cfg::kHy * Cfg::kHx + yp * 2 * Cfg::kHx) * Cfg::kRowX + b_col;
#pragma unroll
            for (int n = 0; n < Cfg::kMmaN; n += 2) {
              uint32_t b0[2], b1[2];
              LdmatrixX4::load_b_pair<false>(b0, b1, shared_address(xrow + n * kInstrN));
#pragma unroll
              for (int ta = 0; ta < Cfg::kTapsPerWarp; ++ta) {
                const int z = hz - ta;
                if (z < 0 || z >= Cfg::kTz) continue;  // compile-time after unrolling
#pragma unroll
                for (int i = 0; i < Cfg::kMmaM; ++i) {
                  acc[ta].template mma<T>(i, n, a[z][i], b0);
                  acc[ta].template mma<T>(i, n + 1, a[z][i], b1);
                }
              }
            }
          }
        }
      });

  const int K = 27 * p.cin;
  float* out = p.partial + static_cast<int64_t>(blockIdx.x) * p.cout * K;
#pragma unroll
  for (int ta = 0; ta < Cfg::kTapsPerWarp; ++ta) {
    const int tap = 9 * ta + 3 * tb + te;  // (a, b, e) = (ta, tb, te)
    acc[ta].for_each(lane, [&](int co, int ci, float v) {
      if (co < p.cout && ci < p.cin) out[static_cast<int64_t>(co) * K + tap * p.cin + ci] = v;
    });
  }
}

// ---- Cin = 1 ------------------------------------------------------------------------------------

template <class Cfg, typename T>
__global__ void __launch_bounds__(Cfg::kThreads) halo_wgrad_c1_kernel(HaloArgs<T> p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int t_begin = blockIdx.x * p.tiles_per_split, t_end = min(p.tiles, t_begin + p.tiles_per_split);

  WarpAccumulator<Cfg::kMmaM, Cfg::kMmaN> acc;
  acc.zero();

  // B (voxel, tap) fragment of n8 block n (Mma16816BFragment): lane l holds tap 8n + l / 4 at voxels
  // 2 (l % 4) and + 1 (b[0]: y row 0 of the k-step) and 8 + 2 (l % 4) and + 1 (b[1]: y row 1). Its
  // halo offset is that tap's shift 100a + 10b + e plus the voxel's; a tap >= 27 is padding (zeros).
  using BFrag = Mma16816BFragment;
  int tap_off[Cfg::kMmaN];
#pragma unroll
  for (int n = 0; n < Cfg::kMmaN; ++n) {
    const int tap = n * kInstrN + BFrag::col(lane);
    tap_off[n] = tap < 27 ? ((tap / 9) * Cfg::kHy + (tap / 3) % 3) * Cfg::kHx + tap % 3 + BFrag::row(lane, 0, 0) : -1;
  }
  const LaneCoord a_at = LdmatrixX4::a<false>(lane);
  using Dy = SmemOperand<PaddedRows<Cfg::kRowDy>, false>;  // rows k (voxels), cout contiguous

  // Stage s: halo (kHaloHalfs scalars) then dy (kVoxels, kRowDy).
  T next_halo[Cfg::kHaloPerThread];
  auto read_halo = [&](int t) {  // this thread's halo scalars of tile t, into registers
    const int4 o = tile_origin(p, t);
#pragma unroll
    for (int k = 0; k < Cfg::kHaloPerThread; ++k) {
      const int hv = threadIdx.x + k * Cfg::kThreads;
      const int pix = hv < Cfg::kHalo ? halo_pixel(p, o, hv) : -1;
      next_halo[k] = pix >= 0 ? p.x[pix] : operand_from_float<T>(0.f);
    }
  };
  auto store_halo = [&](T* stage) {
#pragma unroll
    for (int k = 0; k < Cfg::kHaloPerThread; ++k) {
      const int hv = threadIdx.x + k * Cfg::kThreads;
      if (hv < Cfg::kHalo) stage[hv] = next_halo[k];
    }
  };

  // The double-buffered schedule (ops/tensor_core/pipeline.cuh). Tile t + 1's halo is read into
  // registers while tile t is multiplied and stored into its slot afterwards (`finish`); tile 0's
  // is stored at once.
  const int num_tiles = max(t_end - t_begin, 0);
  double_buffered_pipeline(
      num_tiles,
      [&](int t, int slot) {
        T* stage = smem + slot * Cfg::kStageHalfs;
        load_dy_tile<Cfg::kThreads, Cfg::kChunksDy, Cfg::kRowDy>(p, tile_origin(p, t_begin + t), stage + Cfg::kHaloHalfs);
        read_halo(t_begin + t);
        if (t == 0) store_halo(stage);
      },
      [&](int, int slot) {
        const T* hs = smem + slot * Cfg::kStageHalfs;
        const uint32_t dys = shared_address(hs + Cfg::kHaloHalfs);
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const int ks = warp + kk * Cfg::kWarps;
          uint32_t a[Cfg::kMmaM][4];
#pragma unroll
          for (int i = 0; i < Cfg::kMmaM; ++i) Dy::load_a(a[i], dys, i * kInstrM, ks * kInstrK, a_at);
          const int step_off = (ks / Cfg::kStepsPerZ) * Cfg::kHy * Cfg::kHx + (ks % Cfg::kStepsPerZ) * 2 * Cfg::kHx;
#pragma unroll
          for (int n = 0; n < Cfg::kMmaN; ++n) {
            uint32_t b[2] = {0u, 0u};
            if (tap_off[n] >= 0) {  // the 16-bit patterns, lower voxel in the low half (ptx.cuh's b[] layout)
              const unsigned short* v = reinterpret_cast<const unsigned short*>(hs) + step_off + tap_off[n];
              b[0] = v[0] | (static_cast<uint32_t>(v[1]) << 16);
              b[1] = v[Cfg::kHx] | (static_cast<uint32_t>(v[Cfg::kHx + 1]) << 16);
            }
#pragma unroll
            for (int i = 0; i < Cfg::kMmaM; ++i) acc.template mma<T>(i, n, a[i], b);
          }
        }
      },
      // Slot t % 2 ^ 1 was last read before the previous tile's trailing barrier.
      [&](int t, int slot) {
        if (t + 1 < num_tiles) store_halo(smem + (slot ^ 1) * Cfg::kStageHalfs);
      });

  // The warps' partials, added in warp order (deterministic): red[warp][co][tap], reusing the stages.
  float* red = reinterpret_cast<float*>(smem_raw);
  acc.for_each(lane, [&](int co, int tap, float v) { red[(warp * Cfg::kCoutPad + co) * Cfg::kTapsPad + tap] = v; });
  __syncthreads();
  float* out = p.partial + static_cast<int64_t>(blockIdx.x) * p.cout * 27;
  for (int idx = threadIdx.x; idx < p.cout * 27; idx += Cfg::kThreads) {
    const int co = idx / 27, tap = idx % 27;
    float sum = 0.f;
    for (int w = 0; w < Cfg::kWarps; ++w) sum += red[(w * Cfg::kCoutPad + co) * Cfg::kTapsPad + tap];
    out[idx] = sum;  // (cout, K = 27): tap * cin + ci = tap
  }
}

// ---- the split sum ------------------------------------------------------------------------------

/// partial[0][e] = sum over s of partial[s][e] (elems per split), FP32, in a fixed order: warp w of a
/// block adds splits w, w + 32, ... of the block's 32 elements (coalesced), then warp 0 adds the 32
/// warps' sums in warp order. A block reads and writes only its own elements, and split 0 of them is
/// read by warp 0 before the barrier that precedes the write: in place, no race. Why not leave the
/// ~264-400 splits to conv3d_cuda.cu's sum_splits: its one thread per weight element walks the splits
/// serially, which is one L2 latency per split (~50 us at K = 27, where only 432 threads exist).
constexpr int kReduceWarps = 32;

__global__ void __launch_bounds__(32 * kReduceWarps) reduce_splits_kernel(float* __restrict__ partial, int splits, int elems) {
  __shared__ float sums[kReduceWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int e = blockIdx.x * 32 + lane;
  float s = 0.f;
  if (e < elems)
    for (int sp = warp; sp < splits; sp += kReduceWarps) s += partial[static_cast<int64_t>(sp) * elems + e];
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && e < elems) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kReduceWarps; ++w) t += sums[w][lane];
    partial[e] = t;
  }
}

// ---- launch -------------------------------------------------------------------------------------

template <class Cfg, typename T>
auto kernel_for() {
  if constexpr (Cfg::kOneChannel) return halo_wgrad_c1_kernel<Cfg, T>;
  else return halo_wgrad_kernel<Cfg, T>;
}

/// Calls f with the tile config for (cin, cout) (file comment: channels padded to 16 or 32).
template <typename F>
void with_config(int cin, int cout, F&& f) {
  if (cin == 1) {
    if (cout <= 16) f(HaloTileC1<16>{});
    else f(HaloTileC1<32>{});
  } else if (cin <= 16) {
    if (cout <= 16) f(HaloTile<16, 16>{});
    else f(HaloTile<16, 32>{});
  } else {
    if (cout <= 16) f(HaloTile<32, 16>{});
    else f(HaloTile<32, 32>{});
  }
}

template <class Cfg, typename T>
int blocks_per_sm(const char* op) {
  auto kernel = kernel_for<Cfg, T>();
  static const int blocks = [&] {
    HG_CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    int b = 0;
    HG_CUDA_CHECK(op, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, Cfg::kThreads, Cfg::kSmemBytes));
    return std::max(b, 1);
  }();
  return blocks;
}

int tile_count(const Gather& g) {
  const auto up = [](int v, int t) { return (v + t - 1) / t; };
  return g.n * up(g.d, HaloGeometry::kTz) * up(g.h, HaloGeometry::kTy) * up(g.w, HaloGeometry::kTx);
}

template <typename T>
void launch(const Gather& g, const T* dy, int cout, float* partial, int splits, const char* op) {
  HaloArgs<T> p{};
  p.x = static_cast<const T*>(g.src);
  p.dy = dy;
  p.partial = partial;
  p.n = g.n, p.d = g.d, p.h = g.h, p.w = g.w, p.cin = g.c, p.cout = cout;
  p.tiles_z = (g.d + HaloGeometry::kTz - 1) / HaloGeometry::kTz;
  p.tiles_y = (g.h + HaloGeometry::kTy - 1) / HaloGeometry::kTy;
  p.tiles_x = (g.w + HaloGeometry::kTx - 1) / HaloGeometry::kTx;
  p.tiles = tile_count(g);
  p.tiles_per_split = (p.tiles + splits - 1) / splits;
  with_config(g.c, cout, [&](auto cfg) {
    using Cfg = decltype(cfg);
    blocks_per_sm<Cfg, T>(op);  // sets the shared-memory opt-in once
    kernel_for<Cfg, T>()<<<splits, Cfg::kThreads, Cfg::kSmemBytes, cuda::stream()>>>(p);
  });
  HG_CUDA_LAUNCH_CHECK(op);
  if (splits > 1) {
    const int elems = cout * 27 * g.c;
    reduce_splits_kernel<<<(elems + 31) / 32, 32 * kReduceWarps, 0, cuda::stream()>>>(partial, splits, elems);
    HG_CUDA_LAUNCH_CHECK(op);
  }
}

}  // namespace

bool halo_wgrad_supported(const Gather& g, int cout) {
  const bool same_conv = !g.transposed && gather_kind(g) == GatherKind::Cubic3 && g.pd == 1 && g.ph == 1 && g.pw == 1 &&
                         g.od == g.d && g.oh == g.h && g.ow == g.w;
  const bool channels = (g.c == 1 || (g.c % 8 == 0 && g.c <= 32)) && cout % 8 == 0 && cout >= 8 && cout <= 32;
  return same_conv && channels && g.n >= 1 && reinterpret_cast<uintptr_t>(g.src) % 16 == 0;
}

int halo_wgrad_splits(const Gather& g, TcOperand type, int cout, const char* op) {
  int per_sm = 1;
  with_config(g.c, cout, [&](auto cfg) {
    using Cfg = decltype(cfg);
    per_sm = type == TcOperand::BFloat16 ? blocks_per_sm<Cfg, __nv_bfloat16>(op) : blocks_per_sm<Cfg, __half>(op);
  });
  // One persistent block per resident slot, never more blocks than tiles.
  return std::max(1, std::min(tile_count(g), per_sm * cuda::sm_count()));
}

void halo_wgrad(const Gather& g, TcOperand type, const void* dy, int cout, float* partial, int splits, const char* op) {
  HG_CHECK(halo_wgrad_supported(g, cout),
           op << ": the halo wgrad needs a 3x3x3 stride-1 undilated padding-1 convolution, Cin 1 or a multiple of 8 <= 32,"
              << " Cout a multiple of 8 <= 32 and a 16-byte aligned input; got Cin " << g.c << ", Cout " << cout
              << ", kernel (" << g.kd << ", " << g.kh << ", " << g.kw << "), padding (" << g.pd << ", " << g.ph << ", "
              << g.pw << ")");
  HG_CHECK(reinterpret_cast<uintptr_t>(dy) % 16 == 0, op << ": the halo wgrad needs a 16-byte aligned output gradient");
  HG_CHECK(splits >= 1 && splits <= tile_count(g), op << ": halo wgrad splits " << splits << " outside 1.." << tile_count(g));
  if (type == TcOperand::BFloat16) launch(g, static_cast<const __nv_bfloat16*>(dy), cout, partial, splits, op);
  else launch(g, static_cast<const __half*>(dy), cout, partial, splits, op);
}

}  // namespace halfgrad::ops::conv::igemm
