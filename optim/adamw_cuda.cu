// adamw_cuda.cu - AdamW for every CUDA parameter in one launch (the CPU reference is adamw.cpp).
//
// Math, per element, in exactly the CPU's order (adamw.h; t = the parameter's step, s = its scalars):
//   p  = p * decay                                   decay = 1 - lr * weight_decay
//   m  = m * beta1 + (1 - beta1) * g
//   v  = v * beta2 + ((1 - beta2) * g) * g
//   p  = p + (neg_step_size * m) / (sqrt(v) / bias_correction2_sqrt + eps)
// Shapes: every buffer of a tensor has its numel elements in the parameter's physical layout
// (NCDHW or NDHWC: the update is elementwise, so only "same layout for all of them" matters; adamw.cpp
// converts a gradient whose layout differs).
// Parallel mapping: the multi-tensor chunk table (multi_tensor_cuda.cuh): one block per chunk of
// 65536 elements, grid-stride over chunks; one thread per element within a chunk.
// Precision: FP32 throughout. Float16 / BFloat16 gradients are widened exactly. A 16-bit parameter with a
// master: the FP32 master is updated and rounded once (nearest even) into the parameter. Pure FP16
// (no master): p, m, v are read as half, updated in FP32 and each rounded once, as the CPU does.
// sqrtf and '/' are IEEE-rounded (nvcc's default -prec-sqrt / -prec-div), and optim/*.cu is built
// with -fmad=false (CMakeLists.txt), as the CPU side contracts nothing: a step agrees with the CPU's
// to the last bit or nearly, and 100 steps to ~1e-5 relative (tests/cuda/optim_cuda_test.cpp).
// Mixed precision: with GradScaler's found_inf flag set the kernel returns before touching memory.
// Capturable entries (AdamWDeviceScalars, for CUDA graphs): every thread computes its chunk's scalars
// from the device lr and t = *step + 1, in double exactly as AdamWScalars<float> does on the host
// (optim/*.cu is built without FMA contraction), rounded once to float; CUDA's pow is within 2 ulp
// in double where glibc's is nearly correctly rounded, so after the rounding to float the scalars
// equal the host's but for a rare last-bit tie (tests/cuda/optim_cuda_test.cpp compares the two
// paths). A second launch (advance_steps_kernel, one thread per entry) then adds 1 to each
// capturable step unless found_inf is set: the update kernel's blocks all read the step before any
// write, since the two launches are ordered on the stream.
#include "optim/adamw_cuda.h"
#include "optim/multi_tensor_cuda.cuh"

namespace halfgrad::optim {
namespace {

using multi_tensor::Chunk;
using multi_tensor::load_float;
using multi_tensor::store_float;

// AdamWScalars<float>(options, step) of adamw.cpp, from the device lr and step + 1.
__device__ AdamWStepScalars device_scalars(const AdamWDeviceScalars& d) {
  const double lr = *d.lr;
  const double t = static_cast<double>(*d.step + 1);
  AdamWStepScalars s;
  s.decay = static_cast<float>(1.0 - lr * d.weight_decay);
  s.beta1 = static_cast<float>(d.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - d.beta1);
  s.beta2 = static_cast<float>(d.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - d.beta2);
  s.bias_correction2_sqrt = static_cast<float>(sqrt(1.0 - pow(d.beta2, t)));
  s.eps = static_cast<float>(d.eps);
  s.neg_step_size = static_cast<float>(-(lr / (1.0 - pow(d.beta1, t))));
  return s;
}

// After the update: each capturable entry's step += 1, unless the step was skipped. One thread per entry.
__global__ void advance_steps_kernel(const AdamWCudaTensor* __restrict__ tensors, int64_t num_tensors,
                                     const float* found_inf) {
  if (multi_tensor::skip_step(found_inf)) return;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < num_tensors && tensors[i].dev.step != nullptr) *tensors[i].dev.step += 1;
}

__global__ void __launch_bounds__(multi_tensor::kThreads)
    adamw_kernel(const AdamWCudaTensor* __restrict__ tensors, const Chunk* __restrict__ chunks, int64_t num_chunks,
                 const float* found_inf) {
  if (multi_tensor::skip_step(found_inf)) return;
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const Chunk ch = chunks[c];
    const AdamWCudaTensor t = tensors[ch.tensor];  // registers: the stores below cannot alias it
    const AdamWStepScalars s = t.dev.lr != nullptr ? device_scalars(t.dev) : t.s;
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const float p = t.master != nullptr ? t.master[i] : load_float(t.param, t.param_dtype, i);
      const float g = load_float(t.grad, t.grad_dtype, i);
      const float m = load_float(t.exp_avg, t.moment_dtype, i);
      const float v = load_float(t.exp_avg_sq, t.moment_dtype, i);
      const float pi = p * s.decay;
      const float mi = m * s.beta1 + s.one_minus_beta1 * g;
      const float vi = v * s.beta2 + s.one_minus_beta2 * g * g;
      const float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
      const float pn = pi + s.neg_step_size * mi / denom;
      if (t.master != nullptr) t.master[i] = pn;
      store_float(t.param, t.param_dtype, i, pn);
      store_float(t.exp_avg, t.moment_dtype, i, mi);
      store_float(t.exp_avg_sq, t.moment_dtype, i, vi);
    }
  }
}

}  // namespace

