// autocast.h - the one precision policy table, and the per-thread autocast state.
//
// Inside an AutocastGuard every op asks `autocast_dtype(kind, input dtypes)` which dtype to run in:
//   Lower    conv3d, conv_transpose3d, matmul, linear: FP16 operands, FP32 accumulation (Tensor Core
//            ops, where FP16 doubles the throughput and halves the bytes).
//   Fp32     exp, log, pow, softmax, log_softmax, sum/mean, norms, losses: ops whose outputs overflow
//            FP16 (exp), or that sum many terms (reductions, norms), run in FP32.
//   Promote  binary elementwise ops and cat: run in the widest floating input type.
//   (absent) every other op runs in its inputs' type.
// This mirrors PyTorch's CUDA autocast lists (torch/csrc/autograd/autocast_mode.cpp, "lower_precision_fp",
// "fp32", "promote") for the ops halfgrad has.
//
// The state is per thread, as in PyTorch: a guard on one thread does not change another's ops.
// Outside any guard (or with enabled=false) ops run in their inputs' types.
#pragma once
#include <initializer_list>

#include "core/dtype.h"

namespace halfgrad::amp {

enum class OpKind : uint8_t {
  // Lower-precision (FP16) list
  Conv3d, ConvTranspose3d, Matmul, Linear,
  // FP32 list
  Exp, Log, Pow, Softmax, LogSoftmax, Sum, Mean, BatchNorm, InstanceNorm, GroupNorm, CrossEntropy, NllLoss,
  DiceLoss, Upsample,
  // Promote list
  Add, Sub, Mul, Div, Cat,
  // Outside the table: run in the inputs' type
  Relu, LeakyRelu, MaxPool3d, Reshape, Other,
  kCount
};

enum class CastPolicy : uint8_t { Lower, Fp32, Promote, None };

/// The table: which list an op kind is on (ignoring per-thread overrides).
CastPolicy default_policy(OpKind kind);
/// The list an op kind is on now, after set_op_fp32 overrides on this thread.
CastPolicy policy(OpKind kind);
const char* op_kind_name(OpKind kind);
const char* cast_policy_name(CastPolicy p);

/// Is autocast active on this thread (inside an enabled guard, and not inside an FP32 region)?
bool autocast_enabled();
/// The lower-precision dtype autocast uses (Float16).
Dtype autocast_lower_dtype();

/// The dtype an op of `kind` with floating inputs of `input_dtypes` runs in on this thread.
/// Outside autocast: the promoted type of the inputs (the inputs' own type for unary ops).
Dtype autocast_dtype(OpKind kind, std::initializer_list<Dtype> input_dtypes);

/// RAII: enable (or disable) autocast for this thread within its scope; restores the outer state on
/// exit, so regions nest. As torch.autocast(device_type, dtype=torch.float16, enabled=...).
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
};

/// Move one op kind to the FP32 list on this thread (an FP32 allow-list entry), or back to its
/// default list. Returns the previous override state.
bool set_op_fp32(OpKind kind, bool fp32);

}  // namespace halfgrad::amp
