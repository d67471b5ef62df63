// conv_bn.cpp - conv_bn_relu_pair (ops/conv/conv_bn.h): the checks, the autocast casts, the fused CUDA
// forward (conv_bn_cuda.h) and its backward, which chains the unfused CUDA kernels in reverse:
//   dz2 = relu'(y) dy                       (from the saved output y; the unfused relu kernel)
//   dh2, dgamma2, dbeta2 = batch_norm backward(h2, saved stats 2, dz2)   (the unfused BN kernels)
//   a1 = relu((h1 - mean1) * scale1 + beta1) recomputed (the forward never wrote it), for dw2 = wgrad(a1, dh2)
//   dz1 = relu'(a1) dgrad(dh2, w2) and BN 1's sums of dz1, dz1 (h1 - mean1) in one halo dgrad
//     (cuda_conv3d_dgrad_bn_relu_backward: da1 is never written); dh1, dgamma1, dbeta1 from those sums
//   dw1 = wgrad(x, dh1),  dx = dgrad(dh1, w1)
// The gradients of x, w1 and w2 come back in the autocast dtype and reach FP32 leaves through the
// differentiable casts (autocast_cast), as conv3d's; gamma / beta gradients are FP32.
#include "ops/conv/conv_bn.h"

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "ops/common.h"
#include "ops/conv/vol2col.h"
#ifdef HALFGRAD_CUDA
#include "ops/activation/activation_cuda.h"
#include "ops/conv/conv3d_cuda.h"
#include "ops/conv/conv_bn_cuda.h"
#include "ops/norm/norm_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

constexpr const char* kOp = "conv_bn_relu";

// The dtype both convs run in: the ConvBnRelu row, which must agree with what conv3d would pick.
Dtype pair_dtype(const Tensor& x, const ConvBnReluStage& a, const ConvBnReluStage& b) {
  return amp::autocast_dtype(amp::OpKind::ConvBnRelu, {x.dtype(), a.conv_weight.dtype(), b.conv_weight.dtype()});
}

bool float32_cuda_or_undefined(const Tensor& t, int64_t C) {
  return !t.defined() || (t.is_cuda() && t.dtype() == kFloat32 && t.dim() == 1 && t.size(0) == C);
}

// cin 1 only for the first stage (its input is the network's; the second stage's is normalised).
bool stage_fusable(const ConvBnReluStage& s, int64_t cin, int64_t voxels) {
  const Tensor& w = s.conv_weight;
  if (!w.defined() || !w.is_cuda() || w.dim() != 5) return false;
  const int64_t cout = w.size(0);
  if (w.size(1) != cin || w.size(2) != 3 || w.size(3) != 3 || w.size(4) != 3) return false;
  if ((cin != 1 && cin != 16 && cin != 32) || (cout != 16 && cout != 32)) return false;
  if (!float32_cuda_or_undefined(s.bn_weight, cout) || !float32_cuda_or_undefined(s.bn_bias, cout) ||
      !float32_cuda_or_undefined(s.running_mean, cout) || !float32_cuda_or_undefined(s.running_var, cout))
    return false;
  if (s.bn.training_) return voxels > 1;
  return s.running_mean.defined() && s.running_var.defined();
}

#ifdef HALFGRAD_CUDA
conv::ConvGeometry stage_geometry(const Tensor& x, int64_t cin, const Tensor& w) {
  return conv::make_geometry(x.size(0), cin, w.size(0), x.size(2), x.size(3), x.size(4), 3, 1, 1);
}

conv::BnCudaState bn_state(const ConvBnReluStage& s) {
  conv::BnCudaState b;
  b.weight = s.bn_weight.defined() ? s.bn_weight.detach() : Tensor();
  b.bias = s.bn_bias.defined() ? s.bn_bias.detach() : Tensor();
  b.running_mean = s.running_mean;
  b.running_var = s.running_var;
  b.batch_stats = s.bn.training_;
  b.momentum = s.bn.momentum_;
  b.eps = s.bn.eps_;
  return b;
}

cuda::NormCudaArgs norm_args(const ConvBnReluStage& s) {
  cuda::NormCudaArgs a;
  a.op = "batch_norm";
  a.per_sample = false;
  a.batch_stats = s.bn.training_;
  a.momentum = s.bn.momentum_;
  a.eps = s.bn.eps_;
  return a;
}

