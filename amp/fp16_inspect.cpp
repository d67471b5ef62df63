// fp16_inspect.cpp - FP16 field dumps and log2 weight histograms (see fp16_inspect.h).
#include "amp/fp16_inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/half.h"

namespace halfgrad::amp {

namespace {

std::string bits_str(unsigned v, int width) {
  std::string s(static_cast<size_t>(width), '0');
  for (int b = 0; b < width; ++b)
    if (v >> b & 1u) s[static_cast<size_t>(width - 1 - b)] = '1';
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void check_floating_tensor(const char* fn, const Tensor& t) {
  HG_CHECK(t.defined(), fn << ": undefined tensor");
  HG_CHECK(is_floating(t.dtype()), fn << ": needs a floating tensor, got " << dtype_name(t.dtype()) << " of shape "
                                      << shape_str(t.shape()));
}

// Every element of a floating tensor as double (FP16 / BF16 decoded exactly), without a copy of the tensor.
template <typename F>
void for_each_value(const Tensor& t, F f) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case kFloat32: { const float* p = t.data<float>(); for (int64_t i = 0; i < n; ++i) f(static_cast<double>(p[i])); break; }
    case kFloat64: { const double* p = t.data<double>(); for (int64_t i = 0; i < n; ++i) f(p[i]); break; }
    case kFloat16: {
      const uint16_t* p = t.data<uint16_t>();
      for (int64_t i = 0; i < n; ++i) f(static_cast<double>(half_bits_to_float(p[i])));
      break;
    }
    case kBFloat16: {
      const bfloat16_bits* p = t.data<bfloat16_bits>();
      for (int64_t i = 0; i < n; ++i) f(static_cast<double>(bfloat16_bits_to_float(p[i].bits)));
      break;
    }
    case kInt64: break;
  }
}

// What a value becomes in FP16: its class (of the rounded pattern).
HalfClass fp16_class_of(double v) { return decode_half(float_to_half_bits(static_cast<float>(v))).cls; }

}  // namespace

const char* half_class_name(HalfClass c) {
  switch (c) {
    case HalfClass::Zero: return "zero";
    case HalfClass::Subnormal: return "subnormal";
    case HalfClass::Normal: return "normal";
    case HalfClass::Inf: return "inf";
    case HalfClass::NaN: return "nan";
  }
  return "?";
}

int HalfFields::unbiased_exponent() const {
  if (cls == HalfClass::Inf || cls == HalfClass::NaN) return 16;
  return exponent == 0 ? -14 : exponent - 15;
}

HalfFields decode_half(uint16_t bits) {
  HalfFields f;
  f.bits = bits;
  f.sign = bits >> 15;
  f.exponent = (bits >> 10) & 0x1f;
  f.mantissa = bits & 0x3ff;
  f.value = half_bits_to_float(bits);
  if (f.exponent == 31) f.cls = f.mantissa ? HalfClass::NaN : HalfClass::Inf;
  else if (f.exponent == 0) f.cls = f.mantissa ? HalfClass::Subnormal : HalfClass::Zero;
  else f.cls = HalfClass::Normal;
  return f;
}

