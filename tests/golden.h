// golden.h - reading PyTorch's golden values (tests/golden/*.json) and comparing tensors to them.
//
// The files are written by tools/golden/make_golden.py (run as `/usr/bin/python3
// tools/golden/make_golden.py`) and tools/golden/make_grad_scaler_golden.py; each file's
// "generator" field repeats the command. Layout of a file:
//
//   {"generator": ..., "torch": "<version>",
//    "cases": {"<case>": {"op": "conv3d", "params": {"stride": 1, ...},
//                         "inputs":  {"x": {"shape": [2,2,5,6,7], "dtype": "float32", "data": [...]}, "gy": ...},
//                         "outputs": {"y": ...},
//                         "grads":   {"x": ..., "weight": ...}}}}
//
// Conventions: data is flat row-major (NCDHW); shape [] is a 0-d tensor; "y" is the differentiated
// output and the input "gy" its cotangent, so grads[name] is what y.backward(gy) leaves in name.grad.
// float32 numbers are written so that decimal -> double -> float gives the float32 back exactly;
// a non-finite float32 is the string "nan", "inf" or "-inf" (tests/golden/nonfinite.json, written by
// tools/golden/make_nonfinite_golden.py).
// Cases named "..._f64" were computed in float64 from the same (float32-exact) inputs, which are
// stored as float32: load them with `c.input("x", kFloat64)`.
//
// Usage:
//   auto c = load_golden("conv.json").at("conv3d_k3_s1_p1_bias");
//   Tensor x = c.input("x");  x.set_requires_grad(true);  (likewise weight, bias)
//   Tensor y = ops::conv3d(x, w, b, ...);  y.backward(c.input("gy"));
//   check_close(y, c.output("y"), tolerance_for(kFloat32), "conv3d y");
//   check_close(x.grad(), c.grad("x"), tolerance_for(kFloat32), "conv3d dx");
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

#ifndef HALFGRAD_SOURCE_DIR
#error "HALFGRAD_SOURCE_DIR must be defined (tests/CMakeLists.txt defines it for halfgrad_tests)"
#endif

namespace halfgrad::testing {

/// Absolute and relative tolerance: |actual - expected| <= atol + rtol * |expected| (STYLE habit 9).
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

/// The tolerance a result computed in `d` is held to against a reference.
inline Tolerance tolerance_for(Dtype d) {
  switch (d) {
    case kFloat32: return {1e-5, 1e-4};
    case kFloat16: return {1e-3, 1e-2};
    case kBFloat16: return {8e-3, 8e-2};  // 8 significant bits to FP16's 11: 8x its rounding
    case kFloat64: return {1e-10, 1e-8};
    case kInt64: return {0, 0};
  }
  return {0, 0};
}

/// Dtype from the file's name for it: "float32", "float16", "float64", "int64".
inline Dtype golden_dtype(const std::string& name) {
  if (name == "float32") return kFloat32;
  if (name == "float64") return kFloat64;
  if (name == "float16") return kFloat16;
  if (name == "int64") return kInt64;
  throw std::runtime_error("golden: unknown dtype \"" + name + "\"");
}

/// The shape of a golden tensor object ({"shape", "dtype", "data"}).
inline Shape golden_shape(const nlohmann::json& t) { return t.at("shape").get<Shape>(); }

/// A golden tensor object as a Tensor, in the file's dtype or converted to `as`. float32 data read as
/// float64 keeps the exact float32 values; int64 data can be read as a floating type.
inline Tensor golden_tensor(const nlohmann::json& t, std::optional<Dtype> as = std::nullopt) {
  const Shape shape = golden_shape(t);
  const Dtype file = golden_dtype(t.at("dtype").get<std::string>());
  const Dtype want = as.value_or(file);
  const nlohmann::json& data = t.at("data");
  if (static_cast<int64_t>(data.size()) != shape_numel(shape))
    throw std::runtime_error("golden: " + std::to_string(data.size()) + " values for shape " + shape_str(shape));
  if (file == kInt64) {
    std::vector<int64_t> v = data.get<std::vector<int64_t>>();
    if (want == kInt64) return Tensor::from_labels(v, shape);
    return Tensor::from_vector(std::vector<double>(v.begin(), v.end()), shape, want);
  }
  if (want == kInt64) throw std::runtime_error("golden: floating data cannot be read as int64");
  if (file == kFloat32) {
    // Each number parses to the double nearest its decimal; the cast to float gives the float32
    // value PyTorch had exactly (make_golden.py checks this for every number it writes).
    // nonfinite.json writes the values JSON has no number for as "nan", "inf" and "-inf".
    std::vector<float> v;
    v.reserve(data.size());
    for (const auto& x : data) {
      if (!x.is_string()) {
        v.push_back(static_cast<float>(x.get<double>()));
        continue;
      }
      const std::string s = x.get<std::string>();
      if (s == "nan") v.push_back(std::numeric_limits<float>::quiet_NaN());
      else if (s == "inf") v.push_back(std::numeric_limits<float>::infinity());
      else if (s == "-inf") v.push_back(-std::numeric_limits<float>::infinity());
      else throw std::runtime_error("golden: \"" + s + "\" is not a number (expected a number, \"nan\", \"inf\" or \"-inf\")");
    }
    return Tensor::from_vector(v, shape, want);
  }
  return Tensor::from_vector(data.get<std::vector<double>>(), shape, want);
}

/// One case of a golden file.
class GoldenCase {
 public:
  GoldenCase(std::string file, std::string name, std::shared_ptr<const nlohmann::json> doc,
             const nlohmann::json* j)
      : file_(std::move(file)), name_(std::move(name)), doc_(std::move(doc)), j_(j) {}

