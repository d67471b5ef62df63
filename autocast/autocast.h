// autocast.h - the one precision policy table (HALFGRAD_OP_TABLE below), and the per-thread autocast
// state.
//
// Inside an AutocastGuard every op asks `autocast_dtype(kind, input dtypes)` which dtype to run in:
//   Lower    conv3d, conv_transpose3d, matmul, linear: operands in the region's lower dtype (FP16 by
//            default, BF16 with AutocastOptions().dtype(kBFloat16)), FP32 accumulation (Tensor Core
//            ops, where 16-bit operands double the throughput and halve the bytes).
//   Fp32     exp, log, pow, softmax, log_softmax, sum/mean, group_norm, layer_norm, losses, upsample:
//            ops whose outputs overflow FP16 (exp) or that sum many terms (reductions, losses) run in
//            FP32; upsample because PyTorch's list has it. PyTorch keeps the same list for BF16 (its
//            8-bit mantissa loses even more of a long sum).
//   Promote  binary elementwise ops and cat: run in the widest floating input type.
//   (absent) every other op runs in its inputs' type - batch_norm and instance_norm among them, as
//            in PyTorch (neither is on its lists): an FP16 input gives an FP16 output, while the
//            statistics are summed in FP32 and the affine weights and running statistics stay FP32
//            inside the op. Casting a norm's input up to FP32 instead would keep an FP32 copy of
//            every conv output for backward on top of the FP16 one: more memory than no AMP at all.
// This mirrors PyTorch's CUDA autocast lists (torch/csrc/autograd/autocast_mode.cpp, "lower_precision_fp",
// "fp32", "promote") for the ops halfgrad has.
//
// The lower dtype (PyTorch's autocast `dtype`): FP16, or BF16 - FP32's exponent range with an 8-bit
// mantissa, so no loss scaling is needed (amp/grad_scaler.h), at a coarser rounding. A region picks
// it with AutocastGuard(AutocastOptions().dtype(kBFloat16)); ops read it through
// autocast_lower_dtype(), and a nested guard may change it (the outer one comes back at its exit).
//
// The state is per thread, as in PyTorch: a guard on one thread does not change another's ops.
// Outside any guard (or with enabled=false) ops run in their inputs' types. Guards nest: an inner
// AutocastGuard(false) inside an enabled region runs its ops in their inputs' types and the outer
// state comes back when it closes (an FP32 region; nn::Module::set_autocast_fp32 uses one).
//
// The weight-cast cache (PyTorch's autocast cache, aten/src/ATen/autocast_mode.cpp `cached_casts`):
// a model's FP32 weights are cast to FP16 (or BF16) by every op that reads them, and a weight read twice in one
// forward (a shared layer, or a weight used by a forward and a second forward for a consistency loss)
// would be converted, and stored, twice. Within the outermost *enabled* AutocastGuard each FP32 leaf
// tensor that requires grad is cast to the lower dtype once; later casts to that dtype reuse it (the
// cache is keyed by the weight and the target dtype, so an inner BF16 region in an FP16 one does not
// get the FP16 copy), and its
// backward sums the gradients of every use into the one FP32 weight. The cache is emptied when the
// outermost enabled guard closes (so the next iteration, after optimizer.step(), casts the updated
// weights afresh). PyTorch's cache assumes the weights do not change inside the region, and serves a
// stale FP16 copy when they do; halfgrad's entry remembers the weight's version (core/tensor.h) and
// casts again when it changed (an optimizer.step(), fill_ or copy_from inside the region, e.g. a
// gradient-accumulation loop under one guard), so the FP16 copy always holds the current weights. Differences from PyTorch: the cache is emptied when the last *enabled*
// guard closes (PyTorch counts disabled ones too, so an outer `autocast(enabled=False)` around a loop
// would keep stale casts there), and no cast made under NoGradGuard is cached. (PyTorch's cache has
// kept such tape-less casts, so a no-grad forward followed by a grad forward in one region left the
// weights without gradients: pytorch/pytorch issues 65766, 112583 and 158232.)
//
// Why the cache only stores tensors: this file sits below autograd in the layering (the CMake target
// halfgrad_autocast links only core), because every op and the tape itself ask it for dtypes. It can
// therefore not make the differentiable cast itself, nor look at a tensor's grad_fn or at grad mode.
// The cast belongs to ops (ops::autocast_cast in ops/common.h, defined in ops/cast.cpp): that op
// decides whether a cast may be cached (grad mode on, FP32 leaf with requires_grad, target the lower dtype, an
// enabled region, the cache enabled), asks cast_cache_lookup, and on a miss casts with Tensor::to and
// hands the result to cast_cache_insert. This file only keeps the per-thread table and empties it.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>