// What the backward reads: the forward's raw conv outputs, statistics and casts.
struct ConvBnReluPairSaved {
  conv::ConvGeometry g1, g2;
  Dtype dt = kFloat16;
  MemoryFormat x_format = MemoryFormat::Contiguous, w1_format = MemoryFormat::Contiguous,
               w2_format = MemoryFormat::Contiguous;
  cuda::NormCudaArgs bn1, bn2;
  Tensor x, w1, w2;              // the conv operands in dt (x channels-last)
  Tensor h1, h2;                 // raw conv outputs, channels-last, dt
  Tensor saved1, saved2;         // (2, C) mean, invstd
  Tensor coef1;                  // (3, C1) BN 1 + ReLU, to recompute a1
  Tensor gamma1, gamma2;         // float32 [C] or undefined
  Tensor y;                      // the output, channels-last (relu's mask)
  bool need_x = false, need_w1 = false, need_w2 = false;
  bool need_g1 = false, need_b1 = false, need_g2 = false, need_b2 = false;
  Dtype g1_dtype = kFloat32, b1_dtype = kFloat32, g2_dtype = kFloat32, b2_dtype = kFloat32;
};

Tensor param_grad(const Tensor& g, bool need, Dtype dt) {
  if (!need) return Tensor();
  return g.dtype() == dt ? g : g.cast_copy(dt);
}

// The chain rule of the pair (file comment), for the record's inputs {x, w1, gamma1, beta1, w2, gamma2, beta2}.
std::vector<Tensor> conv_bn_relu_pair_backward(const ConvBnReluPairSaved& s, const Tensor& gy) {
  const Tensor g = (gy.dtype() == s.dt ? gy : gy.cast_copy(s.dt)).format_copy(MemoryFormat::ChannelsLast3d);
  const Tensor dz2 = cuda::leaky_relu_backward(kOp, g, s.y, 0.0);
  const cuda::NormCudaGrads n2 = cuda::norm_backward(s.bn2, s.h2, s.gamma2, s.saved2, dz2, true, s.need_g2, s.need_b2);
  Tensor dw2 = s.need_w2 ? conv::cuda_conv3d_wgrad(s.g2, conv::cuda_bn_relu_apply(s.h1, s.coef1), n2.dx, s.w2_format)
                         : Tensor();  // a1 recomputed for wgrad only, and freed after it
  // conv 2's dgrad with relu 1's mask and BN 1's reductions in its epilogue (da1 is never written)
  const conv::BnReluGradCuda n1 = conv::cuda_conv3d_dgrad_bn_relu_backward(
      s.g2, n2.dx, s.w2, s.h1, s.coef1, s.saved1, s.gamma1, s.bn1.batch_stats, s.need_g1, s.need_b1);
  Tensor dw1 = s.need_w1 ? conv::cuda_conv3d_wgrad(s.g1, s.x, n1.dh, s.w1_format) : Tensor();
  Tensor dx = s.need_x ? conv::cuda_conv3d_dgrad(s.g1, n1.dh, s.w1, s.x_format) : Tensor();
  return {dx,  dw1, param_grad(n1.dweight, s.need_g1, s.g1_dtype), param_grad(n1.dbias, s.need_b1, s.b1_dtype),
          dw2, param_grad(n2.dweight, s.need_g2, s.g2_dtype),      param_grad(n2.dbias, s.need_b2, s.b2_dtype)};
}
#endif

void check_stage(const char* which, const ConvBnReluStage& s, int64_t cin) {
  const Tensor& w = s.conv_weight;
  HG_CHECK(w.defined() && w.dim() == 5 && w.size(1) == cin && w.size(2) == 3 && w.size(3) == 3 && w.size(4) == 3,
           kOp << ": " << which << " conv weight must be (Cout, " << cin << ", 3, 3, 3), got "
               << (w.defined() ? shape_str(w.shape()) : std::string("undefined")));
}

}  // namespace

bool conv_bn_relu_pair_fusable(const Tensor& x, const ConvBnReluStage& first, const ConvBnReluStage& second) {
#ifdef HALFGRAD_CUDA
  if (!x.defined() || !x.is_cuda() || x.dim() != 5) return false;
  const int64_t voxels = x.size(0) * x.size(2) * x.size(3) * x.size(4);
  if (!stage_fusable(first, x.size(1), voxels)) return false;
  if (!stage_fusable(second, first.conv_weight.size(0), voxels)) return false;
  const Dtype dt = pair_dtype(x, first, second);
  if (dt != kFloat16 && dt != kBFloat16) return false;
  // conv3d would run each conv in the same dtype, and on the halo kernel (not forced off by a test)
  if (amp::autocast_dtype(amp::OpKind::Conv3d, {x.dtype(), first.conv_weight.dtype()}) != dt) return false;
  // and batch_norm and relu would keep it (not moved to the FP32 list by amp::set_op_fp32)
  if (amp::autocast_dtype(amp::OpKind::BatchNorm, {dt}) != dt || amp::autocast_dtype(amp::OpKind::Relu, {dt}) != dt)
    return false;
  return conv::conv_bn_halo_applies(stage_geometry(x, x.size(1), first.conv_weight), dt);
#else
  (void)x, (void)first, (void)second;
  return false;
#endif
}

