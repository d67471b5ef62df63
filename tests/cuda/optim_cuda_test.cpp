// The fused CUDA optimizers (optim/adamw_cuda.cu, optim/sgd_cuda.cu), clip_grad_norm_ on CUDA
// (optim/clip_grad_cuda.cu), CUDA optimizer state in state_dict, and zero_grad on CUDA parameters.
// The reference is always the CPU optimizer run on the same initial values and the same gradients:
// each step draws fresh N(0, 1) gradients, given to the CPU parameters as they are and to the CUDA
// ones as device copies. FP32 parameters and FP32 masters must agree to 2e-5 relative after 100 steps
// (the update is elementwise, so the only differences are FMA contractions, a few ulps of an update
// that is ~lr); FP16 parameters, each the rounding of its master, to one half ulp (2^-10 relative).
#include "tests/cuda/cuda_test.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/safetensors.h"
#include "nn/module.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

using namespace halfgrad;
using testing::check_close;
using testing::random_tensor;
using testing::to_cuda;

namespace {

// The update kernels are compiled without FMA contraction (-fmad=false, as the CPU build), so most
// steps agree bit for bit; sqrt and division may still round differently in the last bit, and over
// 100 steps such differences grow to a few 1e-6 relative.
constexpr double kMasterRtol = 2e-5, kMasterAtol = 1e-6;

// One parameter of a test model: shape, parameter dtype, gradient dtype, layout on CUDA.
struct ParamSpec {
  Shape shape;
  Dtype dtype;
  Dtype grad_dtype;
  MemoryFormat format = MemoryFormat::Contiguous;
};

// A U-Net-like mix: a conv weight (channels-last on CUDA, its gradient contiguous), biases of a few
// elements, a tensor longer than one 65536-element chunk, FP16 parameters with FP16 and FP32 grads.
std::vector<ParamSpec> model_specs() {
  return {{{8, 4, 3, 3, 3}, kFloat32, kFloat32, MemoryFormat::ChannelsLast3d},
          {{8}, kFloat32, kFloat32},
          {{70001}, kFloat32, kFloat32},
          {{16, 8, 3, 3, 3}, kFloat16, kFloat16, MemoryFormat::ChannelsLast3d},
          {{16}, kFloat16, kFloat16},
          {{66000}, kFloat16, kFloat32},
          {{3}, kFloat16, kFloat16}};
}

struct Twin {
  std::vector<Tensor> cpu, gpu;
};

// The same random initial values on the CPU (contiguous) and on CUDA (in spec.format).
Twin make_params(const std::vector<ParamSpec>& specs, uint64_t seed) {
  Twin t;
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor init = random_tensor(specs[i].shape, seed + i, specs[i].dtype);
    t.cpu.push_back(init.clone().set_requires_grad(true));
    t.gpu.push_back(to_cuda(init, specs[i].format).clone().set_requires_grad(true));
  }
  return t;
}

// Fresh N(0, 1) gradients (seeded by step) for both; CUDA gradients contiguous even where the
// parameter is channels-last (the optimizer converts). Parameters listed in `skip` get none.
void set_grads(const std::vector<ParamSpec>& specs, Twin& t, uint64_t step, const std::vector<size_t>& skip = {}) {
  for (size_t i = 0; i < specs.size(); ++i) {
    bool skipped = false;
    for (size_t s : skip) skipped = skipped || s == i;
    if (skipped) continue;
    Tensor g = random_tensor(specs[i].shape, 1000 * step + i + 7, specs[i].grad_dtype);
    t.cpu[i].set_grad(g);
    t.gpu[i].set_grad(t.gpu[i].is_cuda() ? g.copy_to(Device::CUDA) : g.clone());  // never the CPU twin's own tensor
  }
}

