// anomaly.cpp - anomaly mode: the NaN/Inf checks and their messages (see anomaly.h).
#include "core/nonfinite.h"
#include "autograd/anomaly.h"

#include "autocast/autocast.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace halfgrad::autograd {

namespace {

thread_local bool t_anomaly = false;
thread_local int t_hook_id = -1;  // the forward hook installed while anomaly mode is on

void set_anomaly_mode(bool on) {
  if (on == t_anomaly) return;
  t_anomaly = on;
  if (on) {
    t_hook_id = add_forward_hook(check_forward_anomaly);
  } else {
    remove_forward_hook(t_hook_id);
    t_hook_id = -1;
  }
}

template <typename T>
void scan(const T* p, int64_t n, ValueSummary& s) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    if (std::isnan(v)) ++s.nan;
    else if (std::isinf(v)) ++(v > 0 ? s.pos_inf : s.neg_inf);
    else {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  s.min = lo;
  s.max = hi;
}

uint16_t bits_of(uint16_t h) { return h; }
uint16_t bits_of(bfloat16_bits b) { return b.bits; }

// A 16-bit float format: an all-ones exponent field (exp_mask) is inf (mantissa 0) or NaN (mantissa
// != 0); everything else is finite and decoded exactly by `decode`.
template <typename Bits, typename Decode>
void scan_16bit(const Bits* p, int64_t n, uint16_t exp_mask, uint16_t mantissa_mask, Decode decode, ValueSummary& s) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = bits_of(p[i]);
    if ((h & exp_mask) == exp_mask) {
      if (h & mantissa_mask) ++s.nan;
      else ++(h & 0x8000u ? s.neg_inf : s.pos_inf);
    } else {
      const double v = decode(h);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  s.min = lo;
  s.max = hi;
}

// binary16: exponent field 31 (0x7c00).
void scan_half(const uint16_t* p, int64_t n, ValueSummary& s) { scan_16bit(p, n, 0x7c00u, 0x03ffu, half_bits_to_float, s); }

// bfloat16: the top half of a binary32, so its exponent field is the float's (0x7f80).
void scan_bfloat16(const bfloat16_bits* p, int64_t n, ValueSummary& s) {
  scan_16bit(p, n, 0x7f80u, 0x007fu, bfloat16_bits_to_float, s);
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// "NaN", "inf", or "NaN and inf": what a non-finite summary holds.
std::string what_bad(const ValueSummary& s) {
  const bool inf = s.pos_inf + s.neg_inf > 0;
  if (s.nan && inf) return "NaN and inf";
  return s.nan ? "NaN" : "inf";
}

std::string input_label(const std::string& op, size_t i) {
  const char* role = input_role(op, i);
  return "input " + std::to_string(i) + (*role ? std::string(" (") + role + ")" : std::string());
}

// "inputs: input 0 (input) float16 [..], ...; input 1 (weight) ..."
std::string describe_inputs(const std::string& op, const std::vector<Tensor>& inputs) {
  std::ostringstream os;
  os << "inputs:";
  for (size_t i = 0; i < inputs.size(); ++i)
    os << (i ? ";" : "") << " " << input_label(op, i) << " " << describe_values(inputs[i]);
  return os.str();
}

// The same for a node's inputs at backward time: their values when the node kept
// its inputs (anomaly mode was on during the forward); otherwise shapes and dtypes from its edges.
std::string describe_inputs(const Node& node) {
  if (!node.anomaly_inputs.empty()) return describe_inputs(node.name, node.anomaly_inputs);
  std::ostringstream os;
  os << "inputs:";
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const InputEdge& e = node.inputs[i];
    os << (i ? ";" : "") << " " << input_label(node.name, i) << " ";
    if (e.defined) os << dtype_name(e.dtype) << " " << shape_str(e.shape);
    else os << "(none)";
  }
  os << " (values not kept: anomaly mode was off during the forward)";
  return os.str();
}

const char* kScalerNote =
    " (Under GradScaler an inf/NaN gradient is expected now and then: the scaler skips that step and halves "
    "the scale. Anomaly mode turns it into this error; use it to debug a diverging run, not while training.)";

}  // namespace

bool anomaly_mode_enabled() { return t_anomaly; }

DetectAnomalyGuard::DetectAnomalyGuard(bool enabled) : prev_(t_anomaly) { set_anomaly_mode(enabled); }
DetectAnomalyGuard::~DetectAnomalyGuard() { set_anomaly_mode(prev_); }

