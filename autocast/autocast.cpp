#include "autocast/autocast.h"

#include <array>

#include "autocast/cast_stats.h"
#include <sstream>
#include <map>
#include <utility>

#include "core/error.h"

namespace halfgrad::amp {

namespace {
struct CacheEntry {
  Tensor source;  // keeps the key's TensorImpl alive, so its address names it until the entry goes
  Tensor cast;    // its FP16 / BF16 copy, made by the differentiable cast (carries the tape node)
  const Storage* source_storage;  // source's buffer and its version when cast: a later in-place write
  uint64_t source_version;        // (optimizer step, fill_, copy_from) or a storage swap makes the copy stale
};

struct ThreadState {
  bool enabled = false;
  bool cache_enabled = true;
  Dtype lower = kFloat16;  // the innermost guard's AutocastOptions::dtype
  int enabled_depth = 0;  // enabled AutocastGuards open on this thread; the cache empties at 0
  std::array<bool, static_cast<size_t>(OpKind::kCount)> force_fp32{};
  // Keyed by the source weight and the target dtype (nested FP16 and BF16 regions keep both copies).
  std::map<std::pair<const TensorImpl*, Dtype>, CacheEntry> cast_cache;
};
thread_local ThreadState t_state;
}  // namespace

static_assert([] {
  for (size_t k = 0; k < static_cast<size_t>(OpKind::kCount); ++k)
    if (static_cast<size_t>(kOpTable[k].kind) != k) return false;
  return true;
}(), "kOpTable's rows are in OpKind order");

const OpRecord* find_op_record(const std::string& name) {
  for (const OpRecord& r : kOpTable)
    if (name == r.name) return &r;
  return nullptr;
}

CastPolicy policy(OpKind kind) {
  if (t_state.force_fp32[static_cast<size_t>(kind)]) return CastPolicy::Fp32;
  return default_policy(kind);
}

OpKind op_kind_from_name(const std::string& name) {
  if (const OpRecord* r = find_op_record(name)) return r->kind;
  std::ostringstream known;
  for (const OpRecord& r : kOpTable) known << (&r == kOpTable ? "" : ", ") << r.name;
  HG_FAIL("unknown op kind '" << name << "'; the op kinds of the autocast table are: " << known.str());
  return OpKind::Other;  // unreachable
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
  return t_state.lower;
#endif
}

AutocastOptions& AutocastOptions::dtype(Dtype d) {
  HG_CHECK(is_reduced_float(d), "AutocastOptions::dtype: autocast runs its Lower ops in float16 or bfloat16, got "
                                    << dtype_name(d) << " (for an FP32 region use AutocastOptions().enabled(false))");
  dtype_ = d;
  return *this;
}

Dtype autocast_dtype(OpKind kind, std::initializer_list<Dtype> input_dtypes) {
  note_autocast_request(kind);  // autocast/cast_stats.h: which op kind asked, for the precision report
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

AutocastGuard::AutocastGuard(bool enabled, bool cache_enabled)
    : prev_enabled_(t_state.enabled), prev_cache_enabled_(t_state.cache_enabled), prev_lower_(t_state.lower),
      counted_(enabled) {
  t_state.enabled = enabled;
  t_state.cache_enabled = cache_enabled;
  if (counted_) ++t_state.enabled_depth;
}

AutocastGuard::AutocastGuard(const AutocastOptions& options)
    : AutocastGuard(options.enabled(), options.cache_enabled()) {
  t_state.lower = options.dtype();
}

AutocastGuard::~AutocastGuard() {
  t_state.enabled = prev_enabled_;
  t_state.cache_enabled = prev_cache_enabled_;
  t_state.lower = prev_lower_;
  if (counted_ && --t_state.enabled_depth == 0) t_state.cast_cache.clear();
}

namespace {

// The kinds whose ops never ask autocast_dtype: they run in their input's dtype, exactly (relu,
// leaky_relu, max_pool3d) or without touching a value (reshape, view, permute), and nll_loss has no
// op yet (cross_entropy asks as CrossEntropy). An FP32 override of them would be accepted and change
// nothing, so set_op_fp32 refuses it. (To be a column of HALFGRAD_OP_TABLE when the table next changes.)
bool never_asks(OpKind kind) {
  switch (kind) {
    case OpKind::Relu: case OpKind::LeakyRelu: case OpKind::MaxPool3d: case OpKind::Reshape: case OpKind::View:
    case OpKind::Permute: case OpKind::NllLoss:
      return true;
    default:
      return false;
  }
}

}  // namespace

void check_op_fp32_allowed(OpKind kind) {
  HG_CHECK(!never_asks(kind),
           "amp::set_op_fp32: " << op_kind_name(kind) << " cannot be moved to FP32: its op never asks the precision "
                                << "table (it runs in its input's dtype: " << op_record(kind).why
                                << "), so the override would change nothing; move the op that produces its input "
                                << "(e.g. conv3d) or use an FP32 module region (Module::set_autocast_fp32)");
}

bool set_op_fp32(OpKind kind, bool fp32) {
  if (fp32) check_op_fp32_allowed(kind);
  bool prev = t_state.force_fp32[static_cast<size_t>(kind)];
  t_state.force_fp32[static_cast<size_t>(kind)] = fp32;
  return prev;
}

bool cast_cache_enabled() { return t_state.enabled && t_state.cache_enabled; }

Tensor cast_cache_lookup(const Tensor& source, Dtype dt) {
  auto it = t_state.cast_cache.find({source.impl(), dt});
  if (it == t_state.cast_cache.end()) return Tensor();
  const CacheEntry& e = it->second;
  if (e.source_storage != source.impl()->storage.get() || e.source_version != source.version()) {
    t_state.cast_cache.erase(it);  // the weight changed since it was cast: the caller casts it again
    return Tensor();
  }
  return e.cast;
}

void cast_cache_insert(const Tensor& source, const Tensor& cast) {
  HG_CHECK(t_state.enabled_depth > 0, "amp::cast_cache_insert: called outside an enabled AutocastGuard; "
                                      "the entry would never be cleared");
  t_state.cast_cache[{source.impl(), cast.dtype()}] = CacheEntry{source, cast, source.impl()->storage.get(), source.version()};
}

size_t cast_cache_size() { return t_state.cast_cache.size(); }

}  // namespace halfgrad::amp