void check_params(const Twin& t, const optim::Optimizer& cpu_opt, const optim::Optimizer& gpu_opt, const std::string& what) {
  for (size_t i = 0; i < t.cpu.size(); ++i) {
    const std::string name = what + ", parameter " + std::to_string(i) + " " + dtype_name(t.cpu[i].dtype()) + " " +
                             shape_str(t.cpu[i].shape());
    CHECK(t.gpu[i].dtype() == t.cpu[i].dtype());
    if (t.cpu[i].dtype() == kFloat32) {
      check_close(t.gpu[i], t.cpu[i], kMasterRtol, kMasterAtol, name);
    } else {
      check_close(t.gpu[i], t.cpu[i], 2.0 / 1024, 4 * kHalfMinSubnormal, name);  // a master differing in its last bits can round to the neighbouring half
      const auto* cs = cpu_opt.param_state(t.cpu[i]);
      const auto* gs = gpu_opt.param_state(t.gpu[i]);
      REQUIRE((cs == nullptr) == (gs == nullptr));
      if (cs != nullptr && cs->master.defined()) {
        REQUIRE(gs->master.defined());
        CHECK(gs->master.device() == t.gpu[i].device());
        CHECK(gs->master.memory_format() == t.gpu[i].memory_format());
        check_close(gs->master, cs->master, kMasterRtol, kMasterAtol, name + " (master)");
      }
    }
  }
}

}  // namespace

// ---- AdamW ------------------------------------------------------------------------------------------

CUDA_TEST_CASE("optim cuda: AdamW f32 and f16 (FP32 masters) params, f32/f16 grads, NCDHW/NDHWC, 100 steps = CPU") {
  const auto specs = model_specs();
  Twin t = make_params(specs, 11);
  const auto o = optim::AdamWOptions().lr(1e-3).weight_decay(1e-2);
  optim::AdamW cpu(t.cpu, o), gpu(t.gpu, o);
  for (int step = 1; step <= 100; ++step) {
    set_grads(specs, t, step);
    cpu.step();
    gpu.step();
  }
  check_params(t, cpu, gpu, "AdamW 100 steps");
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto* cs = dynamic_cast<const optim::AdamWParamState*>(cpu.param_state(t.cpu[i]));
    const auto* gs = dynamic_cast<const optim::AdamWParamState*>(gpu.param_state(t.gpu[i]));
    REQUIRE(gs != nullptr);
    CHECK(gs->step == 100);
    CHECK(gs->exp_avg.is_cuda());
    CHECK(gs->exp_avg.dtype() == kFloat32);
    check_close(gs->exp_avg, cs->exp_avg, kMasterRtol, kMasterAtol, "exp_avg " + std::to_string(i));
    check_close(gs->exp_avg_sq, cs->exp_avg_sq, kMasterRtol, 1e-9, "exp_avg_sq " + std::to_string(i));
  }
}

CUDA_TEST_CASE("optim cuda: AdamW param groups with their own lr/wd/betas/eps in one launch, a param without grad") {
  const auto specs = model_specs();
  Twin t = make_params(specs, 23);
  auto groups = [](const std::vector<Tensor>& p) {
    std::vector<optim::OptimizerParamGroup> g;
    g.emplace_back(std::vector<Tensor>{p[0], p[1], p[2]});  // the defaults
    g.emplace_back(std::vector<Tensor>{p[3], p[4]},
                   std::make_unique<optim::AdamWOptions>(optim::AdamWOptions(3e-3).weight_decay(0.1).betas({0.8, 0.99})));
    g.emplace_back(std::vector<Tensor>{p[5], p[6]},
                   std::make_unique<optim::AdamWOptions>(optim::AdamWOptions(5e-4).weight_decay(0.0).eps(1e-6)));
    return g;
  };
  const auto defaults = optim::AdamWOptions(1e-3);
  optim::AdamW cpu(groups(t.cpu), defaults), gpu(groups(t.gpu), defaults);
  const Tensor untouched = t.gpu[6].clone();
  for (int step = 1; step <= 100; ++step) {
    set_grads(specs, t, step, {6});  // parameter 6 never has a gradient
    if (step == 50) {  // a scheduler's change of one group's lr
      cpu.param_groups()[1].options().set_lr(1e-3);
      gpu.param_groups()[1].options().set_lr(1e-3);
    }
    cpu.step();
    gpu.step();
  }
  check_params(t, cpu, gpu, "AdamW groups");
  CHECK(gpu.param_state(t.gpu[6]) == nullptr);
  check_close(t.gpu[6], untouched, 0.0, 0.0, "parameter without gradient");
}