std::string half_dump(const Tensor& t, int64_t begin, int64_t count) {
  check_floating_tensor("half_dump", t);
  const int64_t n = t.numel();
  HG_CHECK(begin >= 0 && begin <= n, "half_dump: begin " << begin << " is outside [0, " << n << "] for a tensor of shape "
                                                          << shape_str(t.shape()));
  const int64_t end = std::min(n, begin + std::max<int64_t>(count, 0));
  const bool is_half = t.dtype() == kFloat16;
  std::ostringstream os;
  os << dtype_name(t.dtype()) << " " << shape_str(t.shape()) << ", elements [" << begin << ", " << end << ")"
     << (is_half ? "" : ", each rounded to float16 (nearest even)") << "\n";
  os << "   index  " << (is_half ? "" : "source value     ") << "bits    s | exp   | mantissa     decoded\n";
  for (int64_t i = begin; i < end; ++i) {
    const uint16_t bits = is_half ? t.data<uint16_t>()[i] : float_to_half_bits(static_cast<float>(t.item_at(i)));
    const HalfFields f = decode_half(bits);
    char head[32];
    std::snprintf(head, sizeof head, "[%6lld]  ", static_cast<long long>(i));
    os << head;
    if (!is_half) {
      std::string src = fmt("%-14.8g", t.item_at(i));
      os << src << " -> ";
    }
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%04x", bits);
    os << hex << "  " << f.sign << " | " << bits_str(static_cast<unsigned>(f.exponent), 5) << " | "
       << bits_str(static_cast<unsigned>(f.mantissa), 10) << "  = ";
    switch (f.cls) {
      case HalfClass::Normal:
        os << (f.sign ? "-" : "+") << "2^" << f.unbiased_exponent() << " * " << fmt("%.4f", 1.0 + f.mantissa / 1024.0)
           << " = " << fmt("%.7g", f.value);
        break;
      case HalfClass::Subnormal:
        os << (f.sign ? "-" : "+") << "2^-14 * " << fmt("%.4f", f.mantissa / 1024.0) << " = " << fmt("%.7g", f.value);
        break;
      case HalfClass::Zero: os << (f.sign ? "-0" : "+0"); break;
      case HalfClass::Inf: os << (f.sign ? "-inf" : "+inf"); break;
      case HalfClass::NaN: os << "NaN"; break;
    }
    os << "   " << half_class_name(f.cls) << "\n";
  }
  return os.str();
}

Log2Histogram log2_abs_histogram(const Tensor& t, int lo_exp, int hi_exp) {
  check_floating_tensor("log2_abs_histogram", t);
  HG_CHECK(lo_exp <= hi_exp, "log2_abs_histogram: lo_exp " << lo_exp << " > hi_exp " << hi_exp);
  Log2Histogram h;
  h.lo_exp = lo_exp;
  h.hi_exp = hi_exp;
  h.bins.assign(static_cast<size_t>(hi_exp - lo_exp + 1), 0);
  h.total = t.numel();
  for_each_value(t, [&h](double v) {
    if (!std::isfinite(v)) { ++h.nonfinite; return; }
    if (v == 0) { ++h.zeros; return; }
    int e = 0;
    std::frexp(v, &e);  // |v| = m * 2^e with m in [0.5, 1), so floor(log2 |v|) = e - 1, exactly
    --e;
    if (e < h.lo_exp) ++h.below;
    else if (e > h.hi_exp) ++h.above;
    else ++h.bins[static_cast<size_t>(e - h.lo_exp)];
  });
  return h;
}

const char* fp16_bin_region(int e) {
  if (e >= 16) return "overflow";   // >= 2^16 > 65504 (and [65520, 2^16) of bin 15 too)
  if (e >= -14) return "normal";
  if (e >= -24) return "subnormal";
  if (e == -25) return "tie";       // 2^-25 rounds to 0, (2^-25, 2^-24) to 2^-24
  return "zero";
}

static void check_same_bins(const char* fn, const Log2Histogram& a, const Log2Histogram& b) {
  HG_CHECK(a.lo_exp == b.lo_exp && a.hi_exp == b.hi_exp && a.bins.size() == b.bins.size(),
           fn << ": the histograms have different bins ([" << a.lo_exp << ", " << a.hi_exp << "] and [" << b.lo_exp
              << ", " << b.hi_exp << "])");
}