ValueSummary summarize_values(const Tensor& t) {
  HG_CHECK(t.defined(), "summarize_values: undefined tensor");
  if (t.is_cuda()) return summarize_values(t.copy_to(Device::CPU));  // only for messages: a host copy
  ValueSummary s;
  s.numel = t.numel();
  switch (t.dtype()) {
    case kFloat32: scan(t.data<float>(), s.numel, s); break;
    case kFloat64: scan(t.data<double>(), s.numel, s); break;
    case kFloat16: scan_half(t.data<uint16_t>(), s.numel, s); break;
    case kInt64: scan(t.data<int64_t>(), s.numel, s); break;
    case kBFloat16: scan_bfloat16(t.data<bfloat16_bits>(), s.numel, s); break;
  }
  if (s.nan + s.pos_inf + s.neg_inf == s.numel) s.min = s.max = std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::string describe_values(const Tensor& t) {
  if (!t.defined()) return "undefined";
  const ValueSummary s = summarize_values(t);
  std::ostringstream os;
  os << dtype_name(t.dtype()) << " " << shape_str(t.shape()) << ", ";
  if (s.numel == 0) os << "empty";
  else if (std::isnan(s.min)) os << "no finite value";
  else os << "finite range [" << num(s.min) << ", " << num(s.max) << "]";
  os << ", " << s.nan << " NaN, " << s.pos_inf << " +inf, " << s.neg_inf << " -inf";
  return os.str();
}

const char* input_role(const std::string& op, size_t i) {
  // Ops whose record() inputs are (input, weight, bias).
  static const char* const kWeighted[] = {"conv3d", "conv_transpose3d", "linear", "batch_norm", "instance_norm",
                                          "group_norm", "layer_norm"};
  static const char* const kWeightedRoles[] = {"input", "weight", "bias"};
  // Ops whose record() inputs are (a, b).
  static const char* const kBinary[] = {"add", "sub", "mul", "div", "matmul"};
  for (const char* w : kWeighted)
    if (op == w) return i < 3 ? kWeightedRoles[i] : "";
  for (const char* b : kBinary)
    if (op == b) return i == 0 ? "a" : i == 1 ? "b" : "";
  return "";
}

void check_forward_anomaly(const char* op, const Tensor& output, const std::vector<Tensor>& inputs) {
  if (!output.defined() || !is_floating(output.dtype()) || !any_nonfinite(output)) return;
  const ValueSummary s = summarize_values(output);
  std::vector<size_t> bad_inputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && any_nonfinite(inputs[i])) bad_inputs.push_back(i);
  std::ostringstream os;
  os << "anomaly mode: forward of " << op << " produced " << what_bad(s) << " in its output "
     << describe_values(output) << "; " << describe_inputs(op, inputs) << ". ";
  if (bad_inputs.empty()) {
    os << "Every input is finite, so " << op << " made the first non-finite value";
    if (output.dtype() == kFloat16) {
      os << " (float16 overflows to inf above 65504: ";
      if (const amp::OpRecord* r = amp::find_op_record(op))  // the precision table's row (autocast/autocast.h)
        os << r->name << " is on autocast's " << amp::cast_policy_name(r->policy) << " list (" << r->why
           << "); keep it in FP32 with amp::set_op_fp32(amp::OpKind::" << r->enum_name << ", true) / --fp32-op "
           << r->name;
      else
        os << op << " is not in autocast's table, so it ran in its inputs' dtype; move the op that made its FP16 "
              "input to FP32 (amp::set_op_fp32 / --fp32-op)";
      os << ", or scale its inputs down)";
    } else if (output.dtype() == kBFloat16) {
      os << " (bfloat16 shares float32's range, overflowing only above ~3.39e38: an overflow here is an FP32 "
            "overflow too, so look for a division by zero, a log of 0 or an exp of a large input)";
    } else
      os << " (a division by zero, a log of 0, or an overflow of " << dtype_name(output.dtype()) << ")";
  } else {
    os << input_label(op, bad_inputs[0]) << " already held non-finite values: they did not come from an op "
       << "seen in anomaly mode (a parameter, the data, or an op run before the guard)";
  }
  throw Error(os.str());
}

void check_backward_anomaly_incoming(const Node& node, const Tensor& grad_output) {
  if (!grad_output.defined() || !is_floating(grad_output.dtype()) || !any_nonfinite(grad_output)) return;
  const ValueSummary s = summarize_values(grad_output);
  throw Error("anomaly mode: the gradient flowing into backward of " + node.name + " holds " + what_bad(s) + ": " +
              describe_values(grad_output) +
              ". Every backward step before it produced finite gradients, so either the gradient passed to "
              "backward() was non-finite or the sum of this tensor's gradient contributions overflowed its dtype." +
              kScalerNote);
}

void check_backward_anomaly_outputs(const Node& node, const Tensor& grad_output, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || !is_floating(g.dtype()) || !any_nonfinite(g)) continue;
    const ValueSummary s = summarize_values(g);
    std::ostringstream os;
    os << "anomaly mode: backward of " << node.name << " produced " << what_bad(s) << " in "
       << input_label(node.name, i) << ": " << describe_values(g) << "; from the finite incoming gradient "
       << describe_values(grad_output) << "; forward " << describe_inputs(node) << "."
       << kScalerNote;
    throw Error(os.str());
  }
}

}  // namespace halfgrad::autograd
