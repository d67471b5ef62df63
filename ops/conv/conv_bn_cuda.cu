// conv_bn_cuda.cu - the launchers of conv_bn_cuda.h: one Conv-BN-ReLU stage's convolution on the fused
// halo kernel (conv_bn_halo.cuh), the per-channel reduction of its tile statistics, and the elementwise
// BN + ReLU that the fused pair still writes once (its output) or recomputes (in backward).
//
// Math, per output channel c of y (M = N D H W values; tile t holds n_t of them):
//   the halo kernel writes per tile t: K_t (y at the tile's first voxel, or 0 if that is not finite),
//     s1_t = sum (y - K_t), s2_t = sum (y - K_t)^2 (FP32 over at most 512 values, fixed order), n_t
//   finalize (FP64, tiles in a fixed order):  mean_t = K_t + s1_t / n_t,  M2_t = s2_t - s1_t^2 / n_t,
//     mean = sum n_t mean_t / M,   var = sum (M2_t + n_t (mean_t - mean)^2) / M   (biased)
//     i.e. each tile's shifted one-pass moments, combined by the two-pass parallel formula (Chan, Golub
//     and LeVeque 1979), so neither step subtracts two large nearly equal sums when |mean| >> std. (Plain
//     FP32 sum and sum of squares would: with mean 1000 and std 1, sumsq / M - mean^2 cancels 6 of
//     FP32's 7 digits.) The unfused batch_norm (norm_cuda.cu) shifts by the channel's first value and
//     sums once; both agree with the float64 statistics to far below FP16's resolution.
//   training: invstd = 1 / sqrt(var + eps); running_mean = (1 - m) running_mean + m mean,
//     running_var = (1 - m) running_var + m var M / (M - 1), as norm_cuda.cu's finalize_forward_kernel
//   evaluation: mean, var = running_mean, running_var
//   coef = (mean, scale = weight * invstd, beta = bias); the normalised activation is
//     a = relu((y - mean) * scale + beta)   (fmaf in FP32, rounded once: the fused prologue's formula)
// Backward (cuda_conv3d_dgrad_bn_relu_backward), for stage 1 (a = relu(BN(h)) feeding conv 2):
//   the halo dgrad of conv 2 computes da and, in its epilogue, dz = relu'(a) da (a recomputed from h
//   with the forward's rounding) and per tile sum dz, sum dz (h - mean) (tc_halo_dgrad_relu_bn);
//   finalize (FP64, fixed order) S1, S2 per channel: dbias = S1, dweight = invstd S2,
//   dh = A dz + B (h - mean) + C0, A = w invstd, B = -invstd^3 w S2 / M, C0 = -invstd w S1 / M
//   (training; evaluation: B = C0 = 0), the formulas of norm_cuda.cu's backward.
// Layouts: y, a (N, C, D, H, W) with channels-last storage; tile_stats (tiles, C) float4; saved (2, C),
// coef (3, C) float32.
// Parallel mapping: both finalize kernels are one block of 256 threads per channel, thread i taking
// tiles i, i + 256, ...; norm_reduce::block_sum2 combines them in a fixed order (same bits every run,
// no atomics). bn_relu_apply and bn_backward_apply are grid-stride over 8-channel (16-byte) chunks.
// Precision: statistics FP32 within a tile, FP64 across tiles; activations 16-bit, math in FP32.
#include <climits>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda/tensor_access.cuh"
#include "ops/conv/conv_bn_cuda.h"
#include "ops/conv/conv_bn_halo.cuh"
#include "ops/conv/conv_halo_path.h"
#include "ops/conv/conv_igemm.cuh"
#include "ops/norm/norm_reduce.cuh"

