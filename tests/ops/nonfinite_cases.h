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
#include <map>
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

}  // namespace halfgrad::testing
