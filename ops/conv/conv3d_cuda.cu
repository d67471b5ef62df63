// conv3d_cuda.cu - the Tensor-level launchers of conv3d_cuda.h: they bring the operands to
// channels-last in the op's dtype, pack the weight into the GEMM's B matrix, describe the gather of
// A (conv_igemm.cuh), and pick the Tensor Core (16-bit: tensor_core_operand) or FFMA (FP32) kernel.
//
// Kernels in this file (small, memory-bound, one thread per element, grid-stride):
//   pack_weights: w (A0, A1, T) (the weight as stored, T = kd kh kw taps) -> B (n_pad, k_pad), zero-padded,
//     in one of three orders (the KRSC reorder of the brief, done per call: weights are small):
//       fprop    B[co][tap*Cin + ci]   = w[co][ci][tap]      (A0 = Cout, A1 = Cin)
//       dgrad    B[ci][tap*Cout + co]  = w[co][ci][tap]
//       scatter  B[tap*A1 + c1][c0]    = w[c0][c1][tap]      (conv_transpose3d, kernel == stride)
//   sum_splits: dw[co][ci][tap] = sum over s of partial[s][co][tap*Cin + ci], FP32, splits in order
//     (deterministic), rounded once to the weight's dtype.
// Precision: packing copies (same dtype as the op); the split sum is FP32.
#include <climits>

#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/conv/conv3d_cuda.h"
#include "ops/conv/conv3d_wgrad_paths.h"
#include "ops/conv/conv_halo_path.h"
#include "ops/conv/conv_igemm.cuh"

namespace halfgrad::ops::conv {

using igemm::Epilogue;
using igemm::Gather;
using cuda::from_float;
using cuda::to_float;

namespace {

template <typename T>
__global__ void pack_weights_kernel(const T* __restrict__ w, int a0, int a1, int taps, PackOrder order, T* __restrict__ B,
                                    int n_pad, int k_pad) {
  const int64_t total = static_cast<int64_t>(n_pad) * k_pad;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int nn = static_cast<int>(i / k_pad), kk = static_cast<int>(i % k_pad);
    int64_t src = -1;
    if (order == PackOrder::Fprop) {
      if (nn < a0 && kk < taps * a1) src = (static_cast<int64_t>(nn) * a1 + kk % a1) * taps + kk / a1;
    } else if (order == PackOrder::Dgrad) {
      if (nn < a1 && kk < taps * a0) src = (static_cast<int64_t>(kk % a0) * a1 + nn) * taps + kk / a0;
    } else {
      if (nn < taps * a1 && kk < a0) src = (static_cast<int64_t>(kk) * a1 + nn % a1) * taps + nn / a1;
    }
    B[i] = src >= 0 ? w[src] : from_float<T>(0.f);
  }
}

template <typename T>
__global__ void sum_splits_kernel(const float* __restrict__ partial, int splits, int cout, int cin, int taps,
                                  T* __restrict__ dw) {
  const int64_t total = static_cast<int64_t>(cout) * cin * taps, K = static_cast<int64_t>(cin) * taps;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t co = i / K, r = i % K, ci = r / taps, tap = r % taps;
    const int64_t kk = tap * cin + ci;
    float s = 0.f;
    for (int sp = 0; sp < splits; ++sp) s += partial[(sp * cout + co) * K + kk];
    dw[i] = from_float<T>(s);
  }
}

int as_int(int64_t v, const char* op, const char* what) {
  HG_CHECK(v >= 0 && v < INT_MAX, op << ": " << what << " = " << v << " exceeds the 32-bit index range of the CUDA kernels");
  return static_cast<int>(v);
}

}  // namespace

Tensor to_channels_last(const Tensor& t, Dtype dt) {
  const Tensor c = t.dtype() == dt ? t : t.cast_copy(dt);
  return c.format_copy(MemoryFormat::ChannelsLast3d);
}

Tensor pack_weights(const Tensor& w, PackOrder order, const char* op) {
  const Tensor wc = w.format_copy(MemoryFormat::Contiguous);
  const int a0 = as_int(w.size(0), op, "weight dim 0"), a1 = as_int(w.size(1), op, "weight dim 1");
  const int taps = as_int(w.size(2) * w.size(3) * w.size(4), op, "kernel taps");
  int64_t n = 0, k = 0;
  switch (order) {
    case PackOrder::Fprop: n = a0; k = int64_t{taps} * a1; break;
    case PackOrder::Dgrad: n = a1; k = int64_t{taps} * a0; break;
    case PackOrder::Scatter: n = int64_t{taps} * a1; k = a0; break;
  }
  const int64_t n_pad = (n + igemm::kPadN - 1) / igemm::kPadN * igemm::kPadN;
  const int64_t k_pad = (k + igemm::kPadK - 1) / igemm::kPadK * igemm::kPadK;
  Tensor B = Tensor::empty({n_pad, k_pad}, w.dtype(), Device::CUDA);
  const int np = as_int(n_pad, op, "packed weight rows"), kp = as_int(k_pad, op, "packed weight columns");
  cuda::dispatch_float(op, "convolution weights", w.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pack_weights_kernel<<<cuda::grid_for(n_pad * k_pad), 256, 0, cuda::stream()>>>(cuda::dev<T>(wc), a0, a1, taps, order,
                                                                                  cuda::dev<T>(B), np, kp);
  });
  HG_CUDA_LAUNCH_CHECK(op);
  return B;
}

