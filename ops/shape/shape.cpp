// shape.cpp - reshape, flatten, view, permute, transpose and one_hot (math and errors in shape.h).
// reshape, flatten (a reshape) and view are Tensor::view_as_shape on either device (a channels-last
// input is made contiguous by it); permute copies (a strided walk of x on the CPU, the kernel of
// shape_cuda.h on CUDA); one_hot of CUDA labels runs the kernel of shape_cuda.h.
#include "ops/shape/shape.h"

#include <algorithm>
#include <cstring>

#include "core/nvtx.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/shape/shape_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

// `shape` with its one -1 replaced by what makes numel match x's (torch's infer_size).
Shape infer_shape(const char* op, const Tensor& x, const Shape& shape) {
  Shape out = shape;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      HG_CHECK(infer_at < 0, op << ": only one dimension can be inferred (-1), got " << shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      HG_CHECK(out[i] >= 0, op << ": invalid extent " << out[i] << " in shape " << shape_str(shape));
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    HG_CHECK(known > 0 && x.numel() % known == 0, op << ": cannot reshape " << shape_str(x.shape()) << " ("
                                                     << x.numel() << " elements) to " << shape_str(shape));
    out[infer_at] = x.numel() / known;
  }
  HG_CHECK(shape_numel(out) == x.numel(), op << ": cannot reshape " << shape_str(x.shape()) << " (" << x.numel()
                                             << " elements) to " << shape_str(shape));
  return out;
}

Tensor relabel(const char* op, const Tensor& x, const Shape& shape_in) {
  check_tensor(op, "input", x);
  const Shape shape = infer_shape(op, x, shape_in);
  Tensor y = x.view_as_shape(shape);
  const Shape in = x.shape();
  return autograd::record(op, y, {x}, {}, [in](const Tensor& gy) -> std::vector<Tensor> {
    return {gy.view_as_shape(in)};
  });
}

// Wraps a possibly negative dim into [0, ndim), or throws naming the op.
int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  HG_CHECK(d >= -ndim && d < ndim, op << ": dim " << d << " is out of range [" << -ndim << ", " << ndim
                                      << ") for a " << ndim << "-D tensor");
  return d < 0 ? d + ndim : d;
}

// y = x permuted by dims (already wrapped and checked), contiguous, on the CPU: y's elements in
// order, with a multi-index counter stepping x's offset by the permuted strides.
Tensor permute_cpu(const Tensor& x, const std::vector<int64_t>& dims) {
  const Shape& xs = x.shape();
  const int64_t nd = x.dim();
  Shape ys(nd), in_stride(nd), step(nd);
  int64_t st = 1;
  for (int64_t i = nd - 1; i >= 0; --i) {
    in_stride[i] = st;
    st *= xs[i];
  }
  for (int64_t i = 0; i < nd; ++i) {
    ys[i] = xs[dims[i]];
    step[i] = in_stride[dims[i]];
  }
  Tensor y = Tensor::empty(ys, x.dtype());
  const size_t es = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  const int64_t n = y.numel();
  Shape idx(nd, 0);
  int64_t off = 0;
  for (int64_t o = 0; o < n; ++o) {
    std::memcpy(dst + o * es, src + off * es, es);
    for (int64_t i = nd - 1; i >= 0; --i) {  // advance the counter, innermost dim first
      off += step[i];
      if (++idx[i] < ys[i]) break;
      off -= step[i] * ys[i];
      idx[i] = 0;
    }
  }
  return y;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) { return relabel("reshape", x, shape); }
