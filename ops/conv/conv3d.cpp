// conv3d.cpp - conv3d and conv_transpose3d: argument checks, autocast, and forward with its backward
// right under it. The arithmetic is behind conv_gemm.h: GEMMs over column tiles (conv_gemm.cpp,
// vol2col.cpp), and the direct kernels it hands FP32 3x3x3 stride-1 convolutions to (conv_direct_*.cpp).
//
// conv_transpose3d is the adjoint of a convolution, so it reuses the same three kernels with their
// roles swapped. For x (N, Cin_t, D, H, W), w (Cin_t, Cout_t, kd, kh, kw), let G be the convolution from
// (N, Cout_t, Do, Ho, Wo) to (N, Cin_t, D, H, W) with weight w (w's layout is G's (Cout, Cin, kd, kh, kw))
// and the same per-axis stride, padding and dilation:
//   y  = dgrad_G(x, w) + b        dx = fprop_G(dy, w)        dw = wgrad_G(dy, x)        db = sums of dy
//
// CUDA: when the input is on CUDA (weight and bias must be too), forward and backward call the
// launchers of conv3d_cuda.h instead (Tensor Core implicit GEMMs for FP16 and BF16, FFMA for FP32, channels-last
// inside); outputs and input gradients come back in the input's memory format, weight gradients in
// the weight's, all in the op's dtype.
#include "ops/conv/conv3d.h"

#include "core/nvtx.h"
#include "ops/common.h"
#include "ops/conv/conv_gemm.h"
#ifdef HALFGRAD_CUDA
#include "ops/conv/conv3d_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

using conv::ConvGeometry;

// Checks shared by both ops; `transposed` picks the weight layout and the output-extent formula.
// Returns the geometry of the convolution that computes the op's forward (conv3d) or its adjoint
// (conv_transpose3d).
ConvGeometry check_and_plan(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dParams& p,
                            bool transposed) {
  check_floating_tensor(op, "input", x);
  check_floating_tensor(op, "weight", w);
  check_same_device(op, "input", x, "weight", w);
  if (b.defined()) {
    check_floating_tensor(op, "bias", b);
    check_same_device(op, "input", x, "bias", b);
  }
  check_dim(op, "input", x, 5, "(N, C, D, H, W)");
  check_dim(op, "weight", w, 5, transposed ? "(Cin, Cout, kd, kh, kw)" : "(Cout, Cin, kd, kh, kw)");
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  // "(input [..], weight [..])": the shapes every message below names.
  auto shapes = [&] { return " (input " + shape_str(xs) + ", weight " + shape_str(ws) + ")"; };
  auto check_axes = [&](const char* what, const ExpandingArray<3>& v, int64_t min) {
    for (size_t a = 0; a < 3; ++a)
      HG_CHECK(v[a] >= min, op << ": " << what << " must be >= " << min << " on every axis, got " << v.str() << shapes());
  };
  check_axes("stride", p.stride_, 1);
  check_axes("padding", p.padding_, 0);
  check_axes("dilation", p.dilation_, 1);
  check_axes("output_padding", p.output_padding_, 0);
  if (!transposed)
    HG_CHECK(p.output_padding_ == ExpandingArray<3>(0),
             op << ": output_padding " << p.output_padding_.str() << " is for conv_transpose3d only" << shapes());
  for (size_t a = 0; a < 3; ++a)
    HG_CHECK(p.output_padding_[a] < p.stride_[a] || p.output_padding_[a] < p.dilation_[a],
             op << ": output_padding " << p.output_padding_.str() << " must be smaller than the stride "
                << p.stride_.str() << " or the dilation " << p.dilation_.str() << " on every axis" << shapes());
  HG_CHECK(ws[0] >= 1 && ws[1] >= 1 && ws[2] >= 1 && ws[3] >= 1 && ws[4] >= 1,
           op << ": weight " << shape_str(ws) << " must be a non-empty kernel (every extent >= 1)");
  const int64_t cin = transposed ? ws[0] : ws[1];
  const int64_t cout = transposed ? ws[1] : ws[0];
  HG_CHECK(xs[1] == cin, op << ": input " << shape_str(xs) << " has " << xs[1] << " channels but weight "
                            << shape_str(ws) << " expects " << cin << " (weight dim " << (transposed ? 0 : 1) << ")");
  if (b.defined())
    HG_CHECK(b.dim() == 1 && b.size(0) == cout, op << ": bias " << shape_str(b.shape()) << " must be 1-D with "
                                                   << cout << " elements (the output channels of weight "
                                                   << shape_str(ws) << ")");
  const ExpandingArray<3> k(std::array<int64_t, 3>{ws[2], ws[3], ws[4]});
  const ExpandingArray<3>& s = p.stride_;
  const ExpandingArray<3>& pad = p.padding_;
  const ExpandingArray<3>& dil = p.dilation_;
  Shape out(5);
  out[0] = xs[0];
  out[1] = cout;
  for (size_t a = 0; a < 3; ++a) {
    const int64_t e = xs[2 + a], span = dil[a] * (k[a] - 1) + 1;  // span: the extent one window covers
    out[2 + a] = transposed ? (e - 1) * s[a] - 2 * pad[a] + span + p.output_padding_[a]
                            : (e + 2 * pad[a] - span >= 0 ? (e + 2 * pad[a] - span) / s[a] + 1 : 0);
  }
  HG_CHECK(out[2] >= 1 && out[3] >= 1 && out[4] >= 1,
           op << ": output extents " << shape_str(out) << " are < 1 for input " << shape_str(xs) << ", weight "
              << shape_str(ws) << ", stride " << s.str() << ", padding " << pad.str() << ", dilation " << dil.str());
  if (!transposed) return conv::make_geometry(xs[0], cin, cout, xs[2], xs[3], xs[4], k, s, pad, dil);
  // G runs from y's extents to x's. G's output formula gives x's extents back, except on an axis whose
  // output_padding is >= its stride (allowed below the dilation): there it gives one more row, which x
  // does not have, so G's output extents are set to x's.
  ConvGeometry g = conv::make_geometry(xs[0], cout, cin, out[2], out[3], out[4], k, s, pad, dil);
  g.od = xs[2];
  g.oh = xs[3];
  g.ow = xs[4];
  return g;
}