CUDA_TEST_CASE("optim cuda: AdamW pure FP16 (master_weights false, f16 moments) = CPU over 20 steps") {
  const std::vector<ParamSpec> specs = {{{4096}, kFloat16, kFloat16}, {{8, 4, 3, 3, 3}, kFloat16, kFloat16, MemoryFormat::ChannelsLast3d}};
  Twin t = make_params(specs, 31);
  const auto o = optim::AdamWOptions(1e-3).eps(1e-4).master_weights(false);
  optim::AdamW cpu(t.cpu, o), gpu(t.gpu, o);
  for (int step = 1; step <= 20; ++step) {
    set_grads(specs, t, step);
    cpu.step();
    gpu.step();
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto* gs = dynamic_cast<const optim::AdamWParamState*>(gpu.param_state(t.gpu[i]));
    CHECK(!gs->master.defined());
    CHECK(gs->exp_avg.dtype() == kFloat16);
    // Each of p, m, v is rounded to half every step; a float ulp apart on either side can round to
    // neighbouring halves, so allow a few half ulps.
    check_close(t.gpu[i], t.cpu[i], 4.0 / 1024, 1e-4, "pure FP16 parameter " + std::to_string(i));
  }
}

CUDA_TEST_CASE("optim cuda: AdamW found_inf device flag skips the update; undo_skipped_step restores the step count") {
  const auto specs = model_specs();
  Twin t = make_params(specs, 41);
  optim::AdamW cpu(t.cpu), gpu(t.gpu);
  std::vector<Tensor> before;
  for (const Tensor& p : t.gpu) before.push_back(p.clone());
  set_grads(specs, t, 1);
  Tensor flag = Tensor::full({1}, 1.0, kFloat32, Device::CUDA);
  gpu.set_found_inf(flag);
  gpu.step();  // skipped on the device
  gpu.set_found_inf(Tensor());
  for (size_t i = 0; i < t.gpu.size(); ++i) check_close(t.gpu[i], before[i], 0.0, 0.0, "skipped parameter " + std::to_string(i));
  CHECK(dynamic_cast<const optim::AdamWParamState*>(gpu.param_state(t.gpu[0]))->step == 1);
  gpu.undo_skipped_step();
  CHECK(dynamic_cast<const optim::AdamWParamState*>(gpu.param_state(t.gpu[0]))->step == 0);
  // A zero flag lets the update through; it is then the CPU's first step.
  flag.fill_(0.0);
  gpu.set_found_inf(flag);
  gpu.step();
  gpu.set_found_inf(Tensor());
  cpu.step();
  check_params(t, cpu, gpu, "after a skipped and an applied step");
  // A CPU parameter cannot read the flag: refused before anything changes.
  Tensor cpu_param = Tensor::ones({4}).set_requires_grad(true);
  cpu_param.set_grad(Tensor::ones({4}));
  optim::AdamW mixed({t.gpu[0], cpu_param});
  mixed.set_found_inf(flag);
  CHECK_THROWS_AS(mixed.step(), Error);
  CHECK(mixed.param_state(cpu_param) == nullptr);
}

CUDA_TEST_CASE("optim cuda: AdamW with CPU and CUDA params in one optimizer = CPU") {
  const auto specs = model_specs();
  Twin t = make_params(specs, 53);
  t.gpu[1] = t.cpu[1].clone().set_requires_grad(true);  // a CPU parameter among CUDA ones
  t.gpu[4] = t.cpu[4].clone().set_requires_grad(true);  // and an FP16 one
  optim::AdamW cpu(t.cpu), gpu(t.gpu);
  for (int step = 1; step <= 10; ++step) {
    set_grads(specs, t, step);
    cpu.step();
    gpu.step();
  }
  CHECK(!t.gpu[1].is_cuda());
  CHECK(t.gpu[0].is_cuda());
  check_params(t, cpu, gpu, "mixed devices");
}

// ---- SGD --------------------------------------------------------------------------------------------