  const std::string& name() const { return name_; }
  std::string op() const { return j_->at("op").get<std::string>(); }
  const nlohmann::json& json() const { return *j_; }
  const nlohmann::json& params() const { return j_->at("params"); }
  /// params[key] converted to T, e.g. `c.param<int>("stride")`.
  template <typename T>
  T param(const std::string& key) const { return section("params", key).get<T>(); }

  bool has_input(const std::string& n) const { return has("inputs", n); }
  bool has_output(const std::string& n) const { return has("outputs", n); }
  bool has_grad(const std::string& n) const { return has("grads", n); }
  std::vector<std::string> input_names() const { return names("inputs"); }
  std::vector<std::string> output_names() const { return names("outputs"); }
  std::vector<std::string> grad_names() const { return names("grads"); }

  Tensor input(const std::string& n, std::optional<Dtype> as = std::nullopt) const {
    return golden_tensor(section("inputs", n), as);
  }
  Tensor output(const std::string& n, std::optional<Dtype> as = std::nullopt) const {
    return golden_tensor(section("outputs", n), as);
  }
  Tensor grad(const std::string& n, std::optional<Dtype> as = std::nullopt) const {
    return golden_tensor(section("grads", n), as);
  }

  /// "conv.json:conv3d_k3_s1_p1_bias", for messages.
  std::string where() const { return file_ + ":" + name_; }

 private:
  bool has(const char* sec, const std::string& n) const {
    return j_->contains(sec) && j_->at(sec).contains(n);
  }
  std::vector<std::string> names(const char* sec) const {
    std::vector<std::string> out;
    if (j_->contains(sec))
      for (auto it = j_->at(sec).begin(); it != j_->at(sec).end(); ++it) out.push_back(it.key());
    return out;
  }
  const nlohmann::json& section(const char* sec, const std::string& n) const {
    if (!has(sec, n)) throw std::runtime_error("golden: " + where() + " has no " + sec + "." + n);
    return j_->at(sec).at(n);
  }

  std::string file_, name_;
  std::shared_ptr<const nlohmann::json> doc_;  // keeps *j_ alive
  const nlohmann::json* j_;
};

/// A parsed golden file.
class GoldenFile {
 public:
  GoldenFile(std::string name, std::shared_ptr<const nlohmann::json> doc)
      : name_(std::move(name)), doc_(std::move(doc)) {}