#include "core/arg.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace halfgrad::amp {

enum class CastPolicy : uint8_t { Lower, Fp32, Promote, None };

/// Which of an op's inputs autocast casts to the policy's dtype.
enum class CastInputs : uint8_t {
  Floating,  // every floating input (operands, weights, bias), as PyTorch's autocast wrappers do
  First,     // the first input only (losses: the logits; the integer target is never cast)
  None,      // none: the op runs in its inputs' type (norms keep their FP32 statistics inside)
};

// THE precision table: one row per op kind, read by the OpKind enum, op_kind_name, the policy
// lookups below, the precision report (amp/precision_report.h) and anomaly mode's messages
// (autograd/anomaly.cpp). Adding an op kind is adding one row here; an op then asks
// autocast_dtype(OpKind::<Kind>, {its input dtypes}).
//   row: ROW(Kind, "name", policy, inputs cast, why)
// The lists follow PyTorch's CUDA autocast (aten/src/ATen/autocast_mode.cpp: lower_precision_fp,
// fp32, promote). batch_norm and instance_norm are on no list, as in PyTorch: they run in their
// input's dtype and keep their statistics, affine weights and running buffers in FP32 inside the op
// (ops/norm/norm.h). group_norm and layer_norm are on PyTorch's fp32 list: an FP16 input is cast up
// and the output is FP32.
#define HALFGRAD_OP_TABLE(ROW)                                                                              \
  ROW(Conv3d, "conv3d", Lower, Floating, "Tensor Core op: FP16/BF16 operands, FP32 accumulation")              \
  ROW(ConvTranspose3d, "conv_transpose3d", Lower, Floating, "Tensor Core op: FP16/BF16 operands, FP32 accumulation") \
  ROW(ConvBnRelu, "conv_bn_relu", Lower, Floating, "fused conv -> batch_norm -> relu pair (ops/conv/conv_bn.h): the conv's list; FP32 statistics inside") \
  ROW(Matmul, "matmul", Lower, Floating, "Tensor Core op: FP16/BF16 operands, FP32 accumulation")              \
  ROW(Linear, "linear", Lower, Floating, "Tensor Core op: FP16/BF16 operands, FP32 accumulation")              \
  ROW(Exp, "exp", Fp32, Floating, "exp overflows FP16 above x = 11.1")                                         \
  ROW(Log, "log", Fp32, Floating, "log of FP16's small values loses most of their bits")                       \
  ROW(Pow, "pow", Fp32, Floating, "powers overflow or underflow FP16")                                         \
  ROW(Softmax, "softmax", Fp32, Floating, "a sum of exponentials")                                             \
  ROW(LogSoftmax, "log_softmax", Fp32, Floating, "a sum of exponentials and a log")                            \
  ROW(Sum, "sum", Fp32, Floating, "a reduction: 16-bit sums of many terms lose the small ones")                \
  ROW(Mean, "mean", Fp32, Floating, "a reduction: 16-bit sums of many terms lose the small ones")              \
  ROW(BatchNorm, "batch_norm", None, None, "input dtype out; FP32 statistics and buffers inside")              \
  ROW(InstanceNorm, "instance_norm", None, None, "input dtype out; FP32 statistics inside")                    \
  ROW(GroupNorm, "group_norm", Fp32, Floating, "PyTorch's fp32 list")                                          \
  ROW(LayerNorm, "layer_norm", Fp32, Floating, "PyTorch's fp32 list: FP32 statistics and affine")              \
  ROW(CrossEntropy, "cross_entropy", Fp32, First, "a loss: log-softmax and a mean over every voxel")           \
  ROW(NllLoss, "nll_loss", Fp32, First, "a loss: a mean over every voxel")                                     \
  ROW(DiceLoss, "dice_loss", Fp32, First, "a loss: softmax and sums over every voxel")                         \
  ROW(MseLoss, "mse_loss", Fp32, First, "a loss: squares and a mean over every element")                       \
  ROW(L1Loss, "l1_loss", Fp32, First, "a loss: a mean over every element")                                     \
  ROW(BinaryCrossEntropyWithLogits, "binary_cross_entropy_with_logits", Fp32, First, "a loss: log1p(exp(-|x|)) and a mean") \
  ROW(Upsample, "upsample", Fp32, Floating, "PyTorch's fp32 list (upsample_trilinear3d, upsample_nearest3d)")  \
  ROW(Add, "add", Promote, Floating, "binary: the widest input type")                                          \
  ROW(Sub, "sub", Promote, Floating, "binary: the widest input type")                                          \
  ROW(Mul, "mul", Promote, Floating, "binary: the widest input type")                                          \
  ROW(Div, "div", Promote, Floating, "binary: the widest input type")                                          \
  ROW(Cat, "cat", Promote, Floating, "joins tensors: the widest input type")                                   \
  ROW(Relu, "relu", None, None, "exact in any dtype")                                                          \
  ROW(LeakyRelu, "leaky_relu", None, None, "a multiply by a constant: no list")                                \
  ROW(Sigmoid, "sigmoid", None, None, "bounded output, computed in FP32 inside: no list, as PyTorch")          \
  ROW(Tanh, "tanh", None, None, "bounded output, computed in FP32 inside: no list, as PyTorch")                \
  ROW(Silu, "silu", None, None, "computed in FP32 inside, rounded once: no list, as PyTorch")                  \
  ROW(Gelu, "gelu", None, None, "computed in FP32 inside, rounded once: no list, as PyTorch")                  \
  ROW(MaxPool3d, "max_pool3d", None, None, "exact in any dtype")                                               \
  ROW(AvgPool3d, "avg_pool3d", None, None, "on no list, as PyTorch: window sums in FP32 inside, rounded once") \
  ROW(AdaptiveAvgPool3d, "adaptive_avg_pool3d", None, None, "on no list, as PyTorch: FP32 sums inside")        \
  ROW(Sqrt, "sqrt", None, None, "on no list, as PyTorch: computed in FP32 inside, rounded once")               \
  ROW(Clamp, "clamp", None, None, "on no list, as PyTorch: picks values, exact in any dtype")                  \
  ROW(Dropout, "dropout", None, None, "a mask and one scale: no list, as PyTorch")                             \
  ROW(Dropout3d, "dropout3d", None, None, "a channel mask and one scale: no list, as PyTorch")                 \
  ROW(Flatten, "flatten", None, None, "moves no values (a reshape)")                                           \
  ROW(Reshape, "reshape", None, None, "moves no values")                                                       \
  ROW(View, "view", None, None, "moves no values")                                                             \
  ROW(Permute, "permute", None, None, "moves values, changes none (also transpose)")                           \
  ROW(Other, "other", None, None, "ops outside the table run in their inputs' type")

