// sgd_cuda.cu - SGD with momentum for every CUDA parameter in one launch (the CPU reference is sgd.cpp).
//
// Math, per element, in exactly the CPU's order (sgd.h):
//   d = g + weight_decay * p                                   (when weight_decay != 0)
//   buf = d  (first step)   or   buf = buf * momentum + (1 - dampening) * d      (when momentum != 0)
//   d = d + momentum * buf  (nesterov)   or   d = buf
//   p = p + (-lr) * d
// Shapes: every buffer of a tensor has its numel elements in the parameter's physical layout
// (NCDHW or NDHWC; the update is elementwise, sgd.cpp converts a gradient whose layout differs).
// Parallel mapping: the multi-tensor chunk table (multi_tensor_cuda.cuh): one block per chunk of
// 65536 elements, grid-stride over chunks; one thread per element within a chunk.
// Precision: FP32 throughout; Float16 / BFloat16 gradients are widened exactly; a 16-bit parameter's FP32
// master is updated and rounded once (nearest even) into the parameter.
// Mixed precision: with GradScaler's found_inf flag set the kernel returns before touching memory.
#include "optim/multi_tensor_cuda.cuh"
#include "optim/sgd_cuda.h"

namespace halfgrad::optim {
namespace {

using multi_tensor::Chunk;
using multi_tensor::load_float;
using multi_tensor::store_float;

__global__ void __launch_bounds__(multi_tensor::kThreads)
    sgd_kernel(const SGDCudaTensor* __restrict__ tensors, const Chunk* __restrict__ chunks, int64_t num_chunks,
               const float* found_inf) {
  if (multi_tensor::skip_step(found_inf)) return;
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const Chunk ch = chunks[c];
    const SGDCudaTensor t = tensors[ch.tensor];
    const SGDStepScalars s = t.s;
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const float p = t.master != nullptr ? t.master[i] : load_float(t.param, t.param_dtype, i);
      const float g = load_float(t.grad, t.grad_dtype, i);
      float d = s.decay ? g + s.weight_decay * p : g;
      if (s.use_momentum) {
        const float buf = s.first ? d : t.momentum_buffer[i] * s.momentum + s.one_minus_dampening * d;
        t.momentum_buffer[i] = buf;
        d = s.nesterov ? d + s.momentum * buf : buf;
      }
      const float pn = p + s.neg_lr * d;
      if (t.master != nullptr) t.master[i] = pn;
      store_float(t.param, t.param_dtype, i, pn);
    }
  }
}

}  // namespace

void sgd_step_cuda(const std::vector<SGDCudaTensor>& tensors, const float* found_inf) {
  if (tensors.empty()) return;
  for (const SGDCudaTensor& t : tensors) {
    HG_CHECK(t.param != nullptr && t.grad != nullptr && t.numel >= 0,
             "SGD (CUDA): a parameter entry has a null buffer or a negative numel");
    HG_CHECK(multi_tensor::is_multi_tensor_dtype(t.param_dtype) && multi_tensor::is_multi_tensor_dtype(t.grad_dtype),
             "SGD (CUDA): parameters and gradients must be float32, float16 or bfloat16");
    HG_CHECK(is_reduced_float(t.param_dtype) == (t.master != nullptr),
             "SGD (CUDA): a float16 / bfloat16 parameter needs its FP32 master (and a float32 one has none)");
    HG_CHECK(!t.s.use_momentum || t.momentum_buffer != nullptr, "SGD (CUDA): momentum without a momentum buffer");
  }
  const auto table = multi_tensor::upload(tensors, "SGD (CUDA)");
  if (table.num_chunks == 0) return;
  sgd_kernel<<<table.grid(), multi_tensor::kThreads, 0, cuda::stream()>>>(table.entries, table.chunks,
                                                                          table.num_chunks, found_inf);
  HG_CUDA_LAUNCH_CHECK("SGD.step");
}

}  // namespace halfgrad::optim