namespace halfgrad::ops::conv {
namespace {

using cuda::norm_reduce::block_sum2;
constexpr int kThreads = cuda::norm_reduce::kThreads;
constexpr const char* kOp = "conv_bn_relu";

// stats (tiles, C) -> saved (2, C), coef (3, C); running stats updated (batch_stats) or read. stats is
// null in evaluation mode.
__global__ void __launch_bounds__(kThreads)
    bn_finalize_kernel(const float4* __restrict__ stats, int64_t tiles, int C, double M, const float* __restrict__ w,
                       const float* __restrict__ b, float* rm, float* rv, double momentum, double eps,
                       float* __restrict__ saved, float* __restrict__ coef) {
  const int c = blockIdx.x;
  __shared__ double mean_s;
  double mean = 0, var = 0;
  if (stats) {
    double s = 0, unused = 0;
    for (int64_t t = threadIdx.x; t < tiles; t += kThreads) {
      const float4 p = stats[t * C + c];
      s += static_cast<double>(p.w) * p.x + p.y;  // n_t K_t + s1_t = the tile's sum of y
    }
    block_sum2(s, unused);
    if (threadIdx.x == 0) mean_s = s / M;
    __syncthreads();
    mean = mean_s;
    double m2 = 0;
    for (int64_t t = threadIdx.x; t < tiles; t += kThreads) {
      const float4 p = stats[t * C + c];
      const double n = p.w, mt = p.x + p.y / n, dm = mt - mean;
      m2 += (p.z - static_cast<double>(p.y) * p.y / n) + n * dm * dm;
    }
    block_sum2(m2, unused);
    if (threadIdx.x != 0) return;
    var = m2 / M;
    if (var < 0.0) var = 0.0;  // rounding; not fmax(0.0, var), which turns a NaN into 0
    if (rm) rm[c] = static_cast<float>((1 - momentum) * rm[c] + momentum * mean);
    if (rv) rv[c] = static_cast<float>((1 - momentum) * rv[c] + momentum * var * M / (M - 1));
  } else {
    if (threadIdx.x != 0) return;
    mean = rm[c];
    var = rv[c];
  }
  const double invstd = 1.0 / sqrt(var + eps);
  saved[c] = static_cast<float>(mean);
  saved[C + c] = static_cast<float>(invstd);
  coef[c] = static_cast<float>(mean);
  coef[C + c] = static_cast<float>((w ? w[c] : 1.0) * invstd);
  coef[2 * C + c] = b ? b[c] : 0.f;
}

// a = relu((y - mean) * scale + beta), y and a channels-last with C channels (C % 8 == 0), 16-byte chunks.
template <typename T>
__global__ void bn_relu_apply_kernel(const T* __restrict__ y, const float* __restrict__ coef, int C, int64_t chunks,
                                     T* __restrict__ a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
    int4 chunk = reinterpret_cast<const int4*>(y)[i];
    T* e = reinterpret_cast<T*>(&chunk);
    const int c0 = static_cast<int>((i * 8) % C);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int ch = c0 + k;
      const float v = fmaf(cuda::to_float(e[k]) - coef[ch], coef[C + ch], coef[2 * C + ch]);
      e[k] = cuda::from_float<T>(v < 0.f ? 0.f : v);  // NaN kept, as relu
    }
    reinterpret_cast<int4*>(a)[i] = chunk;
  }
}

// Backward of stage 1's BN from the dgrad's tile sums: stats (tiles, C) {sum dz, sum dz (h - mean), 0, n}
// -> dweight = invstd S2, dbias = S1 (either may be null) and bcoef (4, C) = (mean, A, B, C0) of
// dh = A dz + B (h - mean) + C0: A = w invstd, B = -invstd^3 w S2 / M, C0 = -invstd w S1 / M in
// training, B = C0 = 0 in evaluation (norm_cuda.cu's finalize_backward_kernel, the same formulas).
__global__ void __launch_bounds__(kThreads)
    bn_backward_finalize_kernel(const float4* __restrict__ stats, int64_t tiles, int C, double M,
                                const float* __restrict__ w, const float* __restrict__ saved, bool batch_stats,
                                float* __restrict__ bcoef, float* __restrict__ dweight, float* __restrict__ dbias) {
  const int c = blockIdx.x;
  double s1 = 0, s2 = 0;
  for (int64_t t = threadIdx.x; t < tiles; t += kThreads) {
    const float4 p = stats[t * C + c];
    s1 += p.x;
    s2 += p.y;
  }
  block_sum2(s1, s2);
  if (threadIdx.x != 0) return;
  const double mean = saved[c], invstd = saved[C + c], wc = w ? w[c] : 1.0;
  if (dweight) dweight[c] = static_cast<float>(invstd * s2);
  if (dbias) dbias[c] = static_cast<float>(s1);
  bcoef[c] = static_cast<float>(mean);
  bcoef[C + c] = static_cast<float>(wc * invstd);
  bcoef[2 * C + c] = batch_stats ? static_cast<float>(-invstd * invstd * invstd * wc * s2 / M) : 0.f;
  bcoef[3 * C + c] = batch_stats ? static_cast<float>(-invstd * wc * s1 / M) : 0.f;
}

