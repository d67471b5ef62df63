// loss_cuda.cu - cross_entropy, soft_dice_loss and segmentation_loss on the GPU: one fused op
// L = w_ce * CE + w_dice * Dice (the ops, checks and autograd: loss.cpp, which also has the CPU path).
//
// Math, per position v = (n, s) of logits (N, C, S) and target t (N, S), M = N*S:
//   forward   m = max_c x_c, lse = m + log sum_c exp(x_c - m), p_c = exp(x_c - lse)
//             CE = (1/M) sum_v (lse - x_t);  Dice = 1 - (1/C) sum_c num_c / den_c,
//             num_c = 2 I_c + smooth, den_c = P_c + O_c + smooth,
//             I_c = sum_v p_c [t == c], P_c = sum_v p_c, O_c = sum_v [t == c]
//   backward  (dL the incoming gradient; lse saved, p recomputed)
//             dx_c = kce (p_c - [t == c]) + kd p_c (a_c [t == c] + b_c - q),  q = sum_k p_k (a_k [t == k] + b_k)
//             kce = dL w_ce / M, kd = dL w_dice, a_c = -2 / (C den_c), b_c = num_c / (C den_c^2)
// Shapes and layouts: logits / dlogits (N, C, *spatial), S = prod(spatial), NCDHW (class c of
// position s at (n*C + c)*S + s) or NDHWC ((n*S + s)*C + c); target (N, S) int64 contiguous;
// lse (N*S) float; coef (2, C) float = (a, b); partials (blocks, 1 + 3C) double = (CE, I, P, O).
// Parallel mapping: a block takes a tile of kTile = 2048 positions of one sample, 8 per thread
// (positions threadIdx.x + j*256, so a warp reads 32 neighbouring positions of a class row in NCDHW,
// or 32 neighbouring C-vectors in NDHWC). Forward: each thread keeps its positions' lse and labels in
// registers, the block reduces CE then, class by class, (I_c, P_c, O_c), and writes one row of
// partials; one block then sums the rows in block order (FP64) and computes L, a, b. The labels are
// checked in the same pass: a bad one records its flat position with atomicMin (so the first one, as
// the CPU op reports), and the launcher's one 8-byte copy to the host is the loss's only sync (none
// with LossCudaArgs::deferred_bad: the position goes into that longer-lived flag instead).
// Backward: one thread per position, two sweeps over its C logits (q, then dx).
// Precision: logits float or half (half loaded and computed in FP32, dx rounded once); per-thread
// sums FP32 over <= 8 positions, everything above FP64 in a fixed order (deterministic).
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/loss/loss_cuda.h"

#include <type_traits>

namespace halfgrad::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = 8;  // positions per thread: enough to amortise a block's 1 + C reductions
constexpr int64_t kTile = int64_t(kThreads) * kPer;
constexpr unsigned long long kNoBadLabel = ~0ull;

struct LossGeo {
  int64_t N, C, S, tiles;  // tiles of kTile positions per sample
  bool channels_last;
  __device__ int64_t at(int64_t n, int64_t c, int64_t s) const {
    return channels_last ? (n * S + s) * C + c : (n * C + c) * S + s;
  }
};

// FP64 sums of v[0..K) over the block; valid in thread 0. Every thread must call it.
template <int K>
__device__ void block_sum(double (&v)[K]) {
  __shared__ double sh[K][kWarps];
#pragma unroll
  for (int k = 0; k < K; ++k)
    for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
  if (threadIdx.x % 32 == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) sh[k][threadIdx.x / 32] = v[k];
  __syncthreads();
  if (threadIdx.x == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = 0;
      for (int w = 0; w < kWarps; ++w) v[k] += sh[k][w];
    }
  __syncthreads();
}

