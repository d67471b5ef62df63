// shape.cpp - reshape, flatten and one_hot (math and errors in shape.h). reshape (and flatten, a
// reshape) is Tensor::view_as_shape on
// either device (a channels-last input is made contiguous by it); one_hot of CUDA labels runs the
// kernel of shape_cuda.h.
#include "ops/shape/shape.h"

#include <algorithm>

#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/shape/shape_cuda.h"
#endif

namespace halfgrad::ops {

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_tensor("reshape", "input", x);
  HG_CHECK(shape_numel(shape) == x.numel(), "reshape: cannot reshape " << shape_str(x.shape()) << " ("
                                                << x.numel() << " elements) to " << shape_str(shape));
  Tensor y = x.view_as_shape(shape);
  const Shape in = x.shape();
  return autograd::record("reshape", y, {x}, {}, [in](const Tensor& gy) -> std::vector<Tensor> {
    return {gy.view_as_shape(in)};
  });
}

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
  (void)amp::autocast_dtype(amp::OpKind::Flatten, {x.dtype()});  // its row: input dtype (counted in the report)
  if (x.dim() == 0) return reshape(x, {1});
  if (s == e) return x;
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.shape()[d];
  out.push_back(merged);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, out);
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
