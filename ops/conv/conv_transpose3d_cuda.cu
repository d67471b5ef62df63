// conv_transpose3d_cuda.cu - conv_transpose3d's forward on CUDA, and the bias gradient (channel sums)
// that conv3d and conv_transpose3d share. Its backward needs no kernel of its own: dx is conv3d's
// fprop of dy and dw conv3d's wgrad with x and dy swapped (conv3d.cpp), on the kernels of
// conv3d_fprop_cuda.cu / conv3d_wgrad_cuda.cu / conv3d_simt_cuda.cu.
//
// Math: x (N, Cin, D, H, W), w (Cin, Cout, kd, kh, kw), b (Cout); y (N, Cout, Do, Ho, Wo),
//   Do = (D-1) sd - 2 pd + dd (kd - 1) + output_padding_d + 1 (H, W alike)
//   y[n, z*sd - pd + a*dd, ..., co] += sum_ci x[n, z, ..., ci] * w[ci, co, a, b, c]   (+ b[co])
// * kernel == stride per axis, padding 0, dilation 1, no output_padding (the U-Net's 2x2x2 stride-2
//   up-convolution, or nnU-Net's (1, 2, 2)): the windows tile the output without overlap, so
//   y[n, kd*z + a, kh*y + b, kw*x + c, co] = b[co] + sum_ci x[n, z, y, x, ci]
//   * w[ci, co, a, b, c] is ONE GEMM: M = N*D*H*W (rows of x, channels-last), N = kd kh kw Cout (columns
//   (tap, co)), K = Cin, with B[(tap, co)][ci] = w[ci][co][tap] (pack_weights' scatter order) and an
//   epilogue that writes column (tap, co) of row (n, z, y, x) to its output voxel (every voxel once,
//   bias added there). Runs on tc_igemm / simt_igemm with the pointwise gather.
// * any other kernel, stride, padding: y = dgrad of the convolution G whose adjoint this is, with the
//   bias in the epilogue (dgrad_with_bias: transposed gather, predicated zero taps for stride > 1).
//
// channel sums: db[c] = sum over (n, spatial) of t, t channels-last viewed as (R, C). Pass 1: L lanes
//   (L a multiple of C, about 2048 per SM) each sum the elements i = lane, lane + L, ... (all of one
//   channel, c = lane % C; consecutive lanes read consecutive addresses) in FP32. Pass 2: one block
//   per channel adds its L / C lane sums in a fixed tree order. Deterministic; FP32 accumulation,
//   rounded once to t's dtype.

#include <algorithm>
#include <climits>

#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/conv/conv3d_cuda.h"
#include "ops/conv/conv_igemm.cuh"

namespace halfgrad::ops::conv {
using cuda::from_float;
using cuda::to_float;

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void lane_sums_kernel(const T* __restrict__ t, int64_t total, int64_t lanes, float* __restrict__ lane_sums) {
  const int64_t lane = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (lane >= lanes) return;
  float s = 0.f;
  for (int64_t i = lane; i < total; i += lanes) s += to_float(t[i]);
  lane_sums[lane] = s;
}

template <typename T>
__global__ void channel_total_kernel(const float* __restrict__ lane_sums, int64_t per_channel, int channels, T* __restrict__ out) {
  __shared__ float part[kThreads];
  const int c = blockIdx.x;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < per_channel; j += kThreads) s += lane_sums[j * channels + c];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) part[threadIdx.x] += part[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = from_float<T>(part[0]);
}

}  // namespace