// x (N, C, S) in g's layout, tg (N, S); writes lse (N*S), part[blockIdx.x] (1 + 3C), and *bad.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    loss_forward_kernel(const T* __restrict__ x, const int64_t* __restrict__ tg, LossGeo g, bool dice,
                        float* __restrict__ lse_out, double* __restrict__ part, unsigned long long* bad) {
  const int64_t n = blockIdx.x / g.tiles, s0 = (blockIdx.x % g.tiles) * kTile;
  const int C = static_cast<int>(g.C);
  double* row = part + int64_t(blockIdx.x) * (1 + 3 * g.C);
  float lse[kPer];
  int lab[kPer];  // the label, -1 for a bad one (matches no class), -2 past the end of the sample
  float ce = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int64_t s = s0 + j * kThreads + threadIdx.x;
    lab[j] = -2;
    lse[j] = 0.f;
    if (s >= g.S) continue;
    const int64_t t = tg[n * g.S + s];
    lab[j] = (t >= 0 && t < g.C) ? static_cast<int>(t) : -1;
    if (lab[j] < 0) atomicMin(bad, static_cast<unsigned long long>(n * g.S + s));
    float m = -INFINITY;
    for (int c = 0; c < C; ++c) m = fmaxf(m, to_float(x[g.at(n, c, s)]));
    float sum = 0.f;
    for (int c = 0; c < C; ++c) sum += expf(to_float(x[g.at(n, c, s)]) - m);
    lse[j] = m + logf(sum);
    lse_out[n * g.S + s] = lse[j];
    ce += lse[j] - (lab[j] >= 0 ? to_float(x[g.at(n, lab[j], s)]) : 0.f);
  }
  double v1[1] = {ce};
  block_sum(v1);
  if (threadIdx.x == 0) row[0] = v1[0];
  if (!dice) return;
  for (int c = 0; c < C; ++c) {
    float inter = 0.f, psum = 0.f, cnt = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (lab[j] == -2) continue;
      const int64_t s = s0 + j * kThreads + threadIdx.x;
      const float p = expf(to_float(x[g.at(n, c, s)]) - lse[j]);
      psum += p;
      if (lab[j] == c) {
        inter += p;
        cnt += 1.f;
      }
    }
    double v3[3] = {inter, psum, cnt};
    block_sum(v3);
    if (threadIdx.x == 0) {
      row[1 + c] = v3[0];
      row[1 + C + c] = v3[1];
      row[1 + 2 * C + c] = v3[2];
    }
  }
}

// One block: sums the partial rows in block order and writes loss (0-d) and coef (2, C).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    loss_finalize_kernel(const double* __restrict__ part, int64_t rows, LossGeo g, bool dice, double w_ce,
                         double w_dice, double smooth, T* __restrict__ loss, float* __restrict__ coef) {
  const int64_t K = 1 + 3 * g.C;
  const double M = static_cast<double>(g.N * g.S), C = static_cast<double>(g.C);
  double ce[1] = {0};
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) ce[0] += part[r * K];
  block_sum(ce);
  double ratio = 0;  // thread 0's
  for (int64_t c = 0; c < g.C; ++c) {
    double v[3] = {0, 0, 0};
    if (dice)
      for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
        v[0] += part[r * K + 1 + c];
        v[1] += part[r * K + 1 + g.C + c];
        v[2] += part[r * K + 1 + 2 * g.C + c];
      }
    block_sum(v);
    if (threadIdx.x == 0) {
      const double num = 2 * v[0] + smooth, den = v[1] + v[2] + smooth;
      ratio += num / den;
      coef[c] = dice ? static_cast<float>(-2.0 / (C * den)) : 0.f;
      coef[g.C + c] = dice ? static_cast<float>(num / (C * den * den)) : 0.f;
    }
  }
  if (threadIdx.x == 0) {
    double L = w_ce != 0 ? w_ce * ce[0] / M : 0.0;  // not 0 * CE: a +inf CE would make Dice alone NaN
    if (dice) L += w_dice * (1.0 - ratio / C);
    loss[0] = from_float<T>(static_cast<float>(L));
  }
}

// One thread per position: dx (N, C, S) in g's layout. dL from dL_dev[0] when given, else dL_host.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    loss_backward_kernel(const T* __restrict__ x, const int64_t* __restrict__ tg, const float* __restrict__ lse,
                         const float* __restrict__ coef, LossGeo g, bool dice, const T* __restrict__ dL_dev,
                         double dL_host, double w_ce, double w_dice, T* __restrict__ dx) {
  const int64_t n = blockIdx.x / g.tiles, s0 = (blockIdx.x % g.tiles) * kTile;
  const int C = static_cast<int>(g.C);
  const double dL = dL_dev ? to_float(dL_dev[0]) : dL_host;
  const float kce = static_cast<float>(dL * w_ce / static_cast<double>(g.N * g.S));
  const float kd = static_cast<float>(dL * w_dice);
  for (int j = 0; j < kPer; ++j) {
    const int64_t s = s0 + j * kThreads + threadIdx.x;
    if (s >= g.S) break;
    const int64_t t = tg[n * g.S + s];
    const float l = lse[n * g.S + s];
    float q = 0.f;
    if (dice)
      for (int c = 0; c < C; ++c) {
        const float p = expf(to_float(x[g.at(n, c, s)]) - l);
        q += p * (coef[c] * (t == c ? 1.f : 0.f) + coef[C + c]);
      }
    for (int c = 0; c < C; ++c) {
      const float p = expf(to_float(x[g.at(n, c, s)]) - l);
      const float oh = t == c ? 1.f : 0.f;
      float d = kce * (p - oh);
      if (dice) d += kd * p * (coef[c] * oh + coef[C + c] - q);
      dx[g.at(n, c, s)] = from_float<T>(d);
    }
  }
}

LossGeo make_geo(const Tensor& logits) {
  LossGeo g{};
  g.N = logits.shape()[0];
  g.C = logits.shape()[1];
  g.S = 1;
  for (int64_t d = 2; d < logits.dim(); ++d) g.S *= logits.shape()[d];
  g.tiles = (g.S + kTile - 1) / kTile;
  g.channels_last = logits.is_channels_last();
  return g;
}