Dtype conv_dtype(amp::OpKind kind, const Tensor& x, const Tensor& w, const Tensor& b) {
  return b.defined() ? amp::autocast_dtype(kind, {x.dtype(), w.dtype(), b.dtype()})
                     : amp::autocast_dtype(kind, {x.dtype(), w.dtype()});
}

Shape conv_input_shape(const ConvGeometry& g) { return {g.n, g.cin, g.d, g.h, g.w}; }
Shape conv_output_shape(const ConvGeometry& g) { return {g.n, g.cout, g.od, g.oh, g.ow}; }

// The three kernels on tensors: compute-precision copies in, a compute-precision tensor out.
Tensor fprop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  const Tensor cx = to_compute(x), cw = to_compute(w), cb = b.defined() ? to_compute(b) : Tensor();
  Tensor y = Tensor::empty(conv_output_shape(g), cx.dtype());
  dispatch_compute(cx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv::conv3d_fprop<T>(g, cx.data<T>(), cw.data<T>(), cb.defined() ? cb.data<T>() : nullptr, y.data<T>());
  });
  return y;
}

Tensor dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w) {
  const Tensor cdy = to_compute(dy), cw = to_compute(w);
  Tensor dx = Tensor::empty(conv_input_shape(g), cdy.dtype());
  dispatch_compute(cdy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv::conv3d_dgrad<T>(g, cdy.data<T>(), cw.data<T>(), dx.data<T>());
  });
  return dx;
}

Tensor wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Shape& w_shape) {
  const Tensor cx = to_compute(x), cdy = to_compute(dy);
  Tensor dw = Tensor::empty(w_shape, cx.dtype());
  dispatch_compute(cx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv::conv3d_wgrad<T>(g, cx.data<T>(), cdy.data<T>(), dw.data<T>());
  });
  return dw;
}

// Sum of t (N, C, spatial...) over everything but the channel dim.
Tensor bias_grad(const Tensor& t) {
  const Tensor ct = to_compute(t);
  Tensor db = Tensor::empty({t.size(1)}, ct.dtype());
  dispatch_compute(ct.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv::channel_sums<T>(ct.data<T>(), t.size(0), t.size(1), t.numel() / (t.size(0) * t.size(1)), db.data<T>());
  });
  return db;
}

// y[n, c, ...] += b[c] for y (N, C, vol) in compute precision.
void add_channel_bias(Tensor& y, const Tensor& b) {
  const Tensor cb = to_compute(b);
  const int64_t n = y.size(0), c = y.size(1), vol = y.numel() / (n * c);
  dispatch_compute(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    const T* pb = cb.data<T>();
#pragma omp parallel for schedule(static) if (parallel_worth(y.numel()))
    for (int64_t plane = 0; plane < n * c; ++plane) {
      T* row = py + plane * vol;
      const T v = pb[plane % c];
      for (int64_t i = 0; i < vol; ++i) row[i] += v;
    }
  });
}

Tensor out_dtype(const Tensor& t, Dtype dt) { return t.defined() ? from_compute(t, dt) : t; }