Tensor view(const Tensor& x, const Shape& shape) { return relabel("view", x, shape); }

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_tensor("flatten", "input", x);
  const int64_t rank = std::max<int64_t>(x.dim(), 1);  // a 0-d tensor flattens as if it were [1]
  auto wrap = [&](int64_t d, const char* what) {
    HG_CHECK(d >= -rank && d < rank, "flatten: " << what << " " << d << " is out of range for input "
                                                 << shape_str(x.shape()) << " (expected a dim in [" << -rank
                                                 << ", " << rank - 1 << "])");
    return d < 0 ? d + rank : d;
  };
  const int64_t s = wrap(start_dim, "start_dim"), e = wrap(end_dim, "end_dim");
  HG_CHECK(s <= e, "flatten: start_dim " << start_dim << " comes after end_dim " << end_dim << " for input "
                                         << shape_str(x.shape()));
  if (x.dim() == 0) return reshape(x, {1});  // recorded (and reported) as the reshape it is
  if (s == e) return x;  // nothing to merge: x itself, as torch.flatten returns self; no op, no table request
  // Its row (input dtype), asked only when an op is recorded, so the precision report charges the
  // request to this reshape and never to the next op.
  (void)amp::autocast_dtype(amp::OpKind::Flatten, {x.dtype()});
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.shape()[d];
  out.push_back(merged);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, out);
}

Tensor permute(const Tensor& x_in, const std::vector<int64_t>& dims_in) {
  NvtxRange nvtx_range("permute");
  check_tensor("permute", "input", x_in);
  const int64_t nd = x_in.dim();
  HG_CHECK(static_cast<int64_t>(dims_in.size()) == nd,
           "permute: dims " << shape_str(dims_in) << " must name each of the " << nd << " dims of "
                            << shape_str(x_in.shape()) << " once");
  std::vector<int64_t> dims(nd), inverse(nd, -1);
  for (int64_t i = 0; i < nd; ++i) {
    dims[i] = wrap_dim("permute", dims_in[i], nd);
    HG_CHECK(inverse[dims[i]] < 0, "permute: dims " << shape_str(dims_in) << " repeat dim " << dims_in[i]);
    inverse[dims[i]] = i;
  }
  // CPU ops read NCDHW (check_tensor); a channels-last CUDA tensor is copied to NCDHW first.
  const Tensor x = x_in.is_channels_last() ? x_in.format_copy(MemoryFormat::Contiguous) : x_in;
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) y = cuda::permute(x, dims);
#endif
  if (!y.defined()) y = permute_cpu(x, dims);
  return autograd::record("permute", y, {x_in}, {}, [inverse, format = x_in.memory_format()](const Tensor& gy) {
    NoGradGuard ng;
    Tensor g = permute(gy, inverse);
    return std::vector<Tensor>{format == MemoryFormat::Contiguous ? g : g.format_copy(format)};
  });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  check_tensor("transpose", "input", x);
  const int64_t nd = x.dim();
  std::vector<int64_t> dims(nd);
  for (int64_t i = 0; i < nd; ++i) dims[i] = i;
  std::swap(dims[wrap_dim("transpose", d0, nd)], dims[wrap_dim("transpose", d1, nd)]);
  return permute(x, dims);
}

Tensor one_hot(const Tensor& labels, int64_t num_classes, Dtype dtype) {
  check_tensor("one_hot", "labels", labels);
  HG_CHECK(labels.dtype() == kInt64, "one_hot: labels must be int64, got " << dtype_name(labels.dtype()));
  HG_CHECK(labels.dim() >= 1, "one_hot: labels must have a batch dimension, got shape " << shape_str(labels.shape()));
#ifdef HALFGRAD_CUDA
  if (labels.is_cuda()) return cuda::one_hot(labels, num_classes, dtype);
#endif
  const Shape& s = labels.shape();
  const int64_t n = s[0];
  const int64_t spatial = labels.numel() / std::max<int64_t>(n, 1);
  Shape out = {n, num_classes};
  out.insert(out.end(), s.begin() + 1, s.end());
  Tensor y = Tensor::zeros(out, kFloat32);
  const int64_t* pl = labels.data<int64_t>();
  float* py = y.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < spatial; ++i) {
      const int64_t c = pl[b * spatial + i];
      HG_CHECK(c >= 0 && c < num_classes, "one_hot: label " << c << " at flat index " << b * spatial + i
                                                             << " is outside [0, " << num_classes << ")");
      py[(b * num_classes + c) * spatial + i] = 1.0f;
    }
  return dtype == kFloat32 ? y : y.cast_copy(dtype);
}

}  // namespace halfgrad::ops
