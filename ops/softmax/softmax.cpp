// softmax.cpp - softmax and log_softmax along one dim on the CPU (math in softmax.h).
//
// x is viewed as (outer, n, inner), the op reducing over n:
//   inner == 1 (the last dim): each row of n values is contiguous; one row per task.
//   inner > 1 (e.g. the channel dim of (N, C, D, H, W), inner = D*H*W): the n values of one position
//     are inner apart, so the op works on a tile of kTile consecutive positions at a time and sweeps
//     the n rows of the tile: every load is contiguous, and the tile's running max / sum (kTile
//     values each) stay in L1. One (outer index, tile) per task.
// Every step (max, exp, sum, scale) is an Eigen array expression over a contiguous row or tile row, so
// exp and log are Eigen's vectorised ones (AVX2: 8 floats at a time). Tasks are split among the
// OpenMP threads. Precision: float for Float32/Float16 (sums in float over n terms, n being a channel
// count or a row), double for Float64; under autocast (FP32 list) a Float16 input is cast to FP32.
// Saved for backward: the output y (softmax: dx = y*(dy - sum dy*y); log_softmax: dx = dy - exp(y)*sum dy).
//
// CUDA tensors (either memory format) go to softmax_cuda.h: the same (outer, n, inner) view taken
// in the buffer's physical order, FP32 math, the output and dx in the input's memory format.
#include "ops/softmax/softmax.h"

#include <Eigen/Core>
#include <algorithm>

#include "core/nvtx.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/softmax/softmax_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

// 512 positions: 2 KiB per float tile row; the max and sum rows plus a few input rows fit in L1,
// and a (1, C, 48, 64, 48) volume still splits into ~290 tasks.
constexpr int64_t kTile = 512;

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using Row = Eigen::Map<Arr<T>>;
template <typename T>
using CRow = Eigen::Map<const Arr<T>>;

struct SoftmaxGeometry {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t tiles() const { return (inner + kTile - 1) / kTile; }
};

SoftmaxGeometry softmax_geometry(const char* op, const Tensor& x, int64_t& dim) {
  const int64_t nd = x.dim();
  const int64_t lo = nd == 0 ? -1 : -nd, hi = nd == 0 ? 0 : nd - 1;  // a 0-d tensor accepts dim 0 / -1
  HG_CHECK(dim >= lo && dim <= hi, op << ": dim " << dim << " out of range for input of shape "
                                      << shape_str(x.shape()) << " (expected in [" << lo << ", " << hi << "])");
  if (dim < 0) dim += std::max<int64_t>(nd, 1);
  SoftmaxGeometry g;
  for (int64_t d = 0; d < nd; ++d) {
    if (d < dim) g.outer *= x.shape()[d];
    if (d == dim) g.n = x.shape()[d];
    if (d > dim) g.inner *= x.shape()[d];
  }
  return g;
}

// Forward over one tile: the n rows r = 0..n-1, row r holding `len` consecutive positions at
// x + r*stride. m and s are the tile's running max and sum of exp (len values each).
template <typename T, bool kLog>
void softmax_tile(const T* x, T* y, int64_t n, int64_t stride, int64_t len, T* m_buf, T* s_buf) {
  Row<T> m(m_buf, len), s(s_buf, len);
  m = CRow<T>(x, len);
  for (int64_t r = 1; r < n; ++r) m = m.max(CRow<T>(x + r * stride, len));
  s.setZero();
  for (int64_t r = 0; r < n; ++r) {
    if (kLog) {
      s += (CRow<T>(x + r * stride, len) - m).exp();
    } else {
      Row<T> yr(y + r * stride, len);
      yr = (CRow<T>(x + r * stride, len) - m).exp();
      s += yr;
    }
  }
  if (kLog) {
    m += s.log();  // m now holds log-sum-exp
    for (int64_t r = 0; r < n; ++r) Row<T>(y + r * stride, len) = CRow<T>(x + r * stride, len) - m;
  } else {
    s = s.inverse();
    for (int64_t r = 0; r < n; ++r) Row<T>(y + r * stride, len) *= s;
  }
}

template <typename T, bool kLog>
void softmax_row(const T* x, T* y, int64_t n) {
  CRow<T> xr(x, n);
  Row<T> yr(y, n);
  const T m = xr.maxCoeff();
  if (kLog) {
    const T lse = m + std::log((xr - m).exp().sum());
    yr = xr - lse;
  } else {
    yr = (xr - m).exp();
    yr *= T(1) / yr.sum();
  }
}

