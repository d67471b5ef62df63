// max_pool3d.cpp - 3-D max pooling on the CPU (math and shapes in max_pool3d.h).
//
// Forward keeps, for each output, the flat index (into its (n, c) plane's D*H*W) of the window's first
// maximum, as PyTorch's return_indices; backward adds dy at those indices. A NaN in a window wins, and
// of several NaNs the last one in window order, as PyTorch's `val > maxval || isnan(val)` (CPU and
// CUDA, 1.13 and 2.x), so the NaN propagates and its gradient goes where PyTorch sends it. Parallel mapping: one (n, c) plane per loop iteration, so
// overlapping windows (stride < kernel) never make two threads write the same dx element.
// Precision: FP16 inputs are compared in float (exact) and the maxima rounded back (also exact); the
// backward's sums of overlapping windows are rounded to FP16 once.
// CUDA tensors (NCDHW or NDHWC) go to max_pool3d_cuda.cu after the same checks: the same argmax
// indices, kept in device memory, and a gather backward that sums in the same order.
#include "ops/pool/max_pool3d.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/nvtx.h"
#include "ops/common.h"
#include "ops/pool/pool_shape.h"
#ifdef HALFGRAD_CUDA
#include "ops/pool/max_pool3d_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

// The window's running maximum: v replaces it if larger, or if v is a NaN (so the last NaN wins).
template <typename T>
inline void take(T v, int64_t i, T& best, int64_t& best_i) {
  if (v > best || v != v) {
    best = v;
    best_i = i;
  }
}

// One output row of the U-Net's 2x2x2 stride-2 pooling: the window of output x is x0 = 2x, x0 + 1 of
// the input rows at `row`, row + w (plane 2z) and row + hw, row + hw + w (plane 2z + 1), visited in
// (i, j, l) order so that ties go to the first maximum.
template <typename T>
void pool_row_k2s2(const T* xin, int64_t row, int64_t w, int64_t hw, int64_t ow, T* y, int32_t* idx) {
  const int64_t r[4] = {row, row + w, row + hw, row + hw + w};
  for (int64_t xx = 0; xx < ow; ++xx) {
    int64_t best_i = r[0] + 2 * xx;
    T best = xin[best_i];
    take(xin[best_i + 1], best_i + 1, best, best_i);
    for (int q = 1; q < 4; ++q) {
      const int64_t i0 = r[q] + 2 * xx;
      take(xin[i0], i0, best, best_i);
      take(xin[i0 + 1], i0 + 1, best, best_i);
    }
    y[xx] = best;
    idx[xx] = static_cast<int32_t>(best_i);
  }
}

}  // namespace

Tensor max_pool3d(const Tensor& x, const ExpandingArray<3>& kernel, const ExpandingArray<3>& stride,
                  const ExpandingArray<3>& padding) {
  NvtxRange nvtx_range("max_pool3d");
  check_floating_tensor("max_pool3d", "input", x);
  check_dim("max_pool3d", "input", x, 5, "(N, C, D, H, W)");
  const Shape& xs = x.shape();
  detail::check_pool_args("max_pool3d", xs, kernel, stride, padding);
  const int64_t n = xs[0], c = xs[1], d = xs[2], h = xs[3], w = xs[4];
  const int64_t od = detail::pool_output_size("max_pool3d", xs, 0, kernel[0], stride[0], padding[0], false);
  const int64_t oh = detail::pool_output_size("max_pool3d", xs, 1, kernel[1], stride[1], padding[1], false);
  const int64_t ow = detail::pool_output_size("max_pool3d", xs, 2, kernel[2], stride[2], padding[2], false);
  const int64_t in_vol = d * h * w, out_vol = od * oh * ow, planes = n * c;
  HG_CHECK(in_vol <= std::numeric_limits<int32_t>::max(),
           "max_pool3d: a plane of " << in_vol << " elements does not fit the 32-bit argmax indices");
  const bool k2s2 = kernel == ExpandingArray<3>(2) && stride == ExpandingArray<3>(2) && padding == ExpandingArray<3>(0);

#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) {
    cuda::MaxPoolCudaForward f = cuda::max_pool3d_forward(x, kernel.array(), stride.array(), padding.array());
    return autograd::record("max_pool3d", f.y, {x}, {},
                            [argmax = f.argmax, x_shape = xs, x_dtype = x.dtype(), format = x.memory_format(),
                             k = kernel.array(), s = stride.array(), p = padding.array()](const Tensor& gy) -> std::vector<Tensor> {
                              return {cuda::max_pool3d_backward(gy, argmax.get(), x_shape, x_dtype, format, k, s, p)};
                            });
  }