enum class OpKind : uint8_t {
#define HALFGRAD_OP_KIND(kind, name, policy, inputs, why) kind,
  HALFGRAD_OP_TABLE(HALFGRAD_OP_KIND)
#undef HALFGRAD_OP_KIND
  kCount
};

/// One row of the table.
struct OpRecord {
  OpKind kind;
  const char* enum_name;  // "Conv3d": the enumerator's spelling, for messages that show code
  const char* name;     // on the command line (--fp32-op NAME) and in logs
  CastPolicy policy;    // the list it is on by default
  CastInputs inputs;    // which inputs the policy casts
  const char* why;      // the reason, for the precision report
};

inline constexpr OpRecord kOpTable[] = {
#define HALFGRAD_OP_RECORD(kind, name, policy, inputs, why) \
  {OpKind::kind, #kind, name, CastPolicy::policy, CastInputs::inputs, why},
    HALFGRAD_OP_TABLE(HALFGRAD_OP_RECORD)
#undef HALFGRAD_OP_RECORD
};
static_assert(sizeof(kOpTable) / sizeof(kOpTable[0]) == static_cast<size_t>(OpKind::kCount), "one row per OpKind");

/// The table's row of `kind`.
constexpr const OpRecord& op_record(OpKind kind) { return kOpTable[static_cast<size_t>(kind)]; }
/// The row named `name` ("conv3d"), or nullptr: for messages that start from an op's name (anomaly
/// mode names the tape node); policies are always looked up by OpKind.
const OpRecord* find_op_record(const std::string& name);

/// The table: which list an op kind is on (ignoring per-thread overrides).
constexpr CastPolicy default_policy(OpKind kind) { return op_record(kind).policy; }
/// The list an op kind is on now, after set_op_fp32 overrides on this thread.
CastPolicy policy(OpKind kind);
/// The op kind's name on the command line and in logs ("conv3d", "batch_norm", ...).
constexpr const char* op_kind_name(OpKind kind) { return op_record(kind).name; }
/// The inverse of op_kind_name. Throws halfgrad::Error for an unknown name, listing every known one.
OpKind op_kind_from_name(const std::string& name);
/// "fp16", "fp32", "promote" or "input".
const char* cast_policy_name(CastPolicy p);

/// Is autocast active on this thread (inside an enabled guard, and not inside an FP32 region)?
bool autocast_enabled();
/// The lower-precision dtype autocast uses on this thread: the innermost guard's
/// AutocastOptions::dtype (Float16 outside any guard, and for the plain AutocastGuard constructor), or
/// Float32 in a HALFGRAD_FORCE_FP32 build (the one switch that runs every op in FP32, for bisecting a
/// numerical problem; apply_opt_level's O2/O3 keep FP32 weights then too, amp/opt_level.h).
Dtype autocast_lower_dtype();

/// The dtype an op of `kind` with floating inputs of `input_dtypes` runs in on this thread.
/// Outside autocast: the promoted type of the inputs (the inputs' own type for unary ops).
Dtype autocast_dtype(OpKind kind, std::initializer_list<Dtype> input_dtypes);

/// The options of an autocast region, as torch.autocast's keyword arguments (dtype, enabled,
/// cache_enabled), with chainable setters and same-name getters (libtorch style).
class AutocastOptions {
 public:
  /// The lower dtype: kFloat16 (default) or kBFloat16; any other dtype throws halfgrad::Error (PyTorch's
  /// CUDA autocast takes only these two).
  /// Written by hand, not HG_ARG: it checks the dtype, and dtype_ stays private so nothing skips the check.
  AutocastOptions& dtype(Dtype d);
  Dtype dtype() const { return dtype_; }
  HG_ARG(bool, enabled) = true;
  HG_ARG(bool, cache_enabled) = true;

 private:
  Dtype dtype_ = kFloat16;
};

/// RAII: enable (or disable) autocast for this thread within its scope; restores the outer state on
/// exit, so regions nest. As torch.autocast(device_type, dtype=..., enabled=..., cache_enabled=...).
/// `cache_enabled` turns the weight-cast cache on or off inside this guard's scope (restored on exit).
/// When the outermost enabled guard of this thread closes, the cache is emptied. The bool constructor
/// keeps the enclosing region's lower dtype (FP16 outside any guard); the options constructor sets it
/// for its scope (also when disabled, as torch.autocast stores its dtype either way).
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true, bool cache_enabled = true);
  explicit AutocastGuard(const AutocastOptions& options);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  bool prev_cache_enabled_;
  Dtype prev_lower_;
  bool counted_;  // this guard is an enabled region (counted in the thread's enabled depth)
};

