// nonfinite_cuda_test.cpp - NaN, +inf and -inf through the CUDA ops, against the CPU op on the same
// inputs: the cases of tests/golden/nonfinite.json (the CPU matches PyTorch on them in
// tests/ops/nonfinite_test.cpp), each in float32 and float16, NCDHW and NDHWC where the case has a
// 5-D input. Every output and gradient must have its NaNs at the CPU's positions and its infinities
// at the CPU's positions with the CPU's signs; finite values are compared with a loose tolerance (the
// point here is where non-finite values go, the values themselves are checked by each op's own test).
// Plus the optimisers (AdamW, SGD with and without momentum) stepping on a NaN / inf gradient.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "optim/optim.h"
#include "tests/cuda/cuda_test_case.h"
#include "tests/golden.h"
#include "tests/ops/nonfinite_cases.h"

namespace halfgrad {
namespace {

using testing::GoldenCase;
using testing::load_golden;
using testing::NonfiniteConfig;
using testing::NonfiniteResult;
using testing::check_same_nonfinite;
using testing::has_5d_input;
using testing::run_nonfinite_case;

const char* format_name(MemoryFormat f) { return f == MemoryFormat::ChannelsLast3d ? "NDHWC" : "NCDHW"; }

void compare_case(const std::string& name, Dtype dt, MemoryFormat fmt) {
  const GoldenCase c = load_golden("nonfinite.json").at(name);
  const std::string what = name + " " + dtype_name(dt) + " " + format_name(fmt);
  INFO(what);
  const NonfiniteResult cpu = run_nonfinite_case(c, NonfiniteConfig{Device::CPU, dt, MemoryFormat::Contiguous});
  const NonfiniteResult gpu = run_nonfinite_case(c, NonfiniteConfig{Device::CUDA, dt, fmt});
  const double tol = dt == kFloat16 ? 2e-2 : 1e-4;
  for (const auto& [k, v] : cpu.outputs) check_same_nonfinite(gpu.outputs.at(k), v, tol, tol, what + " " + k);
  for (const auto& [k, v] : cpu.grads) {
    // A NaN weight: the CUDA dgrad is an implicit GEMM whose taps outside dy (padding, or between the
    // strided outputs) are zeros multiplied by the weight, so 0 * NaN spreads NaN over dx's border.
    // The CPU's stride-1 dgrad (a convolution of the zero-padded dy) does so too; the allowance covers
    // any difference in which zero taps the two form. PyTorch forms none (2.11 with cuDNN: NaN only
    // where the tap reaches), see tests/ops/nonfinite_test.cpp. NaN/inf in x or dy: exact positions.
    const bool spread = name == "conv3d_weight_nan" && k == "x";
    check_same_nonfinite(gpu.grads.at(k), v, tol, tol, what + " d" + k, spread);
  }
}

void compare_cases(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    const bool vol = has_5d_input(load_golden("nonfinite.json").at(n));
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
        if (f == MemoryFormat::ChannelsLast3d && !vol) continue;
        const std::string sub = n + " " + dtype_name(dt) + " " + format_name(f);
        SUBCASE(sub.c_str()) { compare_case(n, dt, f); }
      }
  }
}

CUDA_TEST_CASE("nonfinite cuda: conv3d / conv_transpose3d f32 and f16, NCDHW and NDHWC, NaN/inf in x, dy, weight = CPU") {
  compare_cases({"conv3d_k3_s1_p1_x", "conv3d_k3_s1_p1_gy", "conv3d_k3_s2_p1_x", "conv3d_k3_s2_p1_gy",
                 "conv3d_weight_nan", "conv_transpose3d_k2_s2_x", "conv_transpose3d_k2_s2_gy"});
}

CUDA_TEST_CASE("nonfinite cuda: batch_norm / instance_norm f32 and f16, NCDHW and NDHWC, NaN/inf in x, dy, running stats = CPU") {
  compare_cases({"batch_norm_train_x", "batch_norm_eval_x", "batch_norm_eval_running", "batch_norm_train_gy",
                 "instance_norm_x"});
}

