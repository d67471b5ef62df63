// GradScaler on CUDA gradients (amp/grad_scaler_cuda.cu): one launch unscales every gradient and
// sets a device found_inf flag; step() lets the fused optimizer skip itself on the device and reads
// the flag afterwards. The reference is a CPU GradScaler driving a CPU optimizer over the same
// parameters and the same scaled gradients: every step must be taken or skipped alike, the scale and
// growth tracker must follow the same sequence, and the parameters must end where the CPU's do.
// Scales are powers of two, so unscaling is exact on both sides and gradients compare bit for bit.
#include "tests/cuda/cuda_test.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/error.h"
#include "core/half.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

using namespace halfgrad;
using testing::check_close;
using testing::random_tensor;
using testing::to_cuda;

namespace {

struct Spec {
  Shape shape;
  Dtype dtype;       // the parameter's; its gradient has the same dtype (FP16 grads are unscaled to FP32)
  MemoryFormat format;
  Device device;     // of the "GPU" twin: a CPU parameter among CUDA ones tests mixed optimizers
};

std::vector<Spec> specs(bool with_cpu_param) {
  std::vector<Spec> s = {{{8, 4, 3, 3, 3}, kFloat32, MemoryFormat::ChannelsLast3d, Device::CUDA},
                         {{70001}, kFloat32, MemoryFormat::Contiguous, Device::CUDA},
                         {{16, 8, 3, 3, 3}, kFloat16, MemoryFormat::ChannelsLast3d, Device::CUDA},
                         {{16}, kFloat16, MemoryFormat::Contiguous, Device::CUDA}};
  if (with_cpu_param) s.push_back({{5}, kFloat32, MemoryFormat::Contiguous, Device::CPU});
  return s;
}

// A CPU reference and its twin (CUDA parameters, except where a spec says CPU), each with an AdamW
// and a GradScaler of the same options.
struct Rig {
  std::vector<Spec> spec;
  std::vector<Tensor> cpu, gpu;
  std::unique_ptr<optim::AdamW> cpu_opt, gpu_opt;
  std::unique_ptr<amp::GradScaler> cpu_scaler, gpu_scaler;

  Rig(std::vector<Spec> s, const amp::GradScalerOptions& o) : spec(std::move(s)) {
    for (size_t i = 0; i < spec.size(); ++i) {
      Tensor init = random_tensor(spec[i].shape, 100 + i, spec[i].dtype);
      cpu.push_back(init.clone().set_requires_grad(true));
      Tensor g = spec[i].device == Device::CUDA ? to_cuda(init, spec[i].format).clone() : init.clone();
      gpu.push_back(g.set_requires_grad(true));
    }
    cpu_opt = std::make_unique<optim::AdamW>(cpu, optim::AdamWOptions(1e-3));
    gpu_opt = std::make_unique<optim::AdamW>(gpu, optim::AdamWOptions(1e-3));
    cpu_scaler = std::make_unique<amp::GradScaler>(o);
    gpu_scaler = std::make_unique<amp::GradScaler>(o);
  }

  // scale() (the lazy start of S), then grads = S * G in each parameter's dtype, G ~ N(0, 1e-3);
  // `bad` lists (parameter, value) pairs written into one element of that gradient.
  void scaled_grads(uint64_t step, const std::vector<std::pair<size_t, float>>& bad) {
    cpu_scaler->scale(Tensor::scalar(1.0));
    gpu_scaler->scale(Tensor::scalar(1.0));
    REQUIRE(cpu_scaler->get_scale() == gpu_scaler->get_scale());
    const double S = cpu_scaler->get_scale();
    for (size_t i = 0; i < spec.size(); ++i) {
      std::vector<float> v = random_tensor(spec[i].shape, 1000 * step + i, kFloat32, 1e-3 * S).to_float_vector();
      for (const auto& [k, value] : bad)
        if (k == i) v[v.size() / 3] = value;
      Tensor g = Tensor::from_vector(v, spec[i].shape, spec[i].dtype);
      cpu[i].set_grad(g);
      // contiguous even for a channels-last parameter; a CPU twin gets its own copy (copy_to(CPU) of a
      // CPU tensor is the tensor itself, and both scalers unscale in place)
      gpu[i].set_grad(spec[i].device == Device::CPU ? g.clone() : g.copy_to(spec[i].device));
    }
  }