template <typename T, bool kLog>
void softmax_forward(const T* x, T* y, const SoftmaxGeometry& g) {
  const int64_t total = g.outer * g.n * g.inner;
  if (g.n == 0 || total == 0) return;
  if (g.inner == 1) {
#pragma omp parallel for schedule(static) if (g.outer > 1 && parallel_worth(total))
    for (int64_t o = 0; o < g.outer; ++o) softmax_row<T, kLog>(x + o * g.n, y + o * g.n, g.n);
    return;
  }
  const int64_t tasks = g.outer * g.tiles();
#pragma omp parallel if (tasks > 1 && parallel_worth(total))
  {
    alignas(64) T m_buf[kTile];
    alignas(64) T s_buf[kTile];
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t o = t / g.tiles(), i0 = (t % g.tiles()) * kTile;
      const int64_t off = o * g.n * g.inner + i0;
      softmax_tile<T, kLog>(x + off, y + off, g.n, g.inner, std::min(kTile, g.inner - i0), m_buf, s_buf);
    }
  }
}

// Backward over one tile (rows as in softmax_tile): softmax dx = y*(dy - sum dy*y);
// log_softmax dx = dy - exp(y)*sum dy.
template <typename T, bool kLog>
void softmax_backward_tile(const T* y, const T* dy, T* dx, int64_t n, int64_t stride, int64_t len, T* s_buf) {
  Row<T> s(s_buf, len);
  s.setZero();
  for (int64_t r = 0; r < n; ++r) {
    if (kLog) s += CRow<T>(dy + r * stride, len);
    else s += CRow<T>(dy + r * stride, len) * CRow<T>(y + r * stride, len);
  }
  for (int64_t r = 0; r < n; ++r) {
    CRow<T> yr(y + r * stride, len), gr(dy + r * stride, len);
    if (kLog) Row<T>(dx + r * stride, len) = gr - yr.exp() * s;
    else Row<T>(dx + r * stride, len) = yr * (gr - s);
  }
}

template <typename T, bool kLog>
void softmax_backward(const T* y, const T* dy, T* dx, const SoftmaxGeometry& g) {
  const int64_t total = g.outer * g.n * g.inner;
  if (g.n == 0 || total == 0) return;
  // A row is a tile of length n with stride 1 and one position; inner > 1 uses position tiles.
  const bool rows = g.inner == 1;
  const int64_t per_outer = rows ? 1 : g.tiles();
  const int64_t tasks = g.outer * per_outer;
#pragma omp parallel if (tasks > 1 && parallel_worth(total))
  {
    alignas(64) T s_buf[kTile];
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t o = t / per_outer;
      if (rows) {
        const int64_t off = o * g.n;
        CRow<T> yr(y + off, g.n), gr(dy + off, g.n);
        Row<T> dr(dx + off, g.n);
        if (kLog) dr = gr - yr.exp() * gr.sum();
        else dr = yr * (gr - (gr * yr).sum());
      } else {
        const int64_t i0 = (t % per_outer) * kTile;
        const int64_t off = o * g.n * g.inner + i0;
        softmax_backward_tile<T, kLog>(y + off, dy + off, dx + off, g.n, g.inner, std::min(kTile, g.inner - i0),
                                       s_buf);
      }
    }
  }
}

template <bool kLog>
Tensor softmax_op(const char* op, amp::OpKind kind, const Tensor& x, int64_t dim) {
  NvtxRange nvtx_range(op);
  check_floating_tensor(op, "input", x);
  const SoftmaxGeometry g = softmax_geometry(op, x, dim);
  const Dtype dt = amp::autocast_dtype(kind, {x.dtype()});
  const Tensor xx = x.to(dt);
#ifdef HALFGRAD_CUDA
  if (xx.is_cuda()) {
    Tensor out = cuda::softmax_forward(op, xx, dim, kLog);
    return autograd::record(op, out, {xx}, {autograd::Save::output()}, [op, dim, y = out.detach()](const Tensor& gy) -> std::vector<Tensor> {
      return {cuda::softmax_backward(op, y, gy, dim, kLog)};
    });
  }
#endif
  Tensor cx = to_compute(xx);
  Tensor y = Tensor::empty(x.shape(), compute_dtype(dt));
  dispatch_compute(dt, [&](auto tag) {
    using T = decltype(tag);
    softmax_forward<T, kLog>(cx.data<T>(), y.data<T>(), g);
  });
  // Backward uses the output as the op stored it (for Float16, the rounded values), as PyTorch does.
  Tensor out = from_compute(y, dt);
  return autograd::record(op, out, {xx}, {autograd::Save::output()}, [g, dt, y = out.detach()](const Tensor& gy) -> std::vector<Tensor> {
    Tensor cy = to_compute(y), cg = to_compute(gy);
    Tensor dx = Tensor::empty(y.shape(), compute_dtype(dt));
    dispatch_compute(dt, [&](auto tag) {
      using T = decltype(tag);
      softmax_backward<T, kLog>(cy.data<T>(), cg.data<T>(), dx.data<T>(), g);
    });
    return {from_compute(dx, dt)};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op<false>("softmax", amp::OpKind::Softmax, x, dim); }

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_op<true>("log_softmax", amp::OpKind::LogSoftmax, x, dim);
}

}  // namespace halfgrad::ops
