// activation_cuda.cu - relu / leaky_relu and cat on CUDA (launchers declared in activation_cuda.h).
//
// Math: leaky_relu  y = x > 0 ? x : slope * x            dx = dy * (x > 0 ? 1 : slope)
//       relu        y = x < 0 ? 0 : x (NaN kept)         dx = y <= 0 ? 0 : dy       (saves y)
//       (PyTorch's threshold_backward: a NaN y passes dy on, an infinite dy at y <= 0 gives 0)
//       cat         whole = the parts side by side along one dim; backward slices dy the same way.
// Shapes and layout: activations are format-agnostic: the flat loop runs over the physical buffer,
// so NCDHW and NDHWC tensors are served alike and the output keeps the input's format. cat works on
// the physical order too: concatenating along the channel dim is one block copy per (sample, part) for
// NCDHW and an interleave of C_i-element runs for NDHWC; activation.cpp computes the geometry.
// Parallel mapping: activations use pointwise_cuda.cuh (grid-stride, 16-byte packs: memory-bound,
// 8 bytes per float32 element forward and 12 backward, half that for float16). cat: one thread per
// word of the part, the word being the widest of 16/8/4/2/1 bytes that divides the part's run, the
// whole's row and the part's offset in it (so the U-Net's 16-channel float16 runs move as 16-byte
// words); one launch per part.
// Precision: activations compute in FP32 on widened FP16 and round once (relu is exact); cat is a copy.
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/activation/activation_cuda.h"
#include "ops/elementwise/pointwise_cuda.cuh"

namespace halfgrad::cuda {
namespace {

struct ReluFn {
  __device__ float operator()(float v) const { return v < 0.f ? 0.f : v; }
};
struct LeakyReluFn {
  float slope;
  __device__ float operator()(float v) const { return v > 0.f ? v : v * slope; }
};
// (dy, saved) -> dx. leaky_relu (saved x): x > 0 ? dy : dy * slope, as leaky_relu_backward (a NaN x
// takes the slope branch). Slope 0 is relu's backward on the saved y, threshold_backward's
// y <= 0 ? 0 : dy: exactly 0 even for an infinite dy (0 * inf would be NaN), and dy where y is NaN.
struct LeakyReluGradFn {
  float slope;
  __device__ float operator()(float g, float s) const {
    if (slope == 0.f) return s <= 0.f ? 0.f : g;
    return s > 0.f ? g : g * slope;
  }
};


template <typename W>
__global__ void cat_kernel(W* __restrict__ whole, W* __restrict__ part, int64_t outer, int64_t inner, int64_t total,
                           int64_t offset, bool to_parts) {
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / inner, j = i % inner;
    W* w = whole + o * total + offset + j;
    if (to_parts) part[i] = *w;
    else *w = part[i];
  }
}

template <typename W>
void launch_cat(void* whole, void* part, int64_t outer, int64_t inner_bytes, int64_t total_bytes, int64_t offset_bytes,
                bool to_parts) {
  const int64_t w = sizeof(W);
  const int64_t n = outer * (inner_bytes / w);
  cat_kernel<W><<<grid_for(n), 256, 0, stream()>>>(static_cast<W*>(whole), static_cast<W*>(part), outer, inner_bytes / w,
                                                    total_bytes / w, offset_bytes / w, to_parts);
  HG_CUDA_LAUNCH_CHECK("cat");
}

}  // namespace

Tensor leaky_relu_forward(const char* op, const Tensor& x, double slope) {
  HG_CHECK(x.defined() && x.is_cuda(), op << ": input must be a CUDA tensor");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::CUDA, x.memory_format());
  dispatch_float(op, "activations", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (slope == 0.0) pointwise::launch_unary(op, dev<T>(x), dev<T>(y), x.numel(), ReluFn{});
    else pointwise::launch_unary(op, dev<T>(x), dev<T>(y), x.numel(), LeakyReluFn{static_cast<float>(slope)});
  });
  return y;
}

Tensor leaky_relu_backward(const char* op, const Tensor& gy, const Tensor& saved, double slope) {
  HG_CHECK(gy.defined() && gy.is_cuda() && saved.is_cuda(), op << ": backward needs CUDA tensors");
  HG_CHECK(gy.shape() == saved.shape(), op << ": gradient " << shape_str(gy.shape()) << " for an output of shape "
                                           << shape_str(saved.shape()));
  const Tensor g = (gy.dtype() == saved.dtype() ? gy : gy.cast_copy(saved.dtype())).format_copy(saved.memory_format());
  Tensor dx = Tensor::empty(saved.shape(), saved.dtype(), Device::CUDA, saved.memory_format());
  dispatch_float(op, "activations", saved.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pointwise::launch_binary(op, dev<T>(g), dev<T>(saved), dev<T>(dx), saved.numel(),
                             LeakyReluGradFn{static_cast<float>(slope)});
  });
  return dx;
}

void cat_copy(const CatGeometry& g, size_t elem, void* whole, const std::vector<void*>& parts, bool to_parts) {
  HG_CHECK(g.part_inner.size() == parts.size() && g.part_offset.size() == parts.size(),
           "cat: " << parts.size() << " parts for a geometry of " << g.part_inner.size());
  const int64_t es = static_cast<int64_t>(elem);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == nullptr || g.outer == 0 || g.part_inner[i] == 0) continue;
    const int64_t inner = g.part_inner[i] * es, total = g.total_inner * es, offset = g.part_offset[i] * es;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(whole) | reinterpret_cast<uintptr_t>(parts[i]);
    auto fits = [&](int64_t w) { return inner % w == 0 && total % w == 0 && offset % w == 0 && addr % w == 0; };
    if (fits(16)) launch_cat<uint4>(whole, parts[i], g.outer, inner, total, offset, to_parts);
    else if (fits(8)) launch_cat<uint2>(whole, parts[i], g.outer, inner, total, offset, to_parts);
    else if (fits(4)) launch_cat<uint32_t>(whole, parts[i], g.outer, inner, total, offset, to_parts);
    else if (fits(2)) launch_cat<uint16_t>(whole, parts[i], g.outer, inner, total, offset, to_parts);
    else launch_cat<uint8_t>(whole, parts[i], g.outer, inner, total, offset, to_parts);
  }
}

}  // namespace halfgrad::cuda