// dh = A dz + B (h - mean) + C0 per channel (bcoef (4, C)), channels-last, 16-byte chunks.
template <typename T>
__global__ void bn_backward_apply_kernel(const T* __restrict__ dz, const T* __restrict__ h, const float* __restrict__ bcoef,
                                         int C, int64_t chunks, T* __restrict__ dh) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
    int4 g = reinterpret_cast<const int4*>(dz)[i];
    const int4 x = reinterpret_cast<const int4*>(h)[i];
    T* ge = reinterpret_cast<T*>(&g);
    const T* xe = reinterpret_cast<const T*>(&x);
    const int c0 = static_cast<int>((i * 8) % C);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int ch = c0 + k;
      const float v = bcoef[C + ch] * cuda::to_float(ge[k]) + bcoef[2 * C + ch] * (cuda::to_float(xe[k]) - bcoef[ch]) +
                      bcoef[3 * C + ch];
      ge[k] = cuda::from_float<T>(v);
    }
    reinterpret_cast<int4*>(dh)[i] = g;
  }
}

int as_int(int64_t v, const char* what) {
  HG_CHECK(v >= 0 && v < INT_MAX, kOp << ": " << what << " = " << v << " exceeds the 32-bit index range of the CUDA kernels");
  return static_cast<int>(v);
}

const float* fptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* fptr_mut(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

void check_channel_vector(const Tensor& t, int64_t C, const char* what) {
  if (!t.defined()) return;
  HG_CHECK(t.is_cuda() && t.dtype() == kFloat32 && t.dim() == 1 && t.size(0) == C,
           kOp << ": " << what << " must be a float32 CUDA tensor [" << C << "], got " << shape_str(t.shape())
               << " " << dtype_name(t.dtype()));
}

}  // namespace

bool conv_bn_halo_applies(const ConvGeometry& g, Dtype dt) {
  if (!halo_conv_applies(g, dt, /*dgrad=*/false)) return false;
  return (g.cin == 1 || g.cin == 16 || g.cin == 32) && (g.cout == 16 || g.cout == 32);
}