std::string compare_histograms_text(const std::string& title, const std::string& label_a, const Log2Histogram& a,
                                    const std::string& label_b, const Log2Histogram& b) {
  check_same_bins("compare_histograms_text", a, b);
  constexpr int kBarWidth = 24;  // characters for the largest fraction of either histogram
  auto frac = [](int64_t c, int64_t total) { return total ? static_cast<double>(c) / static_cast<double>(total) : 0.0; };
  struct Line { std::string label; int64_t ca, cb; const char* region; };
  std::vector<Line> lines;
  lines.push_back({"non-finite", a.nonfinite, b.nonfinite, ""});
  lines.push_back({"above 2^" + std::to_string(a.hi_exp + 1), a.above, b.above, ""});
  for (int e = a.hi_exp; e >= a.lo_exp; --e) {
    const size_t i = static_cast<size_t>(e - a.lo_exp);
    lines.push_back({"2^" + std::to_string(e), a.bins[i], b.bins[i], fp16_bin_region(e)});
  }
  lines.push_back({"below 2^" + std::to_string(a.lo_exp), a.below, b.below, "zero"});
  lines.push_back({"exact 0", a.zeros, b.zeros, ""});
  double top = 0;
  for (const Line& l : lines) top = std::max({top, frac(l.ca, a.total), frac(l.cb, b.total)});
  auto bar = [&](double f, char c) {
    const int w = top > 0 ? static_cast<int>(std::lround(kBarWidth * f / top)) : 0;
    std::string s(static_cast<size_t>(w), c);
    s.resize(kBarWidth, ' ');
    return s;
  };
  std::ostringstream os;
  os << title << ": floor(log2 |x|), '#' = " << label_a << " (" << a.total << " values), '=' = " << label_b << " ("
     << b.total << " values)\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-12s %10s %8s %10s %8s  %-*s %-*s %s\n", "bin", "count A", "frac A", "count B",
                "frac B", kBarWidth, "A", kBarWidth, "B", "fp16");
  os << buf;
  for (const Line& l : lines) {
    if (l.ca == 0 && l.cb == 0) continue;
    std::snprintf(buf, sizeof buf, "%-12s %10lld %8.4f %10lld %8.4f  %s %s %s\n", l.label.c_str(),
                  static_cast<long long>(l.ca), frac(l.ca, a.total), static_cast<long long>(l.cb), frac(l.cb, b.total),
                  bar(frac(l.ca, a.total), '#').c_str(), bar(frac(l.cb, b.total), '=').c_str(), l.region);
    os << buf;
  }
  return os.str();
}

void write_histograms_csv(const std::string& path, const Log2Histogram& a, const Log2Histogram& b) {
  check_same_bins("write_histograms_csv", a, b);
  std::ofstream out(path);
  HG_CHECK(out.good(), "write_histograms_csv: cannot open '" << path << "' for writing");
  auto frac = [](int64_t c, int64_t total) { return total ? static_cast<double>(c) / static_cast<double>(total) : 0.0; };
  out.precision(8);
  out << "bin,log2_lo,value_lo,fp16_region,count_a,frac_a,count_b,frac_b\n";
  for (int e = a.lo_exp; e <= a.hi_exp; ++e) {
    const size_t i = static_cast<size_t>(e - a.lo_exp);
    out << "2^" << e << "," << e << "," << std::ldexp(1.0, e) << "," << fp16_bin_region(e) << "," << a.bins[i] << ","
        << frac(a.bins[i], a.total) << "," << b.bins[i] << "," << frac(b.bins[i], b.total) << "\n";
  }
  const std::pair<const char*, std::pair<int64_t, int64_t>> extra[] = {
      {"zero", {a.zeros, b.zeros}}, {"below", {a.below, b.below}}, {"above", {a.above, b.above}},
      {"nonfinite", {a.nonfinite, b.nonfinite}}};
  for (const auto& [name, c] : extra)
    out << name << ",,,," << c.first << "," << frac(c.first, a.total) << "," << c.second << ","
        << frac(c.second, b.total) << "\n";
  out.flush();
  HG_CHECK(out.good(), "write_histograms_csv: writing '" << path << "' failed");
}

namespace {

// Where a tensor's values land in FP16.
struct Fp16Occupancy {
  double max_abs = 0;
  double subnormal_frac = 0;  // of nonzero elements
  double zero_frac = 0;       // of nonzero elements, rounding to 0 in FP16
};

Fp16Occupancy fp16_occupancy(const Tensor& t) {
  Fp16Occupancy m;
  int64_t nonzero = 0, sub = 0, zero = 0;
  for_each_value(t, [&](double v) {
    if (!std::isfinite(v) || v == 0) return;
    m.max_abs = std::max(m.max_abs, std::fabs(v));
    ++nonzero;
    const HalfClass c = fp16_class_of(v);
    if (c == HalfClass::Subnormal) ++sub;
    else if (c == HalfClass::Zero) ++zero;
  });
  if (nonzero) {
    m.subnormal_frac = static_cast<double>(sub) / static_cast<double>(nonzero);
    m.zero_frac = static_cast<double>(zero) / static_cast<double>(nonzero);
  }
  return m;
}

}  // namespace