Gather make_gather(const Tensor& src_cl, const ConvGeometry& g, bool transposed, const char* op) {
  Gather ga;
  ga.src = src_cl.raw_data();
  const Shape& s = src_cl.shape();
  ga.n = as_int(s[0], op, "batch");
  ga.c = as_int(s[1], op, "gathered channels");
  ga.d = as_int(s[2], op, "depth");
  ga.h = as_int(s[3], op, "height");
  ga.w = as_int(s[4], op, "width");
  as_int(s[0] * s[2] * s[3] * s[4], op, "gathered volume (pixels)");
  // Row space: the output extents of the convolution (forward) or its input extents (transposed).
  ga.od = as_int(transposed ? g.d : g.od, op, "output depth");
  ga.oh = as_int(transposed ? g.h : g.oh, op, "output height");
  ga.ow = as_int(transposed ? g.w : g.ow, op, "output width");
  as_int(s[0] * ga.od * ga.oh * ga.ow, op, "GEMM rows M");
  as_int(g.kvol() * s[1], op, "GEMM depth K");
  ga.kd = as_int(g.k[0], op, "kernel depth");
  ga.kh = as_int(g.k[1], op, "kernel height");
  ga.kw = as_int(g.k[2], op, "kernel width");
  ga.sd = as_int(g.s[0], op, "stride");
  ga.sh = as_int(g.s[1], op, "stride");
  ga.sw = as_int(g.s[2], op, "stride");
  ga.pd = as_int(g.p[0], op, "padding");
  ga.ph = as_int(g.p[1], op, "padding");
  ga.pw = as_int(g.p[2], op, "padding");
  ga.dd = as_int(g.dil[0], op, "dilation");
  ga.dh = as_int(g.dil[1], op, "dilation");
  ga.dw = as_int(g.dil[2], op, "dilation");
  ga.transposed = transposed;
  ga.init();
  return ga;
}

bool tensor_core_operand(Dtype dt, igemm::TcOperand* type) {
  if (dt == kFloat16) {
    *type = igemm::TcOperand::Half;
    return true;
  }
  if (dt == kBFloat16) {
    *type = igemm::TcOperand::BFloat16;
    return true;
  }
  return false;
}

void run_igemm(const Gather& ga, const Tensor& B, const Epilogue& e, const char* op) {
  const int k_pad = as_int(B.size(1), op, "packed weight columns");
  igemm::TcOperand type = igemm::TcOperand::Half;
  if (tensor_core_operand(B.dtype(), &type)) {
    HG_CHECK(B.size(0) >= (e.N + igemm::kPadN - 1) / igemm::kPadN * igemm::kPadN, op << ": packed weight has too few rows");
    const int slices = igemm::tc_igemm_slices(ga, type, e, op);  // split K where the output has too few tiles
    const Tensor partial =
        slices > 1 ? Tensor::empty({int64_t{slices} * ga.M * e.N}, kFloat32, Device::CUDA) : Tensor();
    igemm::tc_igemm(ga, type, B.raw_data(), k_pad, e, slices > 1 ? partial.data<float>() : nullptr, slices, op);
  } else {
    igemm::simt_igemm(ga, B.data<float>(), k_pad, e, op);
  }
}