#endif
  const Tensor cx = to_compute(x);
  Tensor y = Tensor::empty({n, c, od, oh, ow}, cx.dtype());
  auto argmax = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(planes * out_vol));
  const int64_t kd = kernel[0], kh = kernel[1], kw = kernel[2];
  const int64_t sd = stride[0], sh = stride[1], sw = stride[2];
  const int64_t pd = padding[0], ph = padding[1], pw = padding[2];
  dispatch_compute(cx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = cx.data<T>();
    T* py = y.data<T>();
    int32_t* pi = argmax->data();
#pragma omp parallel for schedule(static) if (parallel_worth(x.numel()))
    for (int64_t plane = 0; plane < planes; ++plane) {
      const T* xin = px + plane * in_vol;
      T* yo = py + plane * out_vol;
      int32_t* io = pi + plane * out_vol;
      for (int64_t z = 0; z < od; ++z)
        for (int64_t yy = 0; yy < oh; ++yy) {
          const int64_t o = (z * oh + yy) * ow;
          if (k2s2) {
            pool_row_k2s2(xin, (2 * z * h + 2 * yy) * w, w, h * w, ow, yo + o, io + o);
            continue;
          }
          // The window clipped to the input (padding is -inf, never the maximum of a window that
          // holds an input element; padding <= kernel / 2 makes every window hold one).
          const int64_t z0 = std::max<int64_t>(z * sd - pd, 0), z1 = std::min(z * sd - pd + kd, d);
          const int64_t y0 = std::max<int64_t>(yy * sh - ph, 0), y1 = std::min(yy * sh - ph + kh, h);
          for (int64_t xx = 0; xx < ow; ++xx) {
            const int64_t x0 = std::max<int64_t>(xx * sw - pw, 0), x1 = std::min(xx * sw - pw + kw, w);
            int64_t best_i = (z0 * h + y0) * w + x0;
            T best = xin[best_i];
            for (int64_t i = z0; i < z1; ++i)
              for (int64_t j = y0; j < y1; ++j) {
                const int64_t row = (i * h + j) * w;
                for (int64_t l = x0; l < x1; ++l) take(xin[row + l], row + l, best, best_i);
              }
            yo[o + xx] = best;
            io[o + xx] = static_cast<int32_t>(best_i);
          }
        }
    }
  });
  Tensor out = from_compute(y, x.dtype());

  return autograd::record("max_pool3d", out, {x}, {},
                          [argmax, x_shape = xs, x_dtype = x.dtype(), planes, in_vol,
                           out_vol](const Tensor& gy) -> std::vector<Tensor> {
                            const Tensor cg = to_compute(gy);
                            Tensor dx = Tensor::zeros(x_shape, cg.dtype());
                            dispatch_compute(cg.dtype(), [&](auto tag) {
                              using T = decltype(tag);
                              const T* pg = cg.data<T>();
                              T* pd = dx.data<T>();
                              const int32_t* pi = argmax->data();
#pragma omp parallel for schedule(static) if (parallel_worth(planes * out_vol))
                              for (int64_t plane = 0; plane < planes; ++plane)
                                for (int64_t o = 0; o < out_vol; ++o)
                                  pd[plane * in_vol + pi[plane * out_vol + o]] += pg[plane * out_vol + o];
                            });
                            return {from_compute(dx, x_dtype)};
                          });
}

}  // namespace halfgrad::ops
