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
// Capturable scaler: inv_scale = float(1 / double(S)) from the device S, formed by every thread (an
// IEEE division in double, correctly rounded on either side: the host's bits). update_scale_kernel:
// the host update() rule on device values, one thread (a handful of flops per iteration).
#include "amp/grad_scaler_cuda.h"
#include "optim/multi_tensor_cuda.cuh"

namespace halfgrad::amp {
namespace {

namespace mt = optim::multi_tensor;

__global__ void __launch_bounds__(mt::kThreads)
    unscale_kernel(const UnscaleCudaTensor* __restrict__ tensors, const mt::Chunk* __restrict__ chunks,
                   int64_t num_chunks, float inv_scale, float* found_inf, const float* device_scale) {
  if (device_scale != nullptr) inv_scale = static_cast<float>(1.0 / static_cast<double>(*device_scale));
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

__global__ void update_scale_kernel(ScalerDeviceState st, ScalerFlags flags, double growth_factor,
                                    double backoff_factor, int64_t growth_interval, float max_scale) {
  bool found_inf = false;
  for (int i = 0; i < flags.count; ++i) found_inf = found_inf || *flags.flag[i] != 0.0f;
  float s = *st.scale;
  int64_t& tracker = st.counters[kGrowthTracker];
  if (found_inf) {
    s = static_cast<float>(static_cast<double>(s) * backoff_factor);
    tracker = 0;
  } else {
    const int64_t successful = tracker + 1;  // incremented before the comparison, as the host's
    if (successful == growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(s) * growth_factor);
      if (isfinite(grown)) s = fminf(grown, max_scale);  // never to inf, nor past max_scale
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
  *st.scale = s;
  st.counters[kSkippedSteps] += found_inf ? 1 : 0;
  st.counters[kConsecutiveSkipped] = found_inf ? st.counters[kConsecutiveSkipped] + 1 : 0;
  st.counters[kLastFoundInf] = found_inf ? 1 : 0;
}

}  // namespace

void unscale_and_check_cuda(const std::vector<UnscaleCudaTensor>& grads, float inv_scale, float* found_inf,
                            const float* device_scale) {
  HG_CHECK(found_inf != nullptr, "GradScaler::unscale_ (CUDA): found_inf must be a device buffer");
  for (const UnscaleCudaTensor& g : grads)
    HG_CHECK(g.src != nullptr && g.dst != nullptr && g.numel >= 0 &&
                 mt::is_multi_tensor_dtype(g.src_dtype) && mt::is_multi_tensor_dtype(g.dst_dtype) &&
                 (g.src != g.dst || g.src_dtype == g.dst_dtype),
             "GradScaler::unscale_ (CUDA): gradients must be float32, float16 or bfloat16 device buffers (in place: one dtype)");
  const auto table = mt::upload(grads, "GradScaler::unscale_ (CUDA)");
  if (table.num_chunks == 0) return;
  unscale_kernel<<<table.grid(), mt::kThreads, 0, cuda::stream()>>>(table.entries, table.chunks, table.num_chunks,
                                                                    inv_scale, found_inf, device_scale);
  HG_CUDA_LAUNCH_CHECK("GradScaler::unscale_");
}

void update_scale_cuda(const ScalerDeviceState& state, const ScalerFlags& flags, double growth_factor,
                       double backoff_factor, int64_t growth_interval, float max_scale) {
  HG_CHECK(state.scale != nullptr && state.counters != nullptr, "GradScaler::update (CUDA): no device state");
  HG_CHECK(flags.count >= 0 && flags.count <= kMaxScalerFlags,
           "GradScaler::update (CUDA): " << flags.count << " optimizers' flags; at most " << kMaxScalerFlags);
  for (int i = 0; i < flags.count; ++i)
    HG_CHECK(flags.flag[i] != nullptr, "GradScaler::update (CUDA): flag " << i << " is null");
  update_scale_kernel<<<1, 1, 0, cuda::stream()>>>(state, flags, growth_factor, backoff_factor, growth_interval,
                                                   max_scale);
  HG_CUDA_LAUNCH_CHECK("GradScaler::update");
}

}  // namespace halfgrad::amp
