// reduce.cpp - sum, mean and argmax (math and errors in reduce.h): public ops, backward closures and
// the CPU loops; CUDA tensors (either memory format) go to reduce_cuda.h (FP32 accumulation) and
// their backward to elementwise_cuda.h's broadcast_scaled (dx in the input's memory format).
#include "ops/reduce/reduce.h"

#include <algorithm>

#include "ops/common.h"
#include "ops/elementwise/elementwise.h"
#ifdef HALFGRAD_CUDA
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/reduce/reduce_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

// Elements per partial sum of a full reduction.
constexpr int64_t kSumChunk = 1 << 14;

std::vector<bool> reduced_mask(const char* op, const Shape& s, const std::vector<int64_t>& dims) {
  const int64_t nd = static_cast<int64_t>(s.size());
  std::vector<bool> mask(nd, false);
  for (int64_t d : dims) {
    HG_CHECK(d >= -nd && d < nd, op << ": dim " << d << " out of range for shape " << shape_str(s));
    const int64_t dd = d < 0 ? d + nd : d;
    HG_CHECK(!mask[dd], op << ": dim " << d << " listed twice for shape " << shape_str(s));
    mask[dd] = true;
  }
  return mask;
}

// Reduce x over masked dims into a keepdim-shaped result, scaled by `scale`.
Tensor reduce_sum(const char* op, const Tensor& x, const std::vector<bool>& mask, double scale, Dtype out) {
  const Shape& s = x.shape();
  Shape ks = s;
  for (size_t i = 0; i < s.size(); ++i)
    if (mask[i]) ks[i] = 1;
  const int64_t nd = static_cast<int64_t>(s.size());
  // Strides of the keepdim output, 0 along reduced dims.
  std::vector<int64_t> st(nd, 0);
  int64_t stride = 1;
  for (int64_t i = nd - 1; i >= 0; --i) {
    st[i] = mask[i] ? 0 : stride;
    stride *= ks[i];
  }
  std::vector<double> acc(shape_numel(ks), 0.0);
  Tensor cx = to_compute(x);
  const int64_t n = x.numel();
  // Fast path: reducing everything, or a contiguous inner block per output element.
  dispatch_compute(cx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = cx.data<T>();
    if (acc.size() == 1) {
      // Fixed chunks of kSumChunk elements, each summed in order, the chunk sums added in order: the
      // same bits whatever the thread count (an OpenMP reduction(+) combines the threads' partials in
      // the order they finish).
      const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
      std::vector<double> part(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (parallel_worth(n))
      for (int64_t c = 0; c < chunks; ++c) {
        double a = 0;
        for (int64_t i = c * kSumChunk; i < std::min(n, (c + 1) * kSumChunk); ++i) a += p[i];
        part[c] = a;
      }
      double total = 0;
      for (double a : part) total += a;
      acc[0] = total;
      return;
    }
    // Split into (outer, middle = dims up to the last kept one, inner = trailing reduced run).
    int64_t inner = 1;
    int64_t k = nd - 1;
    while (k >= 0 && mask[k]) inner *= s[k--];
    const int64_t rows = n / inner;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, io = 0;
      for (int64_t d = k; d >= 0; --d) {
        const int64_t c = rem % s[d];
        rem /= s[d];
        io += c * st[d];
      }
      double a = 0;
      const T* row = p + r * inner;
      for (int64_t i = 0; i < inner; ++i) a += row[i];
      acc[io] += a;
    }
  });
  for (double& v : acc) v *= scale;
  return Tensor::from_vector(acc, ks, out);
}