template <typename F>
void dispatch(Dtype dt, F&& f) {
  if (dt == kFloat16) f(__half{});
  else if (dt == kBFloat16) f(__nv_bfloat16{});
  else f(float{});
}

template <typename T>
T* dptr(const Tensor& t) { return dev<T>(t); }

void check_args(const LossCudaArgs& a, const Tensor& logits, const Tensor& target) {
  HG_CHECK(logits.is_cuda() && target.is_cuda(),
           a.op << ": logits and target must both be CUDA tensors for the CUDA loss");
  HG_CHECK(logits.dtype() == kFloat32 || is_reduced_float(logits.dtype()),
           a.op << ": CUDA logits must be float32, float16 or bfloat16, got " << dtype_name(logits.dtype()));
  HG_CHECK(logits.dim() >= 2 && target.dtype() == kInt64 && !target.is_channels_last() &&
               target.numel() * logits.shape()[1] == logits.numel(),
           a.op << ": logits " << shape_str(logits.shape()) << " and target " << dtype_name(target.dtype()) << " "
                << shape_str(target.shape()) << " do not match");
  HG_CHECK(logits.shape()[1] < (int64_t{1} << 31), a.op << ": too many classes: " << logits.shape()[1]);
}

}  // namespace

LossCudaForward loss_forward(const LossCudaArgs& a, const Tensor& logits, const Tensor& target) {
  check_args(a, logits, target);
  const LossGeo g = make_geo(logits);
  const bool dice = a.w_dice != 0;
  const int64_t rows = g.N * g.tiles;
  LossCudaForward r;
  r.loss = Tensor::empty({}, logits.dtype(), Device::CUDA);
  r.lse = Tensor::empty({g.N * g.S}, kFloat32, Device::CUDA);
  r.coef = Tensor::empty({2, g.C}, kFloat32, Device::CUDA);
  Tensor part = Tensor::empty({rows * (1 + 3 * g.C)}, kFloat64, Device::CUDA);
  Tensor bad;
  unsigned long long* pbad = a.deferred_bad;
  if (pbad == nullptr) {
    bad = Tensor::empty({1}, kInt64, Device::CUDA);
    memset_async(bad.raw_data(), 0xFF, sizeof(unsigned long long));  // kNoBadLabel
    pbad = reinterpret_cast<unsigned long long*>(bad.data<int64_t>());
  }
  dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    loss_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream()>>>(
        dptr<T>(logits), target.data<int64_t>(), g, dice, r.lse.data<float>(), part.data<double>(), pbad);
    HG_CUDA_LAUNCH_CHECK(a.op);
    loss_finalize_kernel<T><<<1, kThreads, 0, stream()>>>(part.data<double>(), rows, g, dice, a.w_ce, a.w_dice,
                                                          a.smooth, dptr<T>(r.loss), r.coef.data<float>());
    HG_CUDA_LAUNCH_CHECK(a.op);
  });
  if (a.deferred_bad != nullptr) return r;  // read later, by DeferredLabelCheck::check
  unsigned long long first_bad = kNoBadLabel;
  copy_d2h(&first_bad, pbad, sizeof(first_bad));  // the loss's one sync
  if (first_bad != kNoBadLabel) r.bad_position = static_cast<int64_t>(first_bad);
  return r;
}

Tensor loss_backward(const LossCudaArgs& a, const Tensor& logits, const Tensor& target, const Tensor& lse,
                     const Tensor& coef, const Tensor& dL) {
  check_args(a, logits, target);
  const LossGeo g = make_geo(logits);
  HG_CHECK(dL.defined() && dL.numel() == 1, a.op << ": backward needs a 1-element gradient");
  HG_CHECK(lse.defined() && lse.numel() == g.N * g.S && coef.defined() && coef.numel() == 2 * g.C,
           a.op << ": backward needs the forward's saved lse and coefficients");
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype(), Device::CUDA, logits.memory_format());
  if (dx.numel() == 0) return dx;
  // A CUDA gradient is read by the kernel (no sync); a CPU one is read here.
  Tensor dL_dev;
  double dL_host = 0;
  if (dL.is_cuda()) dL_dev = dL.dtype() == logits.dtype() ? dL : dL.cast_copy(logits.dtype());
  else dL_host = dL.item();
  dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    loss_backward_kernel<T><<<static_cast<unsigned>(g.N * g.tiles), kThreads, 0, stream()>>>(
        dptr<T>(logits), target.data<int64_t>(), lse.data<float>(), coef.data<float>(), g, a.w_dice != 0,
        dL_dev.defined() ? dptr<T>(dL_dev) : nullptr, dL_host, a.w_ce, a.w_dice, dptr<T>(dx));
    HG_CUDA_LAUNCH_CHECK(a.op);
  });
  return dx;
}

}  // namespace halfgrad::cuda
