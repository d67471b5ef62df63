// clip_grad_cuda.cu - clip_grad_norm_ for CUDA gradients (the CPU reference is clip_grad.cpp).
//
// Math (clip_grad.h), for gradients g_1..g_k, p = 2 or infinity:
//   norms_i    = ||g_i||_p, rounded to float, then to half / bfloat16 for a Float16 / BFloat16 gradient (as torch.norm returns it)
//   total      = ||(norms_1, ..., norms_k)||_p                       rounded to float
//   clip_coef  = (1 / (total + 1e-6)) * max_norm                     in float (PyTorch's __rtruediv__)
//   g_i       *= clip_coef   when clip_coef < 1 or NaN               (float multiply, rounded once for half)
// Shapes: each gradient is its numel elements in whatever layout it has.
// Parallel mapping, three launches on the stream, no host round trip between them:
//   1. norm_partials_kernel: the multi-tensor chunk table (multi_tensor_cuda.cuh); one block per chunk
//      of 65536 elements writes that chunk's sum of squares (or max |g|) to partials[chunk].
//   2. norm_finalize_kernel: one thread walks the chunk partials in order (a few hundred for a U-Net),
//      forms each tensor's norm, the total and the clip coefficient into result[2] = {total, coef}.
//      Deterministic: no atomics, the same order every run.
//   3. clip_scale_kernel: the same chunk table; every block reads coef and scales its chunk, or
//      returns at once when coef >= 1.
// Precision: squares and per-chunk sums in FP32 (256 terms per thread, then a tree over the block);
// the per-tensor and total sums of chunk partials in FP64 (a few hundred terms; free in one thread).
// The CPU accumulates every element in FP64, so the norms agree to FP32 rounding (~1e-6 relative).
// Infinity norm: max |g| propagating NaN, as the CPU does.
#include <cmath>

#include "optim/clip_grad_cuda.h"
#include "optim/multi_tensor_cuda.cuh"

namespace halfgrad::optim {
namespace {

using multi_tensor::Chunk;
using multi_tensor::kThreads;
using multi_tensor::load_float;
using multi_tensor::store_float;

template <bool kInfNorm>
__global__ void __launch_bounds__(kThreads)
    norm_partials_kernel(const ClipGradCudaTensor* __restrict__ tensors, const Chunk* __restrict__ chunks,
                         int64_t num_chunks, float* __restrict__ partials) {
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const Chunk ch = chunks[c];
    const ClipGradCudaTensor t = tensors[ch.tensor];
    float acc = 0.0f;
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const float x = load_float(t.grad, t.dtype, i);
      acc = kInfNorm ? multi_tensor::nan_max(acc, fabsf(x)) : acc + x * x;
    }
    acc = multi_tensor::block_reduce<kInfNorm>(acc);
    if (threadIdx.x == 0) partials[c] = acc;
  }
}

// One thread. result[0] = total norm, result[1] = clip coefficient.
template <bool kInfNorm>
__global__ void norm_finalize_kernel(const ClipGradCudaTensor* __restrict__ tensors, const Chunk* __restrict__ chunks,
                                     int64_t num_chunks, const float* __restrict__ partials, float max_norm,
                                     float* __restrict__ result) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const double nan = __longlong_as_double(0x7ff8000000000000LL);
  auto nan_max = [nan](double a, double b) { return (isnan(a) || isnan(b)) ? nan : fmax(a, b); };
  double total = 0.0;
  int64_t c = 0;
  while (c < num_chunks) {  // one tensor per pass: its chunks are consecutive
    const int32_t tensor = chunks[c].tensor;
    double acc = 0.0;
    for (; c < num_chunks && chunks[c].tensor == tensor; ++c)
      acc = kInfNorm ? nan_max(acc, static_cast<double>(partials[c])) : acc + static_cast<double>(partials[c]);
    if (!kInfNorm) acc = sqrt(acc);
    // As torch.norm returns it: a tensor of the gradient's dtype.
    float norm = static_cast<float>(acc);
    if (tensors[tensor].dtype == Dtype::Float16) norm = cuda::to_float(cuda::from_float<__half>(norm));
    if (tensors[tensor].dtype == Dtype::BFloat16) norm = cuda::to_float(cuda::from_float<__nv_bfloat16>(norm));
    total = kInfNorm ? nan_max(total, static_cast<double>(norm)) : total + static_cast<double>(norm) * norm;
  }
  const float total_norm = static_cast<float>(kInfNorm ? total : sqrt(total));
  result[0] = total_norm;
  result[1] = (1.0f / (total_norm + 1e-6f)) * max_norm;
}