CUDA_TEST_CASE("optim cuda: SGD momentum / nesterov / dampening / weight decay, f32 and f16 params, 100 steps = CPU") {
  const auto specs = model_specs();
  struct Case {
    const char* name;
    optim::SGDOptions o;
  };
  const Case cases[] = {{"plain", optim::SGDOptions(1e-2)},
                        {"momentum+wd", optim::SGDOptions(1e-2).momentum(0.9).weight_decay(1e-3)},
                        {"nesterov", optim::SGDOptions(1e-2).momentum(0.9).nesterov(true).weight_decay(1e-4)},
                        {"dampening", optim::SGDOptions(1e-2).momentum(0.5).dampening(0.3)}};
  for (const Case& c : cases) {
    SUBCASE(c.name) {
      Twin t = make_params(specs, 61);
      optim::SGD cpu(t.cpu, c.o), gpu(t.gpu, c.o);
      for (int step = 1; step <= 100; ++step) {
        set_grads(specs, t, step);
        cpu.step();
        gpu.step();
      }
      check_params(t, cpu, gpu, std::string("SGD ") + c.name);
    }
  }
}

CUDA_TEST_CASE("optim cuda: SGD param groups in one launch; a skipped first step drops its momentum buffer") {
  const auto specs = model_specs();
  Twin t = make_params(specs, 71);
  auto groups = [](const std::vector<Tensor>& p) {
    std::vector<optim::OptimizerParamGroup> g;
    g.emplace_back(std::vector<Tensor>{p[0], p[1], p[2], p[3]});
    g.emplace_back(std::vector<Tensor>{p[4], p[5], p[6]},
                   std::make_unique<optim::SGDOptions>(optim::SGDOptions(3e-2).momentum(0.8).weight_decay(1e-2)));
    return g;
  };
  const auto defaults = optim::SGDOptions(1e-2).momentum(0.9).dampening(0.1);
  optim::SGD cpu(groups(t.cpu), defaults), gpu(groups(t.gpu), defaults);
  // A first step skipped on the device: the buffer it created must not count as started.
  set_grads(specs, t, 999);
  Tensor flag = Tensor::full({1}, 1.0, kFloat32, Device::CUDA);
  gpu.set_found_inf(flag);
  gpu.step();
  gpu.set_found_inf(Tensor());
  gpu.undo_skipped_step();
  CHECK(!dynamic_cast<const optim::SGDParamState*>(gpu.param_state(t.gpu[0]))->momentum_buffer.defined());
  for (int step = 1; step <= 100; ++step) {
    set_grads(specs, t, step);
    cpu.step();
    gpu.step();
  }
  check_params(t, cpu, gpu, "SGD groups");
}

// ---- state_dict ------------------------------------------------------------------------------------

CUDA_TEST_CASE("optim cuda: AdamW and SGD state_dict round trip on CUDA is bit-identical; CPU state loads onto CUDA") {
  const auto specs = model_specs();
  for (int which = 0; which < 2; ++which) {
    CAPTURE(which);
    auto make = [which](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
      if (which == 0) return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(2e-3));
      return std::make_unique<optim::SGD>(p, optim::SGDOptions(1e-2).momentum(0.9));
    };
    Twin t = make_params(specs, 83);
    auto cpu = make(t.cpu), gpu = make(t.gpu);
    for (int step = 1; step <= 5; ++step) {
      set_grads(specs, t, step);
      cpu->step();
      gpu->step();
    }
    // Save through text, as a checkpoint does.
    const auto saved = nlohmann::json::parse(gpu->state_dict().dump());
    const auto saved_cpu = nlohmann::json::parse(cpu->state_dict().dump());
    CHECK(saved.at("state").size() == saved_cpu.at("state").size());
    std::vector<Tensor> resumed, from_cpu;
    for (const Tensor& p : t.gpu) {
      resumed.push_back(p.clone().set_requires_grad(true));
      from_cpu.push_back(p.clone().set_requires_grad(true));
    }
    auto gpu2 = make(resumed), gpu3 = make(from_cpu);
    gpu2->load_state_dict(saved);
    gpu3->load_state_dict(saved_cpu);  // the CPU optimizer's state, moved onto CUDA
    for (size_t i = 0; i < resumed.size(); ++i) {
      const auto* s = gpu2->param_state(resumed[i]);
      REQUIRE(s != nullptr);
      if (s->master.defined()) {
        CHECK(s->master.is_cuda());
        CHECK(s->master.memory_format() == resumed[i].memory_format());
      }
    }
    for (int step = 6; step <= 10; ++step) {
      set_grads(specs, t, step);
      for (size_t i = 0; i < resumed.size(); ++i) {
        resumed[i].set_grad(t.gpu[i].grad());
        from_cpu[i].set_grad(t.gpu[i].grad());
      }
      cpu->step();
      gpu->step();
      gpu2->step();
      gpu3->step();
    }
    for (size_t i = 0; i < resumed.size(); ++i)
      check_close(resumed[i], t.gpu[i], 0.0, 0.0, "resumed from the CUDA state_dict, parameter " + std::to_string(i));
    Twin t3{t.cpu, from_cpu};
    check_params(t3, *cpu, *gpu3, "resumed from the CPU state_dict");
  }
}

