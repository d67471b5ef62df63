// shape_cuda.cu - one_hot and permute on CUDA (launchers declared in shape_cuda.h).
//
// permute: y[j_0, .., j_{n-1}] = x[i] with i_{dims[k]} = j_k; x and y contiguous, any element size
// (2, 4 or 8 bytes: moved as that unsigned integer, exact). One thread per output element in a
// grid-stride loop: writes coalesced, reads strided (gathered through L2); the output index is
// peeled into its coordinates innermost first and each adds coordinate * (x's stride of that dim).
// Memory-bound: 2 element sizes per element moved.
//
// one_hot:
// Math: y[n, c, s] = (labels[n, s] == c) ? 1 : 0; not differentiable.
// Shapes and layout: labels int64 (N, S) (S = the product of the spatial extents), contiguous;
// y (N, C, S) contiguous (NCDHW for volumes), float32, float16 or bfloat16.
// Parallel mapping: one thread per output element in a grid-stride loop (writes coalesced; each
// label is read C times, from L1/L2). The thread of channel 0 also validates the label; the smallest
// flat index of an invalid label is kept with atomicMin, and the launcher reads it back and throws.
// Precision: exact (0 and 1 in either dtype).
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/shape/shape_cuda.h"

namespace halfgrad::cuda {
namespace {

constexpr int kMaxDims = 8;  // core/tensor.h: shapes have at most 8 dimensions

struct PermuteGeo {
  int nd;
  int64_t out_extent[kMaxDims];  // y's extents
  int64_t in_stride[kMaxDims];   // x's stride of the dim that y's dim k reads (x.stride(dims[k]))
};

template <typename E>
__global__ void permute_kernel(const E* __restrict__ x, E* __restrict__ y, PermuteGeo g, int64_t total) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = o, off = 0;
    for (int k = g.nd - 1; k >= 0; --k) {
      const int64_t j = t % g.out_extent[k];
      t /= g.out_extent[k];
      off += j * g.in_stride[k];
    }
    y[o] = x[off];
  }
}

template <typename T>
__global__ void one_hot_kernel(const int64_t* __restrict__ labels, T* __restrict__ y, int64_t N, int64_t C, int64_t S,
                               unsigned long long* first_bad) {
  const int64_t total = N * C * S;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i % S, c = (i / S) % C, n = i / (S * C);
    const int64_t li = n * S + s;
    const int64_t label = labels[li];
    y[i] = from_float<T>(label == c ? 1.f : 0.f);
    if (c == 0 && (label < 0 || label >= C)) atomicMin(first_bad, static_cast<unsigned long long>(li));
  }
}

}  // namespace

Tensor one_hot(const Tensor& labels_in, int64_t num_classes, Dtype dtype) {
  HG_CHECK(labels_in.defined() && labels_in.is_cuda() && labels_in.dtype() == kInt64, "one_hot: labels must be int64 on cuda");
  const Tensor labels = labels_in.format_copy(MemoryFormat::Contiguous);  // (N, S) order
  HG_CHECK(dtype == kFloat32 || is_reduced_float(dtype),
           "one_hot: CUDA output dtype must be float32, float16 or bfloat16, got " << dtype_name(dtype));
  HG_CHECK(num_classes > 0, "one_hot: num_classes must be positive, got " << num_classes);
  const Shape& s = labels.shape();
  const int64_t N = s[0];
  const int64_t S = N > 0 ? labels.numel() / N : 0;
  Shape out = {N, num_classes};
  out.insert(out.end(), s.begin() + 1, s.end());
  Tensor y = Tensor::empty(out, dtype, Device::CUDA);
  if (y.numel() == 0) return y;
  Tensor flag = Tensor::empty({1}, kInt64, Device::CUDA);
  memset_async(flag.raw_data(), 0xff, sizeof(unsigned long long));  // "no bad label" = the largest index
  auto* first_bad = static_cast<unsigned long long*>(flag.raw_data());
  dispatch_float("one_hot", "outputs", dtype, [&](auto tag) {
    using T = decltype(tag);
    one_hot_kernel<T><<<grid_for(y.numel()), 256, 0, stream()>>>(labels.data<int64_t>(), dev<T>(y), N, num_classes,
                                                                 S, first_bad);
  });
  HG_CUDA_LAUNCH_CHECK("one_hot");
  unsigned long long bad = 0;
  copy_d2h(&bad, first_bad, sizeof(bad));
  if (bad != ~0ULL) {
    int64_t value = 0;
    copy_d2h(&value, labels.data<int64_t>() + bad, sizeof(value));
    HG_CHECK(false, "one_hot: label " << value << " at flat index " << bad << " is outside [0, " << num_classes << ")");
  }
  return y;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  HG_CHECK(x.defined() && x.is_cuda() && !x.is_channels_last() && x.dim() <= kMaxDims &&
               static_cast<int64_t>(dims.size()) == x.dim(),
           "permute: the CUDA kernel takes a contiguous CUDA tensor of at most 8 dims and one dim index per dim");
  const Shape& xs = x.shape();
  PermuteGeo g{};
  g.nd = static_cast<int>(x.dim());
  int64_t stride[kMaxDims];
  int64_t st = 1;
  for (int i = g.nd - 1; i >= 0; --i) {
    stride[i] = st;
    st *= xs[i];
  }
  Shape ys(x.dim());
  for (int k = 0; k < g.nd; ++k) {
    ys[k] = xs[dims[k]];
    g.out_extent[k] = ys[k];
    g.in_stride[k] = stride[dims[k]];
  }
  Tensor y = Tensor::empty(ys, x.dtype(), Device::CUDA);
  if (y.numel() == 0) return y;
  const unsigned blocks = grid_for(y.numel());
  switch (dtype_size(x.dtype())) {
    case 2:
      permute_kernel<uint16_t><<<blocks, 256, 0, stream()>>>(static_cast<const uint16_t*>(x.raw_data()),
                                                             static_cast<uint16_t*>(y.raw_data()), g, y.numel());
      break;
    case 4:
      permute_kernel<uint32_t><<<blocks, 256, 0, stream()>>>(static_cast<const uint32_t*>(x.raw_data()),
                                                             static_cast<uint32_t*>(y.raw_data()), g, y.numel());
      break;
    case 8:
      permute_kernel<uint64_t><<<blocks, 256, 0, stream()>>>(static_cast<const uint64_t*>(x.raw_data()),
                                                             static_cast<uint64_t*>(y.raw_data()), g, y.numel());
      break;
    default: HG_FAIL("permute: unsupported element size " << dtype_size(x.dtype()));
  }
  HG_CUDA_LAUNCH_CHECK("permute");
  return y;
}

}  // namespace halfgrad::cuda
