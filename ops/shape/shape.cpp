// shape.cpp - reshape and one_hot (math and errors in shape.h). reshape is Tensor::view_as_shape on
// either device (a channels-last input is made contiguous by it); one_hot of CUDA labels runs the
// kernel of shape_cuda.h.
#include "ops/shape/shape.h"

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