  void check_same_state(const std::string& what) {
    CHECK_MESSAGE(gpu_scaler->get_scale() == cpu_scaler->get_scale(), what);
    CHECK_MESSAGE(gpu_scaler->get_growth_tracker() == cpu_scaler->get_growth_tracker(), what);
    CHECK_MESSAGE(gpu_scaler->found_inf() == cpu_scaler->found_inf(), what);
    CHECK_MESSAGE(gpu_scaler->skipped_steps() == cpu_scaler->skipped_steps(), what);
  }

  void check_params(const std::string& what) {
    for (size_t i = 0; i < spec.size(); ++i) {
      const auto* cs = dynamic_cast<const optim::AdamWParamState*>(cpu_opt->param_state(cpu[i]));
      const auto* gs = dynamic_cast<const optim::AdamWParamState*>(gpu_opt->param_state(gpu[i]));
      REQUIRE((cs == nullptr) == (gs == nullptr));
      if (cs != nullptr) CHECK_MESSAGE(gs->step == cs->step, what << ", parameter " << i);  // undo_skipped_step worked
      if (spec[i].dtype == kFloat32) {
        check_close(gpu[i], cpu[i], 2e-5, 1e-6, what + ", parameter " + std::to_string(i));  // see optim_cuda_test.cpp
      } else {
        check_close(gpu[i], cpu[i], 1.0 / 1024, kHalfMinSubnormal, what + ", parameter " + std::to_string(i));
        if (cs != nullptr) check_close(gs->master, cs->master, 2e-5, 1e-6, what + ", master " + std::to_string(i));
      }
    }
  }
};

// The scripted sequence: which gradients hold inf / NaN at each step (none at most steps, so that
// with growth_interval 3 the scale also grows).
std::vector<std::vector<std::pair<size_t, float>>> script() {
  const float inf = INFINITY, nan = NAN;
  return {{}, {}, {}, {{0, inf}}, {}, {{2, nan}}, {}, {}, {}, {}, {{1, -inf}, {3, inf}},
          {{3, nan}}, {}, {}, {}, {{1, nan}}, {}, {}, {}, {}};
}

}  // namespace

CUDA_TEST_CASE("grad_scaler cuda: scripted inf/NaN sequence, f32 and f16 grads (to FP32), step/skip and scale = CPU") {
  const auto o = amp::GradScalerOptions().init_scale(1024).growth_interval(3).fp16_grads_to_fp32(true);
  for (int mode = 0; mode < 3; ++mode) {
    // 0: step() unscales; 1: unscale_ + clip_grad_norm_ + step (the flag is still on the device at
    // step); 2: as 0 with a CPU parameter in the optimizer (the flag is read before the step).
    CAPTURE(mode);
    Rig r(specs(mode == 2), o);
    const auto steps = script();
    for (size_t s = 0; s < steps.size(); ++s) {
      const std::string what = "mode " + std::to_string(mode) + ", step " + std::to_string(s);
      r.scaled_grads(s, steps[s]);
      if (mode == 1) {
        r.cpu_scaler->unscale_(*r.cpu_opt);
        r.gpu_scaler->unscale_(*r.gpu_opt);
        for (size_t i = 0; i < r.spec.size(); ++i) {  // unscaled grads: bit-identical, FP16 ones now FP32
          CHECK(r.gpu[i].grad().dtype() == kFloat32);
          CHECK(r.gpu[i].grad().is_cuda());
          if (steps[s].empty()) check_close(r.gpu[i].grad(), r.cpu[i].grad(), 0.0, 0.0, what + " unscaled grad");
        }
        if (steps[s].empty()) {
          const double want = optim::clip_grad_norm_(r.cpu, 1e-2);
          const double got = optim::clip_grad_norm_(r.gpu, 1e-2);
          CHECK(got == doctest::Approx(want).epsilon(1e-5));
        }
      }
      const bool cpu_stepped = r.cpu_scaler->step(*r.cpu_opt);
      const bool gpu_stepped = r.gpu_scaler->step(*r.gpu_opt);
      CHECK_MESSAGE(gpu_stepped == cpu_stepped, what);
      CHECK_MESSAGE(cpu_stepped == steps[s].empty(), what);
      r.cpu_scaler->update();
      r.gpu_scaler->update();
      r.check_same_state(what);
      if (mode != 1) r.check_params(what);  // (mode 1's clip agrees only to FP32 rounding of the norm)
    }
    CHECK(r.gpu_scaler->skipped_steps() == 5);
    if (mode == 1) {
      // Clipping through slightly different norms: the trajectories agree to the clip's rounding.
      for (size_t i = 0; i < r.spec.size(); ++i)
        check_close(r.gpu[i], r.cpu[i], r.spec[i].dtype == kFloat16 ? 2.0 / 1024 : 1e-5, 1e-6, "mode 1 parameter");
    }
  }
}