std::vector<TensorComparison> compare_checkpoints(const nn::CheckpointState& a, const nn::CheckpointState& b,
                                                  std::vector<std::string>* skipped) {
  std::vector<TensorComparison> rows;
  auto find = [](const nn::NamedTensors& list, const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : list)
      if (n == name) return &t;
    return nullptr;
  };
  for (const auto& [name, ta] : a.parameters) {
    const Tensor* tb = find(b.parameters, name);
    if (!tb) {
      if (skipped) skipped->push_back(name + ": only in the first checkpoint");
      continue;
    }
    if (ta.shape() != tb->shape() || !is_floating(ta.dtype()) || !is_floating(tb->dtype())) {
      if (skipped)
        skipped->push_back(name + ": " + dtype_name(ta.dtype()) + " " + shape_str(ta.shape()) + " vs " +
                           dtype_name(tb->dtype()) + " " + shape_str(tb->shape()));
      continue;
    }
    TensorComparison r;
    r.name = name;
    r.shape = ta.shape();
    r.dtype_a = ta.dtype();
    r.dtype_b = tb->dtype();
    const Fp16Occupancy ma = fp16_occupancy(ta), mb = fp16_occupancy(*tb);
    r.max_abs_a = ma.max_abs;
    r.max_abs_b = mb.max_abs;
    r.fp16_subnormal_frac_a = ma.subnormal_frac;
    r.fp16_subnormal_frac_b = mb.subnormal_frac;
    r.fp16_zero_frac_a = ma.zero_frac;
    r.fp16_zero_frac_b = mb.zero_frac;
    const std::vector<double> va = ta.to_double_vector(), vb = tb->to_double_vector();
    double diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      const double d = va[i] - vb[i];
      r.max_abs_diff = std::max(r.max_abs_diff, std::fabs(d));
      diff2 += d * d;
      norm2 += va[i] * va[i];
    }
    r.rel_l2_diff = norm2 > 0 ? std::sqrt(diff2 / norm2) : (diff2 > 0 ? INFINITY : 0.0);
    rows.push_back(r);
  }
  if (skipped)
    for (const auto& [name, tb] : b.parameters)
      if (!find(a.parameters, name)) skipped->push_back(name + ": only in the second checkpoint");
  return rows;
}

std::string comparison_table(const std::vector<TensorComparison>& rows) {
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-28s %-18s %10s %10s %10s %10s %9s %9s\n", "parameter", "shape", "max|A|", "max|B|",
                "max|A-B|", "rel L2", "sub16 A", "sub16 B");
  os << buf;
  for (const TensorComparison& r : rows) {
    std::snprintf(buf, sizeof buf, "%-28s %-18s %10.4g %10.4g %10.4g %10.4g %9.5f %9.5f\n", r.name.c_str(),
                  shape_str(r.shape).c_str(), r.max_abs_a, r.max_abs_b, r.max_abs_diff, r.rel_l2_diff,
                  r.fp16_subnormal_frac_a, r.fp16_subnormal_frac_b);
    os << buf;
  }
  os << "(sub16: fraction of nonzero weights that would be FP16 subnormals, i.e. keep fewer than 10 mantissa bits)\n";
  return os.str();
}

Tensor find_checkpoint_tensor(const nn::CheckpointState& state, const std::string& name) {
  for (const nn::NamedTensors* list : {&state.parameters, &state.buffers, &state.extra_tensors})
    for (const auto& [n, t] : *list)
      if (n == name) return t;
  std::ostringstream known;
  size_t shown = 0;
  for (const auto& [n, t] : state.parameters) {
    if (shown++ == 12) { known << ", ..."; break; }
    known << (shown > 1 ? ", " : "") << n;
  }
  HG_FAIL("find_checkpoint_tensor: no tensor named '" << name << "' in the checkpoint; its parameters are: "
                                                      << known.str());
  return Tensor();  // unreachable
}

}  // namespace halfgrad::amp
