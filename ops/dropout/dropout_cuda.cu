// dropout_cuda.cu - dropout and dropout3d on CUDA (launcher in dropout_cuda.h; the ops in dropout.cpp).
//
// Math: out_i = in_i * (keep(seed, key_i) ? scale : 0) (dropout_math.h), the forward (in = x) and the
// backward (in = dy, the same seed) alike. The key is the element's logical NCDHW index (dropout) or
// its (n, c) index n*C + c (dropout3d), so the mask is the CPU's in either memory format.
// Shapes and layout: in, out (N, C, *spatial) in one memory format. One thread per element of the
// physical buffer (grid-stride); NDHWC offsets o = (n*S + s)*C + c are mapped to the logical
// (n*C + c)*S + s. Memory-bound: 8 bytes per float32 element, 4 per float16; the hash is ~10 integer
// ops. Precision: FP16 widened to FP32, multiplied by the FP32 scale once, rounded once.
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/dropout/dropout_cuda.h"

namespace halfgrad::cuda {
namespace {

struct DropoutGeo {
  int64_t C = 1, S = 1;        // channels and prod(spatial) (key mapping; 1 and numel for a flat tensor)
  bool channels_last = false;  // in / out are NDHWC
};

__device__ __forceinline__ uint64_t key_of(int64_t o, const DropoutGeo& g, bool per_channel) {
  if (!g.channels_last) return static_cast<uint64_t>(per_channel ? o / g.S : o);
  const int64_t c = o % g.C, r = o / g.C, n = r / g.S, s = r % g.S;
  return static_cast<uint64_t>(per_channel ? n * g.C + c : (n * g.C + c) * g.S + s);
}

template <typename T>
__global__ void dropout_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n, DropoutGeo g,
                               dropout::Mask m) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += step) {
    const bool k = dropout::keep(m.seed, key_of(o, g, m.per_channel), m.drop_threshold);
    out[o] = from_float<T>(to_float(in[o]) * (k ? m.scale : 0.f));  // x * 0 keeps a NaN, as PyTorch
  }
}

}  // namespace

Tensor dropout_apply(const char* op, const Tensor& in, const dropout::Mask& mask) {
  HG_CHECK(in.defined() && in.is_cuda(), op << ": input must be a CUDA tensor");
  HG_CHECK(!mask.per_channel || in.dim() == 5, op << ": a channel mask needs a 5-D (N, C, D, H, W) input, got "
                                                  << shape_str(in.shape()));
  Tensor out = Tensor::empty(in.shape(), in.dtype(), Device::CUDA, in.memory_format());
  DropoutGeo g;
  g.channels_last = in.is_channels_last();
  if (in.dim() >= 2) {
    g.C = in.shape()[1];
    for (int64_t d = 2; d < in.dim(); ++d) g.S *= in.shape()[d];
  }
  const int64_t n = in.numel();
  if (n == 0) return out;
  dispatch_float(op, "inputs", in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(n), 256, 0, stream()>>>(dev<T>(in), dev<T>(out), n, g, mask);
    HG_CUDA_LAUNCH_CHECK(op);
  });
  return out;
}

}  // namespace halfgrad::cuda