CUDA_TEST_CASE("nonfinite cuda: relu, leaky_relu, max_pool3d, softmax, log_softmax f32 and f16 with NaN/inf = CPU") {
  compare_cases({"relu", "leaky_relu_0.01", "max_pool3d_k2_s2", "max_pool3d_k3_s1", "softmax_dim1", "log_softmax_dim1"});
}

CUDA_TEST_CASE("nonfinite cuda: cross_entropy, dice, segmentation_loss f32 and f16, NCDHW and NDHWC, NaN/inf logits = CPU") {
  compare_cases({"cross_entropy_all", "dice_loss_all", "unet_loss_all", "cross_entropy_neg_inf_other_class",
                 "dice_loss_neg_inf_other_class", "unet_loss_neg_inf_other_class", "cross_entropy_neg_inf_target",
                 "dice_loss_neg_inf_target", "unet_loss_neg_inf_target"});
}

CUDA_TEST_CASE("nonfinite cuda: sum, mean, argmax, matmul, linear, elementwise f32 and f16 with NaN/inf = CPU") {
  compare_cases({"sum_all", "sum_dims_2", "mean_dims_0_2", "sum_dims_2_gy", "sum_overflow", "argmax_dim1", "matmul_a",
                 "linear_x", "add", "sub", "mul", "div", "exp", "log", "pow_2", "pow_0"});
}

CUDA_TEST_CASE("nonfinite cuda: smooth activations, sqrt, clamp, elementwise losses f32 and f16 with NaN/inf = CPU") {
  compare_cases({"sigmoid", "tanh", "silu", "gelu", "gelu_tanh", "sqrt", "clamp_-1_2", "clamp_min_0", "mse_loss_none",
                 "mse_loss_mean", "l1_loss_none", "l1_loss_mean", "bce_with_logits_none", "bce_with_logits_mean"});
}

CUDA_TEST_CASE("nonfinite cuda: layer_norm, group_norm, avg pools, upsample f32 and f16, NCDHW and NDHWC, NaN/inf = CPU") {
  compare_cases({"layer_norm_x", "group_norm_x", "avg_pool3d_k2_s2", "avg_pool3d_k3_s1_p1", "adaptive_avg_pool3d_3x2x1",
                 "upsample_nearest3d", "upsample_trilinear3d_align0", "upsample_trilinear3d_align1"});
}

CUDA_TEST_CASE("nonfinite cuda: cast float32 -> float16 [12] on the device keeps NaN/inf and overflows at 65520 = CPU") {
  compare_case("cast_float16", kFloat32, MemoryFormat::Contiguous);
}

// One step on g1 (NaN at 1, +inf at 4), one on a finite g2; the CUDA parameter must equal the CPU's
// (NaN where it is NaN, the same infinities, and the finite elements to 1e-6).
template <typename MakeOpt>
void compare_optim(const char* name, MakeOpt make) {
  const GoldenCase c = load_golden("nonfinite.json").at("optim_adamw");
  Tensor pc = c.input("p").set_requires_grad(true);
  Tensor pg = c.input("p").copy_to(Device::CUDA).set_requires_grad(true);
  auto oc = make(pc);
  auto og = make(pg);
  for (const char* g : {"g1", "g2"}) {
    pc.set_grad(c.input(g));
    pg.set_grad(c.input(g).copy_to(Device::CUDA));
    oc->step();
    og->step();
    check_same_nonfinite(pg.copy_to(Device::CPU), pc, 1e-6, 1e-6, std::string(name) + " after the step on " + g);
  }
}

CUDA_TEST_CASE("nonfinite cuda: AdamW, SGD momentum, SGD f32 [6] stepping on a NaN and an inf grad = CPU") {
  compare_optim("adamw", [](Tensor& p) {
    return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions(1e-2).weight_decay(1e-2));
  });
  compare_optim("sgd momentum", [](Tensor& p) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions(1e-2).momentum(0.9));
  });
  compare_optim("sgd", [](Tensor& p) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions(1e-2));
  });
}

}  // namespace
}  // namespace halfgrad
