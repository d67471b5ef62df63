// nonfinite_cases.h - runs one case of tests/golden/nonfinite.json (tools/golden/make_nonfinite_golden.py)
// through halfgrad: the op named by the case, on its golden inputs (NaN / +inf / -inf planted), on a
// chosen device, dtype and memory format, then y.backward(gy). Shared by tests/ops/nonfinite_test.cpp
// (CPU float32 against PyTorch's values) and tests/cuda/nonfinite_cuda_test.cpp (CUDA against the CPU
// on the same inputs).
//
// run_nonfinite_case(c, cfg) returns every output and gradient the case's JSON has (by the JSON's
// names: "y", "running_mean", "index", ...; grads by input name) as CPU tensors. Floating inputs are
// cast to cfg.dtype (float16: NaN and inf stay, the finite golden values round); 5-D tensors take
// cfg.format on CUDA. max_pool3d's "indices" are not an output of the op: its dx, which PyTorch
// scatters through those indices, is compared instead. The optimiser and clip_grad_norm_ cases are
// run by the tests themselves.
#pragma once
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/golden.h"

namespace halfgrad::testing {

struct NonfiniteConfig {
  Device device = Device::CPU;
  Dtype dtype = kFloat32;
  MemoryFormat format = MemoryFormat::Contiguous;
};

struct NonfiniteResult {
  std::map<std::string, Tensor> outputs;  // "y" and the extra outputs, on the CPU
  std::map<std::string, Tensor> grads;    // by input name, on the CPU
};

/// A golden input (float32) as the tensor the op gets under `cfg`.
inline Tensor nonfinite_input(const GoldenCase& c, const std::string& name, const NonfiniteConfig& cfg,
                              bool channel_param = false) {
  Tensor t = c.input(name);
  if (t.dtype() == kInt64) return t.copy_to(cfg.device);
  // Per-channel parameters and running statistics stay float32 (the CUDA norms require it, and
  // PyTorch's mixed-precision models keep them so).
  if (!channel_param && cfg.dtype != kFloat32) t = t.cast_copy(cfg.dtype);
  t = t.copy_to(cfg.device);
  if (cfg.device == Device::CUDA && t.dim() == 5) t = t.format_copy(cfg.format);
  return t;
}

inline NonfiniteResult run_nonfinite_case(const GoldenCase& c, const NonfiniteConfig& cfg) {
  const std::string op = c.op();
  const std::vector<std::string> diff = c.grad_names();
  const auto& p = c.params();
  const bool channel_params = op == "batch_norm" || op == "instance_norm";
  std::map<std::string, Tensor> in;
  for (const std::string& n : c.input_names()) {
    if (n == "gy") continue;
    in[n] = nonfinite_input(c, n, cfg, channel_params && n != "x");
  }
  for (const std::string& n : diff) in.at(n).set_requires_grad(true);
  NonfiniteResult r;
  Tensor y;
  auto dims_of = [&]() {
    std::vector<int64_t> d;
    if (p.at("dims").is_null()) {
      for (int64_t i = 0; i < in.at("x").dim(); ++i) d.push_back(i);
    } else {
      d = p.at("dims").get<std::vector<int64_t>>();
    }
    return d;
  };
  if (op == "conv3d" || op == "conv_transpose3d") {
    const auto prm = ops::Conv3dParams().stride(p.at("stride").get<int64_t>()).padding(p.at("padding").get<int64_t>());
    y = op == "conv3d" ? ops::conv3d(in.at("x"), in.at("weight"), in.at("bias"), prm)
                       : ops::conv_transpose3d(in.at("x"), in.at("weight"), in.at("bias"), prm);
  } else if (op == "batch_norm") {
    Tensor rm = in.at("running_mean").clone(), rv = in.at("running_var").clone();
    y = ops::batch_norm(in.at("x"), rm, rv, in.at("weight"), in.at("bias"),
                        ops::BatchNormParams()
                            .training(p.at("training").get<bool>())
                            .momentum(p.at("momentum").get<double>())
                            .eps(p.at("eps").get<double>()));
    r.outputs["running_mean"] = rm.copy_to(Device::CPU);
    r.outputs["running_var"] = rv.copy_to(Device::CPU);
  } else if (op == "instance_norm") {
    y = ops::instance_norm(in.at("x"), in.at("weight"), in.at("bias"), p.at("eps").get<double>());
  } else if (op == "relu") {
    y = ops::relu(in.at("x"));
  } else if (op == "leaky_relu") {
    y = ops::leaky_relu(in.at("x"), p.at("negative_slope").get<double>());
  } else if (op == "max_pool3d") {
    y = ops::max_pool3d(in.at("x"), p.at("kernel").get<int64_t>(), p.at("stride").get<int64_t>());
  } else if (op == "softmax" || op == "log_softmax") {
    const int64_t dim = p.at("dim").get<int64_t>();
    y = op == "softmax" ? ops::softmax(in.at("x"), dim) : ops::log_softmax(in.at("x"), dim);
  } else if (op == "cross_entropy") {
    y = ops::cross_entropy(in.at("logits"), in.at("target"));
  } else if (op == "dice_loss") {
    y = ops::soft_dice_loss(in.at("logits"), in.at("target"), p.at("smooth").get<double>());
  } else if (op == "unet_loss") {
    y = ops::segmentation_loss(in.at("logits"), in.at("target"));
  } else if (op == "sum" || op == "mean") {
    y = op == "sum" ? ops::sum(in.at("x"), dims_of()) : ops::mean(in.at("x"), dims_of());
  } else if (op == "argmax") {
    y = ops::sum(in.at("x"));
    r.outputs["index"] = ops::argmax(in.at("x"), p.at("dim").get<int64_t>()).copy_to(Device::CPU);
  } else if (op == "matmul") {
    y = ops::matmul(in.at("a"), in.at("b"));
  } else if (op == "linear") {
    y = ops::linear(in.at("x"), in.at("weight"), in.at("bias"));
  } else if (op == "add" || op == "sub" || op == "mul" || op == "div") {
    const Tensor& a = in.at("a");
    const Tensor& b = in.at("b");
    y = op == "add" ? ops::add(a, b) : op == "sub" ? ops::sub(a, b) : op == "mul" ? ops::mul(a, b) : ops::div(a, b);
  } else if (op == "exp") {
    y = ops::exp(in.at("x"));
  } else if (op == "log") {
    y = ops::log(in.at("x"));
  } else if (op == "pow") {
    y = ops::pow(in.at("x"), p.at("exponent").get<double>());
  } else if (op == "sigmoid" || op == "tanh" || op == "silu") {
    y = op == "sigmoid" ? ops::sigmoid(in.at("x")) : op == "tanh" ? ops::tanh(in.at("x")) : ops::silu(in.at("x"));
  } else if (op == "gelu") {
    y = ops::gelu(in.at("x"), p.at("approximate") == "tanh" ? ops::GeluApproximate::Tanh : ops::GeluApproximate::None);
  } else if (op == "sqrt") {
    y = ops::sqrt(in.at("x"));
  } else if (op == "clamp") {
    const auto bound = [&](const char* k) {
      return p.at(k).is_null() ? std::optional<double>() : std::optional<double>(p.at(k).get<double>());
    };
    y = ops::clamp(in.at("x"), bound("min"), bound("max"));
  } else if (op == "mse_loss" || op == "l1_loss" || op == "bce_with_logits") {
    const std::string red = p.at("reduction");
    const ops::Reduction r = red == "none" ? ops::Reduction::None : red == "sum" ? ops::Reduction::Sum : ops::Reduction::Mean;
    const Tensor& x = in.at("input");
    const Tensor& t = in.at("target");
    y = op == "mse_loss"  ? ops::mse_loss(x, t, r)
        : op == "l1_loss" ? ops::l1_loss(x, t, r)
                          : ops::binary_cross_entropy_with_logits(x, t, Tensor(), Tensor(), r);
  } else if (op == "layer_norm") {
    y = ops::layer_norm(in.at("x"), p.at("normalized_shape").get<std::vector<int64_t>>(), in.at("weight"), in.at("bias"),
                        p.at("eps").get<double>());
  } else if (op == "group_norm") {
    y = ops::group_norm(in.at("x"), p.at("groups").get<int64_t>(), in.at("weight"), in.at("bias"),
                        p.at("eps").get<double>());
  } else if (op == "avg_pool3d") {
    y = ops::avg_pool3d(in.at("x"), p.at("kernel").get<int64_t>(), p.at("stride").get<int64_t>(),
                        p.at("padding").get<int64_t>());
  } else if (op == "adaptive_avg_pool3d") {
    const auto o = p.at("output_size").get<std::vector<int64_t>>();
    y = ops::adaptive_avg_pool3d(in.at("x"), {o[0], o[1], o[2]});
  } else if (op == "upsample_nearest3d" || op == "upsample_trilinear3d") {
    const auto o = p.at("size").get<std::vector<int64_t>>();
    y = op == "upsample_nearest3d" ? ops::upsample_nearest3d(in.at("x"), {o[0], o[1], o[2]})
                                   : ops::upsample_trilinear3d(in.at("x"), {o[0], o[1], o[2]}, p.at("align_corners").get<bool>());
  } else if (op == "cast") {
    y = in.at("x").to(kFloat16).to(kFloat32);
  } else {
    throw std::runtime_error("nonfinite: no runner for op \"" + op + "\" (" + c.where() + ")");
  }
  r.outputs["y"] = y.copy_to(Device::CPU);
  if (!diff.empty()) {
    Tensor gy = c.input("gy").cast_copy(y.dtype()).copy_to(y.device());
    if (y.device() == Device::CUDA && gy.dim() == 5) gy = gy.format_copy(y.memory_format());
    y.backward(gy);
    for (const std::string& n : diff) r.grads[n] = in.at(n).grad().copy_to(Device::CPU);
  }
  return r;
}

// got against want (CUDA against CPU, or float16 against float32): NaN exactly where want is NaN, +-inf exactly where want is, finite
// values within atol + rtol |want|. One assertion naming the first mismatch of each kind.
// nan_may_spread: got may also hold NaN where want is finite (see the conv3d weight case).
inline void check_same_nonfinite(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what,
                          bool nan_may_spread = false) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what << ": shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape()));
  const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  int64_t nan_bad = 0, inf_bad = 0, val_bad = 0, first = -1, want_nonfinite = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i])) {
      ok = std::isnan(g[i]);
      nan_bad += !ok;
    } else if (std::isinf(w[i])) {
      ok = g[i] == w[i];
      inf_bad += !ok;
    } else if (std::isnan(g[i])) {
      ok = nan_may_spread;
      nan_bad += !ok;
    } else if (std::isinf(g[i])) {
      ok = false;
      inf_bad += 1;
    } else {
      ok = std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
      val_bad += !ok;
    }
    want_nonfinite += !std::isfinite(w[i]);
    if (!ok && first < 0) first = static_cast<int64_t>(i);
  }
  CHECK_MESSAGE(nan_bad + inf_bad + val_bad == 0,
                what << ": " << nan_bad << " NaN and " << inf_bad << " inf mismatches, " << val_bad
                     << " finite values out of tolerance (rtol " << rtol << ", atol " << atol << ") of " << g.size()
                     << " (the reference has " << want_nonfinite << " non-finite); first at " << first << ": got "
                     << (first >= 0 ? g[first] : 0) << ", want " << (first >= 0 ? w[first] : 0));
}

/// Whether the case has a 5-D input (and so an NDHWC variant on CUDA).
inline bool has_5d_input(const GoldenCase& c) {
  for (const std::string& n : c.input_names())
    if (n != "gy" && c.input(n).dim() == 5) return true;
  return false;
}

}  // namespace halfgrad::testing