Tensor cuda_conv_transpose3d_fprop(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                   MemoryFormat format) {
  const char* op = "conv_transpose3d";
  // G maps (N, g.cin, g.d, g.h, g.w) -> (N, g.cout, g.od, g.oh, g.ow); x is G's output side.
  HG_CHECK(x.is_cuda() && w.is_cuda(), op << ": input and weight must be CUDA tensors");
  HG_CHECK(x.shape() == Shape({g.n, g.cout, g.od, g.oh, g.ow}) &&
               w.shape() == Shape({g.cout, g.cin, g.k[0], g.k[1], g.k[2]}),
           op << ": input " << shape_str(x.shape()) << " / weight " << shape_str(w.shape()) << " do not match the geometry");
  HG_CHECK(is_reduced_float(w.dtype()) || w.dtype() == kFloat32, op << ": weight must be float16, bfloat16 or float32");
  HG_CHECK(!b.defined() || (b.is_cuda() && b.numel() == g.cin), op << ": bias must be a CUDA tensor of " << g.cin << " elements");
  // Disjoint windows that tile y exactly: kernel == stride, dilation 1, padding 0 on every axis, and
  // no output_padding (y's extents are x's times the kernel).
  const bool tiles_output = g.k == g.s && g.dil == Axes{1, 1, 1} && g.p == Axes{0, 0, 0} && g.d == g.od * g.k[0] &&
                            g.h == g.oh * g.k[1] && g.w == g.ow * g.k[2];
  if (!tiles_output) return dgrad_with_bias(g, x, w, b, format, op);

  const Dtype dt = w.dtype();
  const Tensor xs = to_channels_last(x, dt);
  // Pointwise forward gather over x: rows (n, z, y, x), columns ci.
  ConvGeometry pointwise = make_geometry(g.n, g.cout, g.cin, g.od, g.oh, g.ow, 1, 1, 0);
  const igemm::Gather ga = make_gather(xs, pointwise, /*transposed=*/false, op);
  const Tensor B = pack_weights(w, PackOrder::Scatter, op);
  Tensor y = Tensor::empty({g.n, g.cin, g.d, g.h, g.w}, dt, Device::CUDA, MemoryFormat::ChannelsLast3d);
  igemm::Epilogue e;
  e.out = y.raw_data();
  e.out_operand = dt != kFloat32;  // a 16-bit dtype runs on the Tensor Cores and writes it
  const Tensor bc = b.defined() ? (b.dtype() == dt ? b : b.cast_copy(dt)) : Tensor();
  e.bias = bc.defined() ? bc.raw_data() : nullptr;
  e.scatter = true;
  e.cout = static_cast<int>(g.cin);
  e.kd = static_cast<int>(g.k[0]);
  e.kh = static_cast<int>(g.k[1]);
  e.kw = static_cast<int>(g.k[2]);
  e.N = static_cast<int>(g.kvol() * g.cin);
  e.od = static_cast<int>(g.d);
  e.oh = static_cast<int>(g.h);
  e.ow = static_cast<int>(g.w);
  HG_CHECK(y.numel() < INT32_MAX * int64_t{1}, op << ": output " << shape_str(y.shape()) << " exceeds the 32-bit index range");
  e.div_cout = igemm::FastDivmod(e.cout);
  e.div_khw = igemm::FastDivmod(e.kh * e.kw);
  e.div_kw = igemm::FastDivmod(e.kw);
  run_igemm(ga, B, e, op);
  return y.format_copy(format);
}

Tensor cuda_channel_sums(const Tensor& t) {
  const char* op = "bias gradient (channel sums)";
  HG_CHECK(t.is_cuda() && t.dim() >= 2 && (is_reduced_float(t.dtype()) || t.dtype() == kFloat32),
           op << ": needs a float16/bfloat16/float32 CUDA tensor (N, C, ...), got " << shape_str(t.shape()));
  const int64_t C = t.size(1);
  Tensor out = Tensor::empty({C}, t.dtype(), Device::CUDA);
  if (C == 0) return out;
  // (R, C) view: channels-last for 5-D; a 2-D (N, C) tensor already is.
  const Tensor tc = t.dim() == 5 ? t.format_copy(MemoryFormat::ChannelsLast3d) : t;
  HG_CHECK(t.dim() == 5 || t.dim() == 2, op << ": expects a 5-D (N, C, D, H, W) or 2-D (N, C) tensor, got "
                                            << shape_str(t.shape()));
  const int64_t total = tc.numel();
  const int64_t per_channel = std::max<int64_t>(1, int64_t{2048} * cuda::sm_count() / C);
  const int64_t lanes = per_channel * C;
  HG_CHECK(C <= 65535, op << ": " << C << " channels exceed the grid");
  Tensor lane_sums = Tensor::empty({lanes}, kFloat32, Device::CUDA);
  const unsigned blocks = static_cast<unsigned>((lanes + kThreads - 1) / kThreads);
  cuda::dispatch_float(op, "channel sums", t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    lane_sums_kernel<<<blocks, kThreads, 0, cuda::stream()>>>(cuda::dev<T>(tc), total, lanes, lane_sums.data<float>());
    HG_CUDA_LAUNCH_CHECK(op);
    channel_total_kernel<<<static_cast<unsigned>(C), kThreads, 0, cuda::stream()>>>(
        lane_sums.data<float>(), per_channel, static_cast<int>(C), cuda::dev<T>(out));
  });
  HG_CUDA_LAUNCH_CHECK(op);
  return out;
}

}  // namespace halfgrad::ops::conv