Tensor reduce_op(const char* op, amp::OpKind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                 bool is_mean) {
  check_floating_tensor(op, "input", x);
  const Dtype out = amp::autocast_dtype(kind, {x.dtype()});
  const auto mask = reduced_mask(op, x.shape(), dims);
  int64_t count = 1;
  Shape out_shape;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) count *= x.shape()[i];
    if (!mask[i] || keepdim) out_shape.push_back(mask[i] ? 1 : x.shape()[i]);
  }
  HG_CHECK(!is_mean || count > 0, op << ": mean over zero elements of shape " << shape_str(x.shape()));
  const double scale = is_mean ? 1.0 / static_cast<double>(count) : 1.0;
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::sum_dims(op, x, mask, scale, out).view_as_shape(out_shape);
#endif
  if (!y.defined()) y = reduce_sum(op, x, mask, scale, out).view_as_shape(out_shape);
  const Shape in_shape = x.shape();
  const Dtype in_dtype = x.dtype();
  const MemoryFormat in_format = x.memory_format();
  const Device in_device = x.device();
  return autograd::record(op, y, {x}, {}, [op, mask, scale, in_shape, in_dtype, in_format,
                                       in_device](const Tensor& gy_in) -> std::vector<Tensor> {
    // sum/mean are the usual roots of backward(), whose implicit seed of 1 is made on the CPU: the
    // gradient is computed on the input's device whatever device dy arrives on.
    const Tensor gy = gy_in.device() == in_device ? gy_in : gy_in.copy_to(in_device);
    // Broadcast dy (keepdim shape) back over the input, times scale.
    Shape ks = in_shape;
    for (size_t i = 0; i < ks.size(); ++i)
      if (mask[i]) ks[i] = 1;
#ifdef HALFGRAD_CUDA
    if (gy.is_cuda())
      return {cuda::broadcast_scaled(op, gy.view_as_shape(ks), in_shape, in_format, scale, in_dtype)};
#else
    (void)in_format;
#endif
    Tensor g = to_compute(gy).view_as_shape(ks);
    Tensor dx = Tensor::empty(in_shape, compute_dtype(in_dtype));
    const int64_t nd = static_cast<int64_t>(in_shape.size());
    std::vector<int64_t> st(nd, 0);
    int64_t stride = 1;
    for (int64_t i = nd - 1; i >= 0; --i) {
      st[i] = mask[i] ? 0 : stride;
      stride *= ks[i];
    }
    const int64_t n = dx.numel();
    Tensor gc = g.dtype() == dx.dtype() ? g : g.cast_copy(dx.dtype());
    dispatch_compute(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* pg = gc.data<T>();
      T* pd = dx.data<T>();
      const T sc = static_cast<T>(scale);
#pragma omp parallel for if (parallel_worth(n))
      for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, io = 0;
        for (int64_t d = nd - 1; d >= 0; --d) {
          const int64_t c = rem % in_shape[d];
          rem /= in_shape[d];
          io += c * st[d];
        }
        pd[i] = pg[io] * sc;
      }
    });
    return {from_compute(dx, in_dtype)};
  });
}

std::vector<int64_t> all_dims(const Tensor& x) {
  std::vector<int64_t> d(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) d[i] = i;
  return d;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_op("sum", amp::OpKind::Sum, x, all_dims(x), false, false); }
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op("sum", amp::OpKind::Sum, x, dims, keepdim, false);
}
Tensor mean(const Tensor& x) { return reduce_op("mean", amp::OpKind::Mean, x, all_dims(x), false, true); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op("mean", amp::OpKind::Mean, x, dims, keepdim, true);
}

Tensor argmax(const Tensor& x, int64_t dim) {
  check_floating_tensor("argmax", "input", x);
  const int64_t nd = x.dim();
  HG_CHECK(dim >= -nd && dim < nd, "argmax: dim " << dim << " out of range for shape " << shape_str(x.shape()));
  if (dim < 0) dim += nd;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) return cuda::argmax(x, dim);
#endif
  int64_t outer = 1, inner = 1;
  const int64_t n = x.shape()[dim];
  Shape out_shape;
  for (int64_t i = 0; i < nd; ++i) {
    if (i < dim) outer *= x.shape()[i];
    if (i > dim) inner *= x.shape()[i];
    if (i != dim) out_shape.push_back(x.shape()[i]);
  }
  Tensor cx = to_compute(x);
  Tensor y = Tensor::empty(out_shape, kInt64);
  int64_t* py = y.data<int64_t>();
  dispatch_compute(cx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = cx.data<T>();
#pragma omp parallel for if (parallel_worth(outer * inner * n))
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* base = p + o * n * inner + i;
        int64_t best = 0;
        for (int64_t c = 1; c < n; ++c) {
          const T v = base[c * inner], b = base[best * inner];
          if (v > b || (v != v && b == b)) best = c;  // the first NaN wins, as torch.argmax
        }
        py[o * inner + i] = best;
      }
  });
  return y;
}

}  // namespace halfgrad::ops