__global__ void __launch_bounds__(kThreads)
    clip_scale_kernel(const ClipGradCudaTensor* __restrict__ tensors, const Chunk* __restrict__ chunks,
                      int64_t num_chunks, const float* __restrict__ result) {
  const float coef = result[1];
  if (!(coef < 1.0f || isnan(coef))) return;  // clamp(max=1) lets NaN through, as in PyTorch
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const Chunk ch = chunks[c];
    const ClipGradCudaTensor t = tensors[ch.tensor];
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x)
      store_float(t.grad, t.dtype, i, load_float(t.grad, t.dtype, i) * coef);
  }
}

}  // namespace

double clip_grad_norm_cuda(const std::vector<ClipGradCudaTensor>& grads, double max_norm, bool inf_norm,
                           bool error_if_nonfinite) {
  if (grads.empty()) return 0.0;
  for (const ClipGradCudaTensor& g : grads)
    HG_CHECK(g.grad != nullptr && g.numel >= 0 && multi_tensor::is_multi_tensor_dtype(g.dtype),
             "clip_grad_norm_ (CUDA): gradients must be float32, float16 or bfloat16 device buffers");
  const auto table = multi_tensor::upload(grads, "clip_grad_norm_ (CUDA)");
  // partials[num_chunks], then result[2]; one allocation.
  Tensor scratch = Tensor::empty({table.num_chunks + 2}, kFloat32, Device::CUDA);
  float* partials = scratch.data<float>();
  float* result = partials + table.num_chunks;
  if (table.num_chunks > 0) {
    if (inf_norm) norm_partials_kernel<true><<<table.grid(), kThreads, 0, cuda::stream()>>>(table.entries, table.chunks, table.num_chunks, partials);
    else norm_partials_kernel<false><<<table.grid(), kThreads, 0, cuda::stream()>>>(table.entries, table.chunks, table.num_chunks, partials);
    HG_CUDA_LAUNCH_CHECK("clip_grad_norm_ (norms)");
  }
  const float max_norm_f = static_cast<float>(max_norm);  // the CPU rounds it to the norm's type too
  if (inf_norm) norm_finalize_kernel<true><<<1, 1, 0, cuda::stream()>>>(table.entries, table.chunks, table.num_chunks, partials, max_norm_f, result);
  else norm_finalize_kernel<false><<<1, 1, 0, cuda::stream()>>>(table.entries, table.chunks, table.num_chunks, partials, max_norm_f, result);
  HG_CUDA_LAUNCH_CHECK("clip_grad_norm_ (total)");

  float total = 0.0f;
  if (error_if_nonfinite) {
    cuda::copy_d2h(&total, result, sizeof(float));
    HG_CHECK(std::isfinite(total),
             "clip_grad_norm_: the total norm of order " << (inf_norm ? "inf" : "2") << " for gradients from "
                 "`parameters` is non-finite, so it cannot be clipped. To disable this error and scale the gradients "
                 "by the non-finite norm anyway, set error_if_nonfinite=false");
  }
  if (table.num_chunks > 0) {
    clip_scale_kernel<<<table.grid(), kThreads, 0, cuda::stream()>>>(table.entries, table.chunks, table.num_chunks, result);
    HG_CUDA_LAUNCH_CHECK("clip_grad_norm_ (scale)");
  }
  if (!error_if_nonfinite) cuda::copy_d2h(&total, result, sizeof(float));
  return static_cast<double>(total);
}

}  // namespace halfgrad::optim