namespace {

void check_conv_operands(const char* op, const ConvGeometry& g, const Tensor& t, const Shape& want, const char* what,
                         const Tensor& w) {
  HG_CHECK(t.is_cuda() && w.is_cuda(), op << ": " << what << " and weight must be CUDA tensors");
  HG_CHECK(t.shape() == want, op << ": " << what << " " << shape_str(t.shape()) << " does not match the geometry "
                                 << shape_str(want) << " (weight " << shape_str(w.shape()) << ")");
  HG_CHECK(is_reduced_float(w.dtype()) || w.dtype() == kFloat32,
           op << ": weight " << shape_str(w.shape()) << " must be float16, bfloat16 or float32, got " << dtype_name(w.dtype()));
  HG_CHECK(is_floating(t.dtype()) && t.dtype() != kFloat64,
           op << ": " << what << " " << shape_str(t.shape()) << " must be float16, bfloat16 or float32, got " << dtype_name(t.dtype()));
}

// The implicit GEMM both conv3d's fprop and its input gradient are: gather `src` (channels-last) by
// `g` (transposed = the dgrad/transposed-conv gather), multiply by `w` packed in `order`, add `bias`
// in the epilogue, and write an NDHWC tensor of `out_shape`, returned in `format`.
Tensor implicit_gemm_conv(const ConvGeometry& g, const Tensor& src, bool transposed, const Tensor& w, PackOrder order,
                          const Tensor& bias, const Shape& out_shape, MemoryFormat format, const char* op,
                          const char* n_what) {
  const Dtype dt = w.dtype();
  const Tensor srcs = to_channels_last(src, dt);
  const Gather ga = make_gather(srcs, g, transposed, op);
  const Tensor B = pack_weights(w, order, op);
  Tensor out = Tensor::empty(out_shape, dt, Device::CUDA, MemoryFormat::ChannelsLast3d);
  Epilogue e;
  e.out = out.raw_data();
  e.out_operand = dt != kFloat32;  // a 16-bit dtype runs on the Tensor Cores and writes it
  const Tensor bc = bias.defined() ? (bias.dtype() == dt ? bias : bias.cast_copy(dt)) : Tensor();
  e.bias = bc.defined() ? bc.raw_data() : nullptr;
  e.N = as_int(out_shape[1], op, n_what);
  // The "same" 3x3x3 layers of 16 or 32 channels: halo tiles (conv3d_fprop_halo_cuda.cu); else the implicit GEMM.
  igemm::TcOperand type = igemm::TcOperand::Half;
  if (halo_conv_applies(g, dt, transposed) && tensor_core_operand(dt, &type) && igemm::halo_conv_supported(ga, e))
    igemm::tc_halo_conv(ga, type, B.raw_data(), as_int(B.size(1), op, "packed weight columns"), e, op);
  else
    run_igemm(ga, B, e, op);
  return out.format_copy(format);
}

}  // namespace

Tensor dgrad_with_bias(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& b, MemoryFormat format,
                       const char* op) {
  return implicit_gemm_conv(g, dy, /*transposed=*/true, w, PackOrder::Dgrad, b, {g.n, g.cin, g.d, g.h, g.w}, format, op,
                            "channels");
}

Tensor cuda_conv3d_fprop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, MemoryFormat format) {
  const char* op = "conv3d";
  check_conv_operands(op, g, x, {g.n, g.cin, g.d, g.h, g.w}, "input", w);
  HG_CHECK(!b.defined() || (b.is_cuda() && b.numel() == g.cout), op << ": bias must be a CUDA tensor of " << g.cout << " elements");
  return implicit_gemm_conv(g, x, /*transposed=*/false, w, PackOrder::Fprop, b, {g.n, g.cout, g.od, g.oh, g.ow}, format,
                            op, "output channels");
}

Tensor cuda_conv3d_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w, MemoryFormat format) {
  check_conv_operands("conv3d backward (input gradient)", g, dy, {g.n, g.cout, g.od, g.oh, g.ow}, "output gradient", w);
  return dgrad_with_bias(g, dy, w, Tensor(), format, "conv3d backward (input gradient)");
}

Tensor cuda_conv3d_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, MemoryFormat w_format) {
  return cuda_conv3d_wgrad_on(g, x, dy, w_format, WgradPath::kAuto);
}

WgradPath cuda_conv3d_wgrad_auto_path(const ConvGeometry& g, Dtype dt) {
  igemm::TcOperand type = igemm::TcOperand::Half;
  if (!tensor_core_operand(dt, &type)) return WgradPath::kImplicitGemm;
  const char* op = "conv3d backward (weight gradient)";
  Gather ga;  // make_gather's description of g, without a tensor (src null: "aligned")
  ga.n = as_int(g.n, op, "batch");
  ga.c = as_int(g.cin, op, "input channels");
  ga.d = as_int(g.d, op, "depth"), ga.h = as_int(g.h, op, "height"), ga.w = as_int(g.w, op, "width");
  ga.od = as_int(g.od, op, "output depth"), ga.oh = as_int(g.oh, op, "output height"), ga.ow = as_int(g.ow, op, "output width");
  ga.kd = as_int(g.k[0], op, "kernel"), ga.kh = as_int(g.k[1], op, "kernel"), ga.kw = as_int(g.k[2], op, "kernel");
  ga.sd = as_int(g.s[0], op, "stride"), ga.sh = as_int(g.s[1], op, "stride"), ga.sw = as_int(g.s[2], op, "stride");
  ga.pd = as_int(g.p[0], op, "padding"), ga.ph = as_int(g.p[1], op, "padding"), ga.pw = as_int(g.p[2], op, "padding");
  ga.dd = as_int(g.dil[0], op, "dilation"), ga.dh = as_int(g.dil[1], op, "dilation"), ga.dw = as_int(g.dil[2], op, "dilation");
  return igemm::halo_wgrad_supported(ga, as_int(g.cout, op, "output channels")) ? WgradPath::kHalo : WgradPath::kImplicitGemm;
}