/// Move one op kind to the FP32 list on this thread (an FP32 allow-list entry), or back to its
/// default list. Returns the previous override state. Throws halfgrad::Error for fp32 = true on a
/// kind whose op never asks the table (relu, leaky_relu, max_pool3d, reshape, view, permute,
/// nll_loss): the override would change nothing.
bool set_op_fp32(OpKind kind, bool fp32);
/// Throws set_op_fp32's error when `kind` cannot be moved to FP32; changes nothing (for validating
/// a command line before any state is touched: amp::PrecisionPlan).
void check_op_fp32_allowed(OpKind kind);

// ---- the weight-cast cache (see the file comment; ops::autocast_cast is its only client) ----------

/// Whether a cast made now may be cached: autocast is enabled on this thread and the innermost guard
/// did not turn the cache off. (Grad mode and the tensor's kind are checked by the op, above us.)
bool cast_cache_enabled();
/// The copy of `source` in dtype `dt` (by default the region's lower dtype, autocast_lower_dtype())
/// cached in this thread's current region, or an undefined Tensor; also
/// undefined (and the entry dropped) when `source` was written in place since it was cast (its
/// version, core/tensor.h, or its storage changed), so a stale copy is never served.
Tensor cast_cache_lookup(const Tensor& source, Dtype dt = autocast_lower_dtype());
/// Remember `cast` as the copy of `source` in cast.dtype() (replacing an older entry of that dtype). The entry holds both
/// handles, so `source`'s address cannot be reused by another tensor while it is cached. Throws
/// halfgrad::Error when called outside an enabled region (nothing would ever empty the entry).
void cast_cache_insert(const Tensor& source, const Tensor& cast);
/// Number of cached casts on this thread (for tests and logs).
size_t cast_cache_size();

}  // namespace halfgrad::amp