ConvBnCudaForward cuda_conv3d_bn_fprop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& in_coef,
                                       const BnCudaState& bn) {
  const Dtype dt = w.dtype();
  HG_CHECK(conv_bn_halo_applies(g, dt),
           kOp << ": the fused stage needs a float16/bfloat16 3x3x3 convolution, stride 1, padding 1, dilation 1, with "
                  "16 or 32 input and output channels; got "
               << dtype_name(dt) << ", Cin " << g.cin << ", Cout " << g.cout << ", kernel (" << g.k[0] << ", " << g.k[1]
               << ", " << g.k[2] << "), padding (" << g.p[0] << ", " << g.p[1] << ", " << g.p[2] << ")");
  const Shape want_x{g.n, g.cin, g.d, g.h, g.w}, want_w{g.cout, g.cin, 3, 3, 3};
  HG_CHECK(x.is_cuda() && w.is_cuda() && x.dtype() == dt && x.shape() == want_x && w.shape() == want_w &&
               x.memory_format() == MemoryFormat::ChannelsLast3d,
           kOp << ": input " << shape_str(x.shape()) << " " << dtype_name(x.dtype()) << " and weight " << shape_str(w.shape())
               << " must be CUDA tensors of " << shape_str(want_x) << " (channels-last) and " << shape_str(want_w) << ", both "
               << dtype_name(dt));
  HG_CHECK(!in_coef.defined() || g.cin != 1,
           kOp << ": a 1-channel input is the network's: the fused stage normalises only 16 or 32 input channels");
  HG_CHECK(!in_coef.defined() || (in_coef.is_cuda() && in_coef.dtype() == kFloat32 && in_coef.shape() == Shape({3, g.cin})),
           kOp << ": the input's normalisation must be (3, " << g.cin << ") float32 on CUDA, got "
               << shape_str(in_coef.shape()));
  const int64_t C = g.cout;
  check_channel_vector(bn.weight, C, "BatchNorm weight");
  check_channel_vector(bn.bias, C, "BatchNorm bias");
  check_channel_vector(bn.running_mean, C, "running_mean");
  check_channel_vector(bn.running_var, C, "running_var");
  HG_CHECK(bn.batch_stats || (bn.running_mean.defined() && bn.running_var.defined()),
           kOp << ": evaluation mode needs running_mean and running_var");
  const int64_t M = g.n * g.d * g.h * g.w;
  HG_CHECK(!bn.batch_stats || M > 1, kOp << ": expected more than 1 value per channel when training, got output "
                                         << shape_str(Shape{g.n, C, g.d, g.h, g.w}));

  igemm::TcOperand type = igemm::TcOperand::Half;
  tensor_core_operand(dt, &type);
  const igemm::Gather ga = make_gather(x, g, /*transposed=*/false, kOp);
  const Tensor B = pack_weights(w, PackOrder::Fprop, kOp);
  ConvBnCudaForward r;
  r.y = Tensor::empty({g.n, C, g.d, g.h, g.w}, dt, Device::CUDA, MemoryFormat::ChannelsLast3d);
  igemm::Epilogue e;
  e.out = r.y.raw_data();
  e.out_operand = true;
  e.N = as_int(C, "output channels");
  const int64_t tiles = igemm::halo_tile_count(ga);
  Tensor stats;
  if (bn.batch_stats) stats = Tensor::empty({tiles, C, 4}, kFloat32, Device::CUDA);
  igemm::tc_halo_conv_bn(ga, type, B.raw_data(), as_int(B.size(1), "packed weight columns"), e,
                         in_coef.defined() ? in_coef.data<float>() : nullptr, stats.defined() ? stats.data<float>() : nullptr,
                         kOp);
  r.saved = Tensor::empty({2, C}, kFloat32, Device::CUDA);
  r.coef = Tensor::empty({3, C}, kFloat32, Device::CUDA);
  bn_finalize_kernel<<<static_cast<unsigned>(C), kThreads, 0, cuda::stream()>>>(
      stats.defined() ? reinterpret_cast<const float4*>(stats.data<float>()) : nullptr, tiles, static_cast<int>(C),
      static_cast<double>(M), fptr(bn.weight), fptr(bn.bias), fptr_mut(bn.running_mean), fptr_mut(bn.running_var),
      bn.momentum, bn.eps, r.saved.data<float>(), r.coef.data<float>());
  HG_CUDA_LAUNCH_CHECK(kOp);
  if (bn.batch_stats) {  // updated in place by bn_finalize_kernel, as batch_norm's
    if (bn.running_mean.defined()) Tensor(bn.running_mean).bump_version();
    if (bn.running_var.defined()) Tensor(bn.running_var).bump_version();
  }
  return r;
}