Tensor cuda_conv3d_wgrad_on(const ConvGeometry& g, const Tensor& x, const Tensor& dy, MemoryFormat w_format, WgradPath path) {
  const char* op = "conv3d backward (weight gradient)";
  HG_CHECK(x.is_cuda() && dy.is_cuda(), op << ": input and output gradient must be CUDA tensors");
  HG_CHECK(x.shape() == Shape({g.n, g.cin, g.d, g.h, g.w}) && dy.shape() == Shape({g.n, g.cout, g.od, g.oh, g.ow}),
           op << ": input " << shape_str(x.shape()) << " / output gradient " << shape_str(dy.shape())
              << " do not match the geometry (Cin " << g.cin << ", Cout " << g.cout << ", kernel ("
              << g.k[0] << ", " << g.k[1] << ", " << g.k[2] << "))");
  const Dtype dt = x.dtype();
  HG_CHECK(is_reduced_float(dt) || dt == kFloat32, op << ": input must be float16, bfloat16 or float32, got " << dtype_name(dt));
  const Tensor xs = to_channels_last(x, dt), dys = to_channels_last(dy, dt);
  const Gather ga = make_gather(xs, g, /*transposed=*/false, op);
  const int cout = as_int(g.cout, op, "output channels");
  igemm::TcOperand type = igemm::TcOperand::Half;
  const bool tc = tensor_core_operand(dt, &type);
  // The halo wgrad (conv3d_wgrad_paths.h) where it applies, unless the implicit GEMM is asked for.
  const bool halo_fits = tc && igemm::halo_wgrad_supported(ga, cout) && reinterpret_cast<uintptr_t>(dys.raw_data()) % 16 == 0;
  HG_CHECK(path != WgradPath::kHalo || halo_fits,
           op << ": the halo wgrad needs float16 or bfloat16, a 3x3x3 stride-1 undilated padding-1 convolution, Cin 1 or "
              << "a multiple of 8 <= 32 and Cout a multiple of 8 <= 32 (16-byte aligned operands); got " << dtype_name(dt)
              << ", Cin " << g.cin << ", Cout " << g.cout << ", kernel (" << g.k[0] << ", " << g.k[1] << ", " << g.k[2]
              << "), stride (" << g.s[0] << ", " << g.s[1] << ", " << g.s[2] << "), padding (" << g.p[0] << ", " << g.p[1]
              << ", " << g.p[2] << ")");
  const bool halo = halo_fits && path != WgradPath::kImplicitGemm;
  const int splits = halo ? igemm::halo_wgrad_splits(ga, type, cout, op) : igemm::wgrad_splits(ga.M, cout, ga.K, tc);
  Tensor partial = Tensor::empty({int64_t{splits} * cout * ga.K}, kFloat32, Device::CUDA);
  if (halo) {
    igemm::halo_wgrad(ga, type, dys.raw_data(), cout, partial.data<float>(), splits, op);
  } else if (tc) {
    igemm::tc_wgrad(ga, type, dys.raw_data(), cout, partial.data<float>(), splits, op);
  } else {
    igemm::simt_wgrad(ga, dys.data<float>(), cout, partial.data<float>(), splits, op);
  }
  Tensor dw = Tensor::empty({g.cout, g.cin, g.k[0], g.k[1], g.k[2]}, dt, Device::CUDA);
  const int64_t total = dw.numel();
  const int cin = as_int(g.cin, op, "input channels"), taps = as_int(g.kvol(), op, "kernel taps");
  cuda::dispatch_float(op, "weight gradients", dt, [&](auto tag) {
    using T = decltype(tag);
    sum_splits_kernel<<<cuda::grid_for(total), 256, 0, cuda::stream()>>>(partial.data<float>(), halo ? 1 : splits, cout, cin,
                                                                         taps, cuda::dev<T>(dw));  // halo: summed in partial[0]
  });
  HG_CUDA_LAUNCH_CHECK(op);
  return w_format == MemoryFormat::Contiguous ? dw : dw.format_copy(w_format);
}

}  // namespace halfgrad::ops::conv