Tensor conv_bn_relu_pair(const Tensor& x, const ConvBnReluStage& first, const ConvBnReluStage& second) {
  NvtxRange nvtx_range("conv_bn_relu");
  HG_CHECK(x.defined() && x.dim() == 5, kOp << ": input must be 5-D (N, C, D, H, W), got "
                                            << (x.defined() ? shape_str(x.shape()) : std::string("undefined")));
  check_stage("first", first, x.size(1));
  check_stage("second", second, first.conv_weight.size(0));
  HG_CHECK(conv_bn_relu_pair_fusable(x, first, second),
           kOp << ": input " << shape_str(x.shape()) << " " << dtype_name(x.dtype()) << " with conv weights "
               << shape_str(first.conv_weight.shape()) << ", " << shape_str(second.conv_weight.shape())
               << " has no fused kernel (needs CUDA, an FP16/BF16 autocast dtype, 16 or 32 channels, float32 CUDA "
                  "BatchNorm tensors); use conv3d, batch_norm and relu");
#ifdef HALFGRAD_CUDA
  const Dtype dt = pair_dtype(x, first, second);
  const Tensor xc = autocast_cast(x, dt), w1 = autocast_cast(first.conv_weight, dt),
               w2 = autocast_cast(second.conv_weight, dt);
  ConvBnReluPairSaved s;
  s.dt = dt;
  s.x_format = xc.memory_format();
  s.w1_format = w1.memory_format();
  s.w2_format = w2.memory_format();
  s.g1 = stage_geometry(xc, xc.size(1), w1);
  s.g2 = stage_geometry(xc, w1.size(0), w2);
  s.x = xc.detach().format_copy(MemoryFormat::ChannelsLast3d);
  s.w1 = w1.detach();
  s.w2 = w2.detach();
  const conv::ConvBnCudaForward f1 = conv::cuda_conv3d_bn_fprop(s.g1, s.x, s.w1, Tensor(), bn_state(first));
  const conv::ConvBnCudaForward f2 = conv::cuda_conv3d_bn_fprop(s.g2, f1.y, s.w2, f1.coef, bn_state(second));
  s.y = conv::cuda_bn_relu_apply(f2.y, f2.coef);
  const Tensor y = s.y.format_copy(s.x_format);
  s.h1 = f1.y;
  s.h2 = f2.y;
  s.saved1 = f1.saved;
  s.saved2 = f2.saved;
  s.coef1 = f1.coef;
  s.gamma1 = first.bn_weight.defined() ? first.bn_weight.detach() : Tensor();
  s.gamma2 = second.bn_weight.defined() ? second.bn_weight.detach() : Tensor();
  s.bn1 = norm_args(first);
  s.bn2 = norm_args(second);
  auto wants = [](const Tensor& t) { return t.defined() && t.requires_grad(); };
  s.need_x = wants(xc);
  s.need_w1 = wants(w1);
  s.need_w2 = wants(w2);
  s.need_g1 = wants(first.bn_weight);
  s.need_b1 = wants(first.bn_bias);
  s.need_g2 = wants(second.bn_weight);
  s.need_b2 = wants(second.bn_bias);
  if (first.bn_weight.defined()) s.g1_dtype = first.bn_weight.dtype();
  if (first.bn_bias.defined()) s.b1_dtype = first.bn_bias.dtype();
  if (second.bn_weight.defined()) s.g2_dtype = second.bn_weight.dtype();
  if (second.bn_bias.defined()) s.b2_dtype = second.bn_bias.dtype();
  return autograd::record(kOp, y, {xc, w1, first.bn_weight, first.bn_bias, w2, second.bn_weight, second.bn_bias},
                          {autograd::Save::input(0, "input"), autograd::Save::input(1, "first conv weight"),
                           autograd::Save::input(2, "first BatchNorm weight"), autograd::Save::input(4, "second conv weight"),
                           autograd::Save::input(5, "second BatchNorm weight")},
                          [s = std::move(s)](const Tensor& gy) -> std::vector<Tensor> {
                            return conv_bn_relu_pair_backward(s, gy);
                          });
#else
  return Tensor();
#endif
}

}  // namespace halfgrad::ops