BnReluGradCuda cuda_conv3d_dgrad_bn_relu_backward(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& h,
                                                 const Tensor& coef, const Tensor& saved, const Tensor& gamma,
                                                 bool batch_stats, bool need_w, bool need_b) {
  const Dtype dt = w.dtype();
  HG_CHECK(conv_bn_halo_applies(g, dt) && g.cin != 1,
           kOp << ": the fused backward needs the halo dgrad: float16/bfloat16, 3x3x3 stride 1 padding 1, 16 or 32 "
                  "channels in and out; got "
               << dtype_name(dt) << ", Cin " << g.cin << ", Cout " << g.cout);
  const Shape want_dy{g.n, g.cout, g.d, g.h, g.w}, want_h{g.n, g.cin, g.d, g.h, g.w};
  HG_CHECK(dy.is_cuda() && dy.shape() == want_dy && h.is_cuda() && h.dtype() == dt && h.shape() == want_h &&
               h.memory_format() == MemoryFormat::ChannelsLast3d,
           kOp << " backward: output gradient " << shape_str(dy.shape()) << " and the stage's raw output "
               << shape_str(h.shape()) << " must be CUDA tensors of " << shape_str(want_dy) << " and " << shape_str(want_h)
               << " (channels-last, " << dtype_name(dt) << ")");
  const int64_t C = g.cin;
  HG_CHECK(coef.is_cuda() && coef.shape() == Shape({3, C}) && saved.is_cuda() && saved.shape() == Shape({2, C}),
           kOp << " backward: needs the forward's coef (3, " << C << ") and saved (2, " << C << ")");
  check_channel_vector(gamma, C, "BatchNorm weight");
  const Tensor dys = (dy.dtype() == dt ? dy : dy.cast_copy(dt)).format_copy(MemoryFormat::ChannelsLast3d);
  igemm::TcOperand type = igemm::TcOperand::Half;
  tensor_core_operand(dt, &type);
  const igemm::Gather ga = make_gather(dys, g, /*transposed=*/true, kOp);
  const Tensor B = pack_weights(w, PackOrder::Dgrad, kOp);
  const Tensor dz = Tensor::empty(want_h, dt, Device::CUDA, MemoryFormat::ChannelsLast3d);
  igemm::Epilogue e;
  e.out = dz.raw_data();
  e.out_operand = true;
  e.N = as_int(C, "input channels");
  const int64_t tiles = igemm::halo_tile_count(ga);
  const Tensor stats = Tensor::empty({tiles, C, 4}, kFloat32, Device::CUDA);
  igemm::tc_halo_dgrad_relu_bn(ga, type, B.raw_data(), as_int(B.size(1), "packed weight columns"), e, coef.data<float>(),
                               h.raw_data(), stats.data<float>(), kOp);
  BnReluGradCuda r;
  if (need_w) r.dweight = Tensor::empty({C}, kFloat32, Device::CUDA);
  if (need_b) r.dbias = Tensor::empty({C}, kFloat32, Device::CUDA);
  const Tensor bcoef = Tensor::empty({4, C}, kFloat32, Device::CUDA);
  bn_backward_finalize_kernel<<<static_cast<unsigned>(C), kThreads, 0, cuda::stream()>>>(
      reinterpret_cast<const float4*>(stats.data<float>()), tiles, static_cast<int>(C),
      static_cast<double>(g.n * g.d * g.h * g.w), fptr(gamma), saved.data<float>(), batch_stats, bcoef.data<float>(),
      fptr_mut(r.dweight), fptr_mut(r.dbias));
  HG_CUDA_LAUNCH_CHECK(kOp);
  r.dh = Tensor::empty(want_h, dt, Device::CUDA, MemoryFormat::ChannelsLast3d);
  const int64_t chunks = dz.numel() / 8;
  cuda::dispatch_float(kOp, "gradients", dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      bn_backward_apply_kernel<T><<<cuda::grid_for(chunks), 256, 0, cuda::stream()>>>(
          cuda::dev<T>(dz), cuda::dev<T>(h), bcoef.data<float>(), static_cast<int>(C), chunks, cuda::dev<T>(r.dh));
    }
  });
  HG_CUDA_LAUNCH_CHECK(kOp);
  return r;
}

Tensor cuda_bn_relu_apply(const Tensor& y, const Tensor& coef) {
  HG_CHECK(y.is_cuda() && y.dim() == 5 && y.memory_format() == MemoryFormat::ChannelsLast3d && y.size(1) % 8 == 0 &&
               (y.dtype() == kFloat16 || y.dtype() == kBFloat16),
           kOp << ": BN + ReLU apply takes a channels-last float16/bfloat16 CUDA tensor with a multiple of 8 channels, got "
               << shape_str(y.shape()) << " " << dtype_name(y.dtype()));
  HG_CHECK(coef.is_cuda() && coef.dtype() == kFloat32 && coef.shape() == Shape({3, y.size(1)}),
           kOp << ": BN + ReLU apply needs coef (3, " << y.size(1) << ") float32, got " << shape_str(coef.shape()));
  Tensor a = Tensor::empty(y.shape(), y.dtype(), Device::CUDA, MemoryFormat::ChannelsLast3d);
  const int64_t chunks = y.numel() / 8;
  if (chunks == 0) return a;
  cuda::dispatch_float(kOp, "activations", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      bn_relu_apply_kernel<T><<<cuda::grid_for(chunks), 256, 0, cuda::stream()>>>(
          cuda::dev<T>(y), coef.data<float>(), static_cast<int>(y.size(1)), chunks, cuda::dev<T>(a));
    }
  });
  HG_CUDA_LAUNCH_CHECK(kOp);
  return a;
}

}  // namespace halfgrad::ops::conv
