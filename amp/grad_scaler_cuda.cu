// grad_scaler_cuda.cu - the unscale and inf/NaN check of GradScaler for CUDA gradients, in one launch
// over every gradient (PyTorch's _amp_foreach_non_finite_check_and_unscale_; the CPU reference is
// unscale_in_place in grad_scaler.cpp).
//
// Math, per element of every gradient:   found_inf |= !isfinite(g);   g' = g * inv_scale
// where inv_scale = float(1 / double(scale)), computed on the host. g is checked before scaling and
// scaled either way, as PyTorch does (the step is then skipped as a whole).
// Shapes: each gradient is its numel elements in whatever layout it has (elementwise).
// Parallel mapping: the multi-tensor chunk table (multi_tensor_cuda.cuh): one block per chunk of
// 65536 elements, grid-stride over chunks, one thread per element. Each thread keeps its own
// "found" bit in a register and, only if set, stores 1.0f to the flag at the end: every writer
// stores the same value, so the race is benign and no atomics are needed.
// Precision: the product is formed in FP32 (a Float16 / BFloat16 input is widened exactly) and rounded
// once to the destination dtype. For the power-of-two scales GradScaler uses, it is exact unless the
// result leaves FP16's range (in-place FP16) - why GradScaler refuses FP16 grads by default. BF16
// gradients are unscaled in place (FP32's exponent range: a power-of-two divide is exact there).
#include "amp/grad_scaler_cuda.h"
#include "optim/multi_tensor_cuda.cuh"

namespace halfgrad::amp {
namespace {

namespace mt = optim::multi_tensor;

__global__ void __launch_bounds__(mt::kThreads)
    unscale_kernel(const UnscaleCudaTensor* __restrict__ tensors, const mt::Chunk* __restrict__ chunks,
                   int64_t num_chunks, float inv_scale, float* found_inf) {
  bool found = false;
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const mt::Chunk ch = chunks[c];
    const UnscaleCudaTensor t = tensors[ch.tensor];
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const float v = mt::load_float(t.src, t.src_dtype, i);
      found = found || !isfinite(v);
      mt::store_float(t.dst, t.dst_dtype, i, v * inv_scale);
    }
  }
  if (found) *found_inf = 1.0f;
}

}  // namespace

void unscale_and_check_cuda(const std::vector<UnscaleCudaTensor>& grads, float inv_scale, float* found_inf) {
  HG_CHECK(found_inf != nullptr, "GradScaler::unscale_ (CUDA): found_inf must be a device buffer");
  for (const UnscaleCudaTensor& g : grads)
    HG_CHECK(g.src != nullptr && g.dst != nullptr && g.numel >= 0 &&
                 mt::is_multi_tensor_dtype(g.src_dtype) && mt::is_multi_tensor_dtype(g.dst_dtype) &&
                 (g.src != g.dst || g.src_dtype == g.dst_dtype),
             "GradScaler::unscale_ (CUDA): gradients must be float32, float16 or bfloat16 device buffers (in place: one dtype)");
  const auto table = mt::upload(grads, "GradScaler::unscale_ (CUDA)");
  if (table.num_chunks == 0) return;
  unscale_kernel<<<table.grid(), mt::kThreads, 0, cuda::stream()>>>(table.entries, table.chunks, table.num_chunks,
                                                                    inv_scale, found_inf);
  HG_CUDA_LAUNCH_CHECK("GradScaler::unscale_");
}

}  // namespace halfgrad::amp
