#include "amp/autocast.h"

#include <array>

namespace halfgrad::amp {

namespace {
struct ThreadState {
  bool enabled = false;
  std::array<bool, static_cast<size_t>(OpKind::kCount)> force_fp32{};
};
thread_local ThreadState t_state;
}  // namespace

CastPolicy default_policy(OpKind kind) {
  switch (kind) {
    case OpKind::Conv3d: case OpKind::ConvTranspose3d: case OpKind::Matmul: case OpKind::Linear:
      return CastPolicy::Lower;
    case OpKind::Exp: case OpKind::Log: case OpKind::Pow: case OpKind::Softmax: case OpKind::LogSoftmax:
    case OpKind::Sum: case OpKind::Mean: case OpKind::BatchNorm: case OpKind::InstanceNorm:
    case OpKind::GroupNorm: case OpKind::CrossEntropy: case OpKind::NllLoss: case OpKind::DiceLoss:
    case OpKind::Upsample:
      return CastPolicy::Fp32;
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Cat:
      return CastPolicy::Promote;
    default:
      return CastPolicy::None;
  }
}

CastPolicy policy(OpKind kind) {
  if (t_state.force_fp32[static_cast<size_t>(kind)]) return CastPolicy::Fp32;
  return default_policy(kind);
}

const char* op_kind_name(OpKind kind) {
  static const char* names[] = {"conv3d", "conv_transpose3d", "matmul", "linear", "exp", "log", "pow",
                                "softmax", "log_softmax", "sum", "mean", "batch_norm", "instance_norm",
                                "group_norm", "cross_entropy", "nll_loss", "dice_loss", "upsample", "add",
                                "sub", "mul", "div", "cat", "relu", "leaky_relu", "max_pool3d", "reshape",
                                "other"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(OpKind::kCount), "one name per OpKind");
  return names[static_cast<size_t>(kind)];
}

const char* cast_policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::Lower: return "fp16";
    case CastPolicy::Fp32: return "fp32";
    case CastPolicy::Promote: return "promote";
    case CastPolicy::None: return "input";
  }
  return "?";
}

bool autocast_enabled() { return t_state.enabled; }

Dtype autocast_lower_dtype() {
#if defined(HALFGRAD_FORCE_FP32)
  return kFloat32;
#else
  return kFloat16;
#endif
}

Dtype autocast_dtype(OpKind kind, std::initializer_list<Dtype> input_dtypes) {
  Dtype widest = kFloat16;
  bool any = false;
  for (Dtype d : input_dtypes) {
    if (!is_floating(d)) continue;
    widest = any ? promote_types(widest, d) : d;
    any = true;
  }
  if (!any) widest = kFloat32;
  if (!t_state.enabled) return widest;
  // Float64 inputs are never touched by autocast (PyTorch only casts eligible FP32/FP16 tensors).
  if (widest == kFloat64) return kFloat64;
  switch (policy(kind)) {
    case CastPolicy::Lower: return autocast_lower_dtype();
    case CastPolicy::Fp32: return kFloat32;
    case CastPolicy::Promote: return widest;
    case CastPolicy::None: return widest;
  }
  return widest;
}

AutocastGuard::AutocastGuard(bool enabled) : prev_enabled_(t_state.enabled) { t_state.enabled = enabled; }
AutocastGuard::~AutocastGuard() { t_state.enabled = prev_enabled_; }

bool set_op_fp32(OpKind kind, bool fp32) {
  bool prev = t_state.force_fp32[static_cast<size_t>(kind)];
  t_state.force_fp32[static_cast<size_t>(kind)] = fp32;
  return prev;
}

}  // namespace halfgrad::amp