CUDA_TEST_CASE("grad_scaler cuda: unscale_ f32 grads in place, inf/NaN in each tensor or none, then update without step") {
  for (int where = -1; where < 2; ++where) {
    CAPTURE(where);
    Rig r({{{8, 4, 3, 3, 3}, kFloat32, MemoryFormat::ChannelsLast3d, Device::CUDA},
           {{131073}, kFloat32, MemoryFormat::Contiguous, Device::CUDA}},
          amp::GradScalerOptions().init_scale(65536).growth_interval(1));
    std::vector<std::pair<size_t, float>> bad;
    if (where >= 0) bad.push_back({static_cast<size_t>(where), where == 0 ? NAN : -INFINITY});
    r.scaled_grads(1, bad);
    const Tensor g0 = r.gpu[1].grad();
    r.cpu_scaler->unscale_(*r.cpu_opt);
    r.gpu_scaler->unscale_(*r.gpu_opt);
    CHECK(r.gpu[1].grad().is_same(g0));  // in place
    for (size_t i = 0; i < 2; ++i) {
      const auto a = r.cpu[i].grad().to_double_vector(), b = r.gpu[i].grad().to_double_vector();
      int64_t diff = 0;
      for (size_t j = 0; j < a.size(); ++j) diff += (std::isnan(a[j]) != std::isnan(b[j])) || (!std::isnan(a[j]) && a[j] != b[j]);
      CHECK_MESSAGE(diff == 0, "grad " << i << ": " << diff << " elements differ");
    }
    CHECK_THROWS_AS(r.gpu_scaler->unscale_(*r.gpu_opt), Error);  // twice before update
    r.cpu_scaler->update();  // update reads the flag that no step() read
    r.gpu_scaler->update();
    CHECK(r.gpu_scaler->get_scale() == (where < 0 ? 131072.0 : 32768.0));
    CHECK(r.gpu_scaler->get_scale() == r.cpu_scaler->get_scale());
  }
}

CUDA_TEST_CASE("grad_scaler cuda: FP16 grads refused without fp16_grads_to_fp32; an inf only in a CPU grad of a mixed optimizer skips") {
  Rig r(specs(false), amp::GradScalerOptions());
  r.scaled_grads(1, {});
  CHECK_THROWS_AS(r.gpu_scaler->unscale_(*r.gpu_opt), Error);

  Rig m(specs(true), amp::GradScalerOptions().fp16_grads_to_fp32(true));
  m.scaled_grads(1, {{4, INFINITY}});  // parameter 4 is the CPU one
  CHECK(!m.gpu_scaler->step(*m.gpu_opt));
  CHECK(!m.cpu_scaler->step(*m.cpu_opt));
  m.gpu_scaler->update();
  m.cpu_scaler->update();
  m.check_same_state("mixed, inf on the CPU");
  CHECK(m.gpu_opt->param_state(m.gpu[0]) == nullptr);  // skipped before any state was made
}

CUDA_TEST_CASE("grad_scaler cuda: SGD with momentum skipped on the device at its first step, then = CPU") {
  auto make = [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(1e-2).momentum(0.9).dampening(0.2));
  };
  Rig r(specs(false), amp::GradScalerOptions().init_scale(256).growth_interval(2).fp16_grads_to_fp32(true));
  auto cpu_sgd = make(r.cpu), gpu_sgd = make(r.gpu);
  const auto steps = script();
  for (size_t s = 0; s < 8; ++s) {
    r.scaled_grads(s, s == 0 ? std::vector<std::pair<size_t, float>>{{2, NAN}} : steps[s]);
    CHECK(r.gpu_scaler->step(*gpu_sgd) == r.cpu_scaler->step(*cpu_sgd));
    r.cpu_scaler->update();
    r.gpu_scaler->update();
    r.check_same_state("SGD step " + std::to_string(s));
  }
  for (size_t i = 0; i < r.spec.size(); ++i)
    check_close(r.gpu[i], r.cpu[i], r.spec[i].dtype == kFloat16 ? 2.0 / 1024 : 2e-5, 1e-6, "SGD parameter " + std::to_string(i));
}
