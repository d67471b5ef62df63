// layer_norm.cpp - layer_norm on the CPU and its dispatch to CUDA (math and errors in layer_norm.h;
// the CUDA kernels in layer_norm_cuda.cu).
// CPU: x viewed as (R, K). The rows run in parallel, each with its statistics in FP64 (shifted by the
// row's first value against cancellation, 0 when that is inf or NaN, as norm.cpp) and its output in
// float (Float32 / Float16, rounded once) or double (Float64). dweight / dbias run in parallel over
// the columns k, each summing its rows in order in FP64: no result depends on the thread count.
// Saved for backward: x and (mean, invstd) per row.
#include "ops/norm/layer_norm.h"

#include <cmath>

#include "core/nvtx.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/norm/layer_norm_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

std::vector<double> values_or(const Tensor& t, int64_t K, double fill) {
  return t.defined() ? t.to_double_vector() : std::vector<double>(K, fill);
}

struct LayerNormSaved {
  int64_t R = 0, K = 0;
  Shape pshape;                      // normalized_shape: the shape of dweight / dbias
  std::vector<double> mean, invstd;  // per row
  bool need_x = false, need_w = false, need_b = false;
  Dtype w_dtype = kFloat32, b_dtype = kFloat32;
};

std::vector<Tensor> layer_norm_backward_cpu(const LayerNormSaved& s, const Tensor& x, const Tensor& weight,
                                            const Tensor& gy) {
  const int64_t R = s.R, K = s.K;
  const std::vector<double> w = values_or(weight, K, 1.0);
  Tensor cx = to_compute(x), cg = to_compute(gy.dtype() == x.dtype() ? gy : gy.cast_copy(x.dtype()));
  Tensor dx = s.need_x ? Tensor::empty(x.shape(), compute_dtype(x.dtype())) : Tensor();
  std::vector<double> dw(K, 0.0), db(K, 0.0);
  dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = cx.data<T>();
    const T* pg = cg.data<T>();
    if (s.need_x) {
      T* pd = dx.data<T>();
#pragma omp parallel for schedule(static) if (parallel_worth(R * K))
      for (int64_t r = 0; r < R; ++r) {
        const T* xr = px + r * K;
        const T* gr = pg + r * K;
        const double m = s.mean[r], is = s.invstd[r];
        double a = 0, b = 0;  // sum dxhat, sum dxhat (x - mean)
        for (int64_t k = 0; k < K; ++k) {
          const double g = static_cast<double>(gr[k]) * w[k];
          a += g;
          b += g * (static_cast<double>(xr[k]) - m);
        }
        const double ma = a / K, mb = b / K * is;
        for (int64_t k = 0; k < K; ++k) {
          const double xhat = (static_cast<double>(xr[k]) - m) * is;
          pd[r * K + k] = static_cast<T>(is * (static_cast<double>(gr[k]) * w[k] - ma - xhat * mb));
        }
      }
    }
    if (s.need_w || s.need_b) {
#pragma omp parallel for schedule(static) if (parallel_worth(R * K))
      for (int64_t k = 0; k < K; ++k) {
        double sw = 0, sb = 0;
        for (int64_t r = 0; r < R; ++r) {
          const double g = static_cast<double>(pg[r * K + k]);
          sw += g * (static_cast<double>(px[r * K + k]) - s.mean[r]) * s.invstd[r];
          sb += g;
        }
        dw[k] = sw;
        db[k] = sb;
      }
    }
  });
  std::vector<Tensor> grads(3);
  if (s.need_x) grads[0] = from_compute(dx, x.dtype());
  if (s.need_w) grads[1] = Tensor::from_vector(dw, s.pshape, s.w_dtype);
  if (s.need_b) grads[2] = Tensor::from_vector(db, s.pshape, s.b_dtype);
  return grads;
}