CUDA_TEST_CASE("optim cuda: AdamW and SGD binary state_dict through a safetensors file (CUDA NCDHW/NDHWC state) "
               "resumes bit-identically") {
  const auto specs = model_specs();
  const std::string path = "/tmp/halfgrad_optim_cuda_binary_state.safetensors";
  for (int which = 0; which < 2; ++which) {
    CAPTURE(which);
    auto make = [which](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
      if (which == 0) return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(2e-3));
      return std::make_unique<optim::SGD>(p, optim::SGDOptions(1e-2).momentum(0.9));
    };
    Twin t = make_params(specs, 97);
    auto gpu = make(t.gpu);
    for (int step = 1; step <= 5; ++step) {
      set_grads(specs, t, step);
      gpu->step();
    }
    NamedTensors tensors;
    const auto saved = nlohmann::json::parse(gpu->state_dict(tensors, "optim.").dump());
    for (const auto& [n, st] : tensors) CHECK(st.is_cuda());  // the list holds the live state; the writer stages it
    safetensors::write_file(path, tensors);
    const safetensors::Contents back = safetensors::read_file(path);
    std::remove(path.c_str());
    std::vector<Tensor> resumed;
    for (const Tensor& p : t.gpu) resumed.push_back(p.clone().set_requires_grad(true));
    auto gpu2 = make(resumed);
    gpu2->load_state_dict(saved, back.tensors);
    for (size_t i = 0; i < resumed.size(); ++i) {
      const auto* s = gpu2->param_state(resumed[i]);
      REQUIRE(s != nullptr);
      if (s->master.defined()) CHECK(s->master.memory_format() == resumed[i].memory_format());
    }
    for (int step = 6; step <= 10; ++step) {
      set_grads(specs, t, step);
      for (size_t i = 0; i < resumed.size(); ++i) resumed[i].set_grad(t.gpu[i].grad());
      gpu->step();
      gpu2->step();
    }
    for (size_t i = 0; i < resumed.size(); ++i)
      check_close(resumed[i], t.gpu[i], 0.0, 0.0, "resumed from the binary state, parameter " + std::to_string(i));
  }
}

// ---- zero_grad ---------------------------------------------------------------------------------------

CUDA_TEST_CASE("optim cuda: Optimizer::zero_grad and Module::zero_grad on CUDA params (to none, and to zeros)") {
  Tensor a = to_cuda(random_tensor({2, 3, 2, 2, 2}, 1), MemoryFormat::ChannelsLast3d).clone().set_requires_grad(true);
  Tensor b = to_cuda(random_tensor({5}, 2, kFloat16)).clone().set_requires_grad(true);
  optim::SGD opt({a, b}, optim::SGDOptions(0.1));
  a.set_grad(to_cuda(random_tensor(a.shape(), 3)));
  b.set_grad(to_cuda(random_tensor(b.shape(), 4, kFloat32)));  // an FP32 grad on an FP16 param (fp16_grads_to_fp32)
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().is_cuda());
  CHECK(b.grad().is_cuda());
  CHECK(b.grad().dtype() == kFloat16);
  CHECK(b.grad().memory_format() == b.memory_format());
  for (double v : a.grad().to_double_vector()) CHECK(v == 0.0);
  for (double v : b.grad().to_double_vector()) CHECK(v == 0.0);
  opt.zero_grad();
  CHECK(!a.grad().defined());
  CHECK(!b.grad().defined());

  nn::Module m("M");
  Tensor w = m.register_parameter("w", to_cuda(random_tensor({4, 3}, 5)));
  w.set_grad(to_cuda(random_tensor({4, 3}, 6)));
  m.zero_grad(false);
  REQUIRE(w.grad().defined());
  CHECK(w.grad().is_cuda());
  for (double v : w.grad().to_double_vector()) CHECK(v == 0.0);
  m.zero_grad();
  CHECK(!w.grad().defined());
}