void adamw_step_cuda(const std::vector<AdamWCudaTensor>& tensors, const float* found_inf) {
  if (tensors.empty()) return;
  for (const AdamWCudaTensor& t : tensors) {
    HG_CHECK(t.param != nullptr && t.grad != nullptr && t.exp_avg != nullptr && t.exp_avg_sq != nullptr && t.numel >= 0,
             "AdamW (CUDA): a parameter entry has a null buffer or a negative numel");
    HG_CHECK(multi_tensor::is_multi_tensor_dtype(t.param_dtype) && multi_tensor::is_multi_tensor_dtype(t.grad_dtype) &&
                 (t.moment_dtype == kFloat32 || t.moment_dtype == kFloat16),
             "AdamW (CUDA): parameters and gradients must be float32, float16 or bfloat16, moments float32 or float16");
    HG_CHECK(is_reduced_float(t.param_dtype) || t.master == nullptr,
             "AdamW (CUDA): a float32 parameter has a master weight");
    HG_CHECK(t.param_dtype != kBFloat16 || t.master != nullptr,
             "AdamW (CUDA): a bfloat16 parameter needs its FP32 master weight");
    HG_CHECK((t.moment_dtype == kFloat16) == (t.param_dtype == kFloat16 && t.master == nullptr),
             "AdamW (CUDA): float16 moments go with exactly the pure-FP16 layout (float16 parameter, no master)");
    HG_CHECK((t.dev.lr == nullptr) == (t.dev.step == nullptr),
             "AdamW (CUDA): a capturable entry needs both its device lr and its device step");
  }
  bool any_capturable = false;
  for (const AdamWCudaTensor& t : tensors) any_capturable = any_capturable || t.dev.step != nullptr;
  const auto table = multi_tensor::upload(tensors, "AdamW (CUDA)");
  if (table.num_chunks > 0) {
    adamw_kernel<<<table.grid(), multi_tensor::kThreads, 0, cuda::stream()>>>(table.entries, table.chunks,
                                                                              table.num_chunks, found_inf);
    HG_CUDA_LAUNCH_CHECK("AdamW.step");
  }
  if (any_capturable) {  // an entry of numel 0 has no chunk but still counts a step, as on the CPU
    const int64_t n = static_cast<int64_t>(tensors.size());
    advance_steps_kernel<<<static_cast<unsigned>((n + multi_tensor::kThreads - 1) / multi_tensor::kThreads),
                           multi_tensor::kThreads, 0, cuda::stream()>>>(table.entries, n, found_inf);
    HG_CUDA_LAUNCH_CHECK("AdamW.step (device step counts)");
  }
}

}  // namespace halfgrad::optim