Tensor layer_norm_cpu(const Tensor& x, const Shape& normalized_shape, int64_t K, const Tensor& weight,
                      const Tensor& bias, double eps) {
  LayerNormSaved s;
  s.K = K;
  s.pshape = normalized_shape;
  s.R = K > 0 ? x.numel() / K : 0;
  const int64_t R = s.R;
  const std::vector<double> w = values_or(weight, K, 1.0), b = values_or(bias, K, 0.0);
  s.mean.assign(R, 0.0);
  s.invstd.assign(R, 0.0);
  Tensor cx = to_compute(x);
  Tensor y = Tensor::empty(x.shape(), compute_dtype(x.dtype()));
  dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = cx.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static) if (parallel_worth(R * K))
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = px + r * K;
      const double K0 = std::isfinite(static_cast<double>(xr[0])) ? static_cast<double>(xr[0]) : 0.0;
      double s1 = 0, s2 = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double d = static_cast<double>(xr[k]) - K0;
        s1 += d;
        s2 += d * d;
      }
      const double m1 = s1 / K;
      double var = s2 / K - m1 * m1;
      if (var < 0.0) var = 0.0;  // rounding; written so that a NaN stays NaN
      const double mean = K0 + m1, is = 1.0 / std::sqrt(var + eps);
      s.mean[r] = mean;
      s.invstd[r] = is;
      const T tm = static_cast<T>(mean), ti = static_cast<T>(is);
      for (int64_t k = 0; k < K; ++k) py[r * K + k] = (xr[k] - tm) * ti * static_cast<T>(w[k]) + static_cast<T>(b[k]);
    }
  });
  s.need_x = x.requires_grad();
  s.need_w = weight.defined() && weight.requires_grad();
  s.need_b = bias.defined() && bias.requires_grad();
  if (weight.defined()) s.w_dtype = weight.dtype();
  if (bias.defined()) s.b_dtype = bias.dtype();
  return autograd::record("layer_norm", from_compute(y, x.dtype()), {x, weight, bias},
                          {autograd::Save::input(0, "input"), autograd::Save::input(1, "weight")},
                          [s = std::move(s), x = x.detach(), w = weight.defined() ? weight.detach() : Tensor()](
                              const Tensor& gy) -> std::vector<Tensor> { return layer_norm_backward_cpu(s, x, w, gy); });
}

#ifdef HALFGRAD_CUDA
Tensor as_float32(const Tensor& t) {
  if (!t.defined()) return Tensor();
  return t.dtype() == kFloat32 ? t.detach() : t.cast_copy(kFloat32);
}

Tensor layer_norm_cuda(const Tensor& x, const Shape& pshape, int64_t K, const Tensor& weight, const Tensor& bias,
                       double eps) {
  const Tensor w32 = as_float32(weight);
  cuda::LayerNormCudaForward f = cuda::layer_norm_forward(x, K, w32, as_float32(bias), eps);
  const bool need_x = x.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  const Dtype w_dtype = weight.defined() ? weight.dtype() : kFloat32;
  const Dtype b_dtype = bias.defined() ? bias.dtype() : kFloat32;
  return autograd::record("layer_norm", f.y, {x, weight, bias},
                          {autograd::Save::input(0, "input"), autograd::Save::input(1, "weight"),
                           autograd::Save::tensor(w32, "weight as float32"), autograd::Save::tensor(f.saved, "mean and invstd")},
                          [x = x.detach(), K, w32, saved = f.saved, need_x, need_w, need_b, w_dtype, b_dtype,
                           pshape](const Tensor& gy) -> std::vector<Tensor> {
                            cuda::LayerNormCudaGrads g = cuda::layer_norm_backward(x, K, w32, saved, gy, need_x, need_w, need_b);
                            std::vector<Tensor> grads(3);
                            grads[0] = g.dx;
                            if (need_w) grads[1] = (w_dtype == kFloat32 ? g.dweight : g.dweight.cast_copy(w_dtype)).view_as_shape(pshape);
                            if (need_b) grads[2] = (b_dtype == kFloat32 ? g.dbias : g.dbias.cast_copy(b_dtype)).view_as_shape(pshape);
                            return grads;
                          });
}
#endif

void check_param(const char* what, const Tensor& t, const Tensor& x, const Shape& normalized_shape) {
  if (!t.defined()) return;
  check_floating_tensor("layer_norm", what, t);
  check_same_device("layer_norm", "input", x, what, t);
  HG_CHECK(t.shape() == normalized_shape, "layer_norm: " << what << " has shape " << shape_str(t.shape())
                                                         << " but normalized_shape is " << shape_str(normalized_shape));
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  NvtxRange nvtx_range("layer_norm");
  check_floating_tensor("layer_norm", "input", x);
  const int64_t L = static_cast<int64_t>(normalized_shape.size());
  HG_CHECK(L >= 1, "layer_norm: normalized_shape must name at least one dim, got []");
  bool match = x.dim() >= L;
  for (int64_t i = 0; match && i < L; ++i) match = x.shape()[x.dim() - L + i] == normalized_shape[i];
  HG_CHECK(match, "layer_norm: given normalized_shape=" << shape_str(normalized_shape) << ", expected input with shape [*, "
                                                        << shape_str(normalized_shape).substr(1) << ", but got input of size "
                                                        << shape_str(x.shape()));
  check_param("weight", weight, x, normalized_shape);
  check_param("bias", bias, x, normalized_shape);
  int64_t K = 1;
  for (int64_t d : normalized_shape) K *= d;
  // The FP32 list: the input is cast; the affine parameters are read in FP32 (double) inside either way.
  const Tensor xx = x.to(amp::autocast_dtype(amp::OpKind::LayerNorm, {x.dtype()}));
#ifdef HALFGRAD_CUDA
  if (xx.is_cuda()) return layer_norm_cuda(xx.contiguous(), normalized_shape, K, weight, bias, eps);
#endif
  return layer_norm_cpu(xx, normalized_shape, K, weight, bias, eps);
}

}  // namespace halfgrad::ops