// ---- clip_grad_norm_ --------------------------------------------------------------------------------

CUDA_TEST_CASE("optim cuda: clip_grad_norm_ f32/f16 grads, norm 2 and inf, clipping or not, non-finite = CPU") {
  const auto specs = model_specs();
  struct Case {
    const char* name;
    double max_norm, norm_type;
    int inject;  // 0 none, 1 inf in an FP32 grad, 2 NaN in an FP16 grad
  };
  const Case cases[] = {{"l2 clips", 1.0, 2.0, 0},         {"l2 no clip", 1e6, 2.0, 0},
                        {"inf clips", 0.5, optim::kInfNorm, 0}, {"inf no clip", 1e3, optim::kInfNorm, 0},
                        {"l2 with inf", 1.0, 2.0, 1},      {"l2 with nan", 1.0, 2.0, 2},
                        {"inf-norm with nan", 1.0, optim::kInfNorm, 2}};
  for (const Case& c : cases) {
    SUBCASE(c.name) {
      Twin t = make_params(specs, 91);
      set_grads(specs, t, 5);
      if (c.inject != 0) {
        const size_t k = c.inject == 1 ? 2 : 4;
        const Tensor g = t.cpu[k].grad();
        std::vector<float> v = g.to_float_vector();
        v[v.size() / 2] = c.inject == 1 ? INFINITY : NAN;
        Tensor bad = Tensor::from_vector(v, g.shape(), g.dtype());
        t.cpu[k].set_grad(bad);
        t.gpu[k].set_grad(bad.copy_to(Device::CUDA));
      }
      const double want = optim::clip_grad_norm_(t.cpu, c.max_norm, c.norm_type);
      const double got = optim::clip_grad_norm_(t.gpu, c.max_norm, c.norm_type);
      if (std::isnan(want)) CHECK(std::isnan(got));
      else if (std::isinf(want)) CHECK(got == want);
      else CHECK(got == doctest::Approx(want).epsilon(1e-5));  // FP32 chunk sums vs the CPU's FP64
      for (size_t i = 0; i < t.cpu.size(); ++i) {
        const Tensor gc = t.cpu[i].grad(), gg = t.gpu[i].grad();
        if (c.inject != 0) {  // every grad times 0 or NaN: compare the non-finite pattern
          const auto a = gc.to_double_vector(), b = gg.to_double_vector();
          int64_t mismatches = 0;
          for (size_t j = 0; j < a.size(); ++j)
            mismatches += (std::isnan(a[j]) != std::isnan(b[j])) || (!std::isnan(a[j]) && a[j] != b[j]);
          CHECK_MESSAGE(mismatches == 0, "grad " << i << ": " << mismatches << " elements differ");
        } else {
          check_close(gg, gc, gc.dtype() == kFloat16 ? 1.0 / 1024 : 1e-5, 1e-7, std::string(c.name) + " grad " + std::to_string(i));
        }
      }
    }
  }
}

CUDA_TEST_CASE("optim cuda: clip_grad_norm_ error_if_nonfinite throws before changing a CUDA grad; mixed devices refused") {
  Tensor a = to_cuda(random_tensor({300000}, 1)).clone().set_requires_grad(true);
  std::vector<float> v = random_tensor({100}, 2).to_float_vector();
  v[10] = INFINITY;
  a.set_grad(to_cuda(random_tensor({300000}, 3, kFloat32, 10.0)));
  Tensor b = to_cuda(random_tensor({100}, 4)).clone().set_requires_grad(true);
  b.set_grad(Tensor::from_vector(v, {100}).copy_to(Device::CUDA));
  const Tensor before = a.grad().clone();
  CHECK_THROWS_AS(optim::clip_grad_norm_({a, b}, 1.0, 2.0, true), Error);
  check_close(a.grad(), before, 0.0, 0.0, "unchanged after the throw");
  Tensor c = Tensor::ones({3}).set_requires_grad(true);
  c.set_grad(Tensor::ones({3}));
  CHECK_THROWS_AS(optim::clip_grad_norm_({a, c}, 1.0), Error);
}