  const std::string& name() const { return name_; }
  const nlohmann::json& json() const { return *doc_; }
  std::string torch_version() const { return doc_->at("torch").get<std::string>(); }
  std::string generator() const { return doc_->at("generator").get<std::string>(); }
  bool has_case(const std::string& c) const { return doc_->at("cases").contains(c); }
  std::vector<std::string> case_names() const {
    std::vector<std::string> out;
    for (auto it = doc_->at("cases").begin(); it != doc_->at("cases").end(); ++it) out.push_back(it.key());
    return out;
  }
  /// The case called `c`; throws (naming the file) if there is none.
  GoldenCase at(const std::string& c) const {
    if (!has_case(c)) throw std::runtime_error("golden: " + name_ + " has no case " + c);
    return GoldenCase(name_, c, doc_, &doc_->at("cases").at(c));
  }
  GoldenCase operator[](const std::string& c) const { return at(c); }

 private:
  std::string name_;
  std::shared_ptr<const nlohmann::json> doc_;
};

/// Parse HALFGRAD_SOURCE_DIR/tests/golden/<name> (each file once per process).
inline GoldenFile load_golden(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const nlohmann::json>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    const std::string path = std::string(HALFGRAD_SOURCE_DIR) + "/tests/golden/" + name;
    std::ifstream in(path);
    if (!in) throw std::runtime_error("golden: cannot open " + path);
    auto doc = std::make_shared<nlohmann::json>();
    try {
      in >> *doc;
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("golden: cannot parse " + path + ": " + e.what());
    }
    it = cache.emplace(name, std::move(doc)).first;
  }
  return GoldenFile(name, it->second);
}

namespace detail {
inline std::string index_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::ostringstream s;
  s << "[";
  for (size_t d = 0; d < idx.size(); ++d) s << (d ? ", " : "") << idx[d];
  s << "]";
  return s.str();
}
}  // namespace detail

/// Check |actual - expected| <= atol + rtol * |expected| element-wise (NaN must match NaN, inf must
/// match exactly). One doctest assertion; on failure it names `what`, both shapes and dtypes, how
/// many elements failed, and the worst element (flat and multi-index, both values).
inline void check_close(const Tensor& actual, const Tensor& expected, double atol, double rtol,
                        const std::string& what) {
  if (!actual.defined() || !expected.defined()) {
    FAIL_CHECK(what << ": " << (actual.defined() ? "expected" : "actual") << " tensor is undefined");
    return;
  }
  std::ostringstream head;
  head << what << ": actual " << shape_str(actual.shape()) << " " << dtype_name(actual.dtype())
       << ", expected " << shape_str(expected.shape()) << " " << dtype_name(expected.dtype());
  if (actual.shape() != expected.shape()) {
    FAIL_CHECK(head.str() << ": shapes differ");
    return;
  }
  const std::vector<double> a = actual.to_double_vector();
  const std::vector<double> e = expected.to_double_vector();
  int64_t bad = 0, worst = -1;
  double worst_ratio = -1;  // |a - e| / (atol + rtol |e|), infinite for NaN / inf mismatches
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok;
    double ratio;
    if (std::isnan(e[i]) || std::isnan(a[i]) || std::isinf(e[i]) || std::isinf(a[i])) {
      ok = (std::isnan(e[i]) && std::isnan(a[i])) || a[i] == e[i];
      ratio = ok ? 0 : INFINITY;
    } else {
      const double diff = std::fabs(a[i] - e[i]);
      const double allowed = atol + rtol * std::fabs(e[i]);
      ok = diff <= allowed;
      ratio = allowed > 0 ? diff / allowed : (diff > 0 ? INFINITY : 0);
    }
    if (!ok) ++bad;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = static_cast<int64_t>(i);
  }
  std::ostringstream msg;
  const bool f64 = actual.dtype() == kFloat64 || expected.dtype() == kFloat64;
  msg.precision(f64 ? 17 : 9);
  msg << head.str() << ": " << bad << " of " << a.size() << " elements outside atol " << atol << " + rtol "
      << rtol << " * |expected|";
  if (worst >= 0)
    msg << "; worst at " << worst << " " << detail::index_str(worst, expected.shape()) << ": actual "
        << a[worst] << ", expected " << e[worst] << ", |diff| " << std::fabs(a[worst] - e[worst]);
  CHECK_MESSAGE(bad == 0, msg.str());
}

inline void check_close(const Tensor& actual, const Tensor& expected, Tolerance tol, const std::string& what) {
  check_close(actual, expected, tol.atol, tol.rtol, what);
}

}  // namespace halfgrad::testing