#ifdef HALFGRAD_CUDA
// The output gradient as every CUDA backward kernel reads it: the op's dtype, channels-last (one
// conversion shared by dgrad, wgrad and the bias sums).
Tensor cuda_grad_output(const Tensor& gy, Dtype dt) {
  return (gy.dtype() == dt ? gy : gy.cast_copy(dt)).format_copy(MemoryFormat::ChannelsLast3d);
}
#endif

}  // namespace

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dParams& p) {
  NvtxRange nvtx_range("conv3d");
  const ConvGeometry g = check_and_plan("conv3d", x, w, b, p, /*transposed=*/false);
  const Dtype dt = conv_dtype(amp::OpKind::Conv3d, x, w, b);
  // Differentiable casts: under autocast an FP32 weight's gradient comes back through its FP16 copy
  // (made once per autocast region: the weight-cast cache, ops/common.h).
  const Tensor xc = autocast_cast(x, dt), wc = autocast_cast(w, dt), bc = b.defined() ? autocast_cast(b, dt) : Tensor();
  const bool on_cuda = x.is_cuda();
  const MemoryFormat x_format = xc.memory_format(), w_format = wc.memory_format();
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (on_cuda) y = conv::cuda_conv3d_fprop(g, xc, wc, bc, x_format);
#endif
  if (!on_cuda) y = from_compute(fprop(g, xc, wc, bc), dt);
  const bool gx = xc.requires_grad(), gw = wc.requires_grad(), gb = bc.requires_grad();
  // Save x only if dw is needed and w only if dx is needed (the input, not a copy: FP16 stays FP16).
  return autograd::record("conv3d", y, {xc, wc, bc},
                          {autograd::Save::input(0, "input", gw), autograd::Save::input(1, "weight", gx)},
                          [g, gx, gw, gb, dt, xs = gw ? xc.detach() : Tensor(), ws = gx ? wc.detach() : Tensor(),
                           w_shape = w.shape(), on_cuda, x_format, w_format](const Tensor& gy) -> std::vector<Tensor> {
#ifdef HALFGRAD_CUDA
                            if (on_cuda) {
                              const Tensor cgy = cuda_grad_output(gy, dt);
                              return {gx ? conv::cuda_conv3d_dgrad(g, cgy, ws, x_format) : Tensor(),
                                      gw ? conv::cuda_conv3d_wgrad(g, xs, cgy, w_format) : Tensor(),
                                      gb ? conv::cuda_channel_sums(cgy) : Tensor()};
                            }
#endif
                            (void)on_cuda, (void)x_format, (void)w_format;
                            const Tensor cgy = to_compute(gy);  // FP16 -> FP32 once for all three
                            Tensor dx, dw, db;
                            if (gx) dx = dgrad(g, cgy, ws);
                            if (gw) dw = wgrad(g, xs, cgy, w_shape);
                            if (gb) db = bias_grad(cgy);
                            return {out_dtype(dx, dt), out_dtype(dw, dt), out_dtype(db, dt)};
                          });
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dParams& p) {
  NvtxRange nvtx_range("conv_transpose3d");
  const ConvGeometry g = check_and_plan("conv_transpose3d", x, w, b, p, /*transposed=*/true);
  const Dtype dt = conv_dtype(amp::OpKind::ConvTranspose3d, x, w, b);
  const Tensor xc = autocast_cast(x, dt), wc = autocast_cast(w, dt), bc = b.defined() ? autocast_cast(b, dt) : Tensor();
  const bool on_cuda = x.is_cuda();
  const MemoryFormat x_format = xc.memory_format(), w_format = wc.memory_format();
  Tensor y;
#ifdef HALFGRAD_CUDA
  if (on_cuda) y = conv::cuda_conv_transpose3d_fprop(g, xc, wc, bc, x_format);
#endif
  if (!on_cuda) {
    Tensor yc = dgrad(g, xc, wc);
    if (bc.defined()) add_channel_bias(yc, bc);
    y = from_compute(yc, dt);
  }
  const bool gx = xc.requires_grad(), gw = wc.requires_grad(), gb = bc.requires_grad();
  return autograd::record("conv_transpose3d", y, {xc, wc, bc},
                          {autograd::Save::input(0, "input", gw), autograd::Save::input(1, "weight", gx)},
                          [g, gx, gw, gb, dt, xs = gw ? xc.detach() : Tensor(), ws = gx ? wc.detach() : Tensor(),
                           w_shape = w.shape(), on_cuda, x_format, w_format](const Tensor& gy) -> std::vector<Tensor> {
#ifdef HALFGRAD_CUDA
                            if (on_cuda) {  // G's fprop and wgrad, with gy as G's input
                              const Tensor cgy = cuda_grad_output(gy, dt);
                              return {gx ? conv::cuda_conv3d_fprop(g, cgy, ws, Tensor(), x_format) : Tensor(),
                                      gw ? conv::cuda_conv3d_wgrad(g, cgy, xs, w_format) : Tensor(),
                                      gb ? conv::cuda_channel_sums(cgy) : Tensor()};
                            }
#endif
                            (void)on_cuda, (void)x_format, (void)w_format;
                            const Tensor cgy = to_compute(gy);  // FP16 -> FP32 once for all three
                            Tensor dx, dw, db;
                            if (gx) dx = fprop(g, cgy, ws, Tensor());
                            if (gw) dw = wgrad(g, cgy, xs, w_shape);
                            if (gb) db = bias_grad(cgy);
                            return {out_dtype(dx, dt), out_dtype(dw, dt), out_dtype(db, dt)};
                          });
}

}  // namespace halfgrad::ops
