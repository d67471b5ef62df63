// SGD beyond the golden trajectories (golden_trajectory_test.cpp): Nesterov and dampening by hand,
// FP16 master weights, state_dict resume, argument checks.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "optim/sgd.h"

using namespace halfgrad;

TEST_CASE("optim: SGD float64 nesterov and dampening follow PyTorch's update by hand") {
  struct Config { double momentum, dampening, wd; bool nesterov; };
  for (const Config cfg : {Config{0.9, 0.0, 0.1, true}, Config{0.9, 0.3, 0.0, false}, Config{0.0, 0.0, 0.2, false}}) {
    CAPTURE(cfg.momentum); CAPTURE(cfg.dampening); CAPTURE(cfg.nesterov);
    Tensor p = Tensor::from_vector(std::vector<double>{1.0, -0.5}, {2}).set_requires_grad(true);
    optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(cfg.momentum).dampening(cfg.dampening)
                            .weight_decay(cfg.wd).nesterov(cfg.nesterov));
    double ref[2] = {1.0, -0.5}, buf[2] = {0, 0};
    const double grads[3][2] = {{0.5, -1.0}, {0.25, 2.0}, {-1.0, 0.125}};
    for (int t = 0; t < 3; ++t) {
      p.set_grad(Tensor::from_vector(std::vector<double>{grads[t][0], grads[t][1]}, {2}));
      opt.step();
      for (int i = 0; i < 2; ++i) {
        double d = grads[t][i] + cfg.wd * ref[i];
        if (cfg.momentum != 0) {
          buf[i] = t == 0 ? d : buf[i] * cfg.momentum + (1 - cfg.dampening) * d;
          d = cfg.nesterov ? d + cfg.momentum * buf[i] : buf[i];
        }
        ref[i] -= 0.1 * d;
        CHECK(p.item_at(i) == doctest::Approx(ref[i]).epsilon(1e-14));
      }
    }
    const auto* st = dynamic_cast<const optim::SGDParamState*>(opt.param_state(p));
    REQUIRE(st != nullptr);
    CHECK(st->momentum_buffer.defined() == (cfg.momentum != 0));
  }
}

TEST_CASE("optim: SGD options are validated as PyTorch's") {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  CHECK_THROWS_AS(optim::SGD({p}, optim::SGDOptions(-0.1)), Error);
  CHECK_THROWS_AS(optim::SGD({p}, optim::SGDOptions(0.1).momentum(-0.9)), Error);
  CHECK_THROWS_AS(optim::SGD({p}, optim::SGDOptions(0.1).weight_decay(-1)), Error);
  CHECK_THROWS_AS(optim::SGD({p}, optim::SGDOptions(0.1).nesterov(true)), Error);  // needs momentum
  CHECK_THROWS_AS(optim::SGD({p}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)), Error);
  CHECK_NOTHROW(optim::SGD({p}, optim::SGDOptions(0.1).momentum(0.9).nesterov(true)));
}

TEST_CASE("optim: SGD float16 params with FP32 master weights equal the FP32 run, rounded") {
  const int64_t n = 64;
  Generator gen(5);
  std::vector<float> init(n);
  for (auto& x : init) x = round_to_half(static_cast<float>(gen.normal()));
  Tensor p16 = Tensor::from_vector(init, {n}, kFloat16).set_requires_grad(true);
  Tensor p32 = Tensor::from_vector(init, {n}, kFloat32).set_requires_grad(true);
  const auto options = optim::SGDOptions(1e-3).momentum(0.9).weight_decay(1e-4);
  optim::SGD opt16({p16}, options), opt32({p32}, options);
  for (int t = 0; t < 10; ++t) {
    std::vector<float> g(n);
    for (auto& x : g) x = round_to_half(static_cast<float>(gen.normal() * 0.1));
    p16.set_grad(Tensor::from_vector(g, {n}, kFloat16));
    p32.set_grad(Tensor::from_vector(g, {n}, kFloat32));
    opt16.step();
    opt32.step();
  }
  const Tensor& master = opt16.param_state(p16)->master;
  CHECK(std::memcmp(master.raw_data(), p32.raw_data(), p32.nbytes()) == 0);
  const Tensor rounded = p32.cast_copy(kFloat16);
  CHECK(std::memcmp(p16.raw_data(), rounded.raw_data(), rounded.nbytes()) == 0);
}

TEST_CASE("optim: SGD state_dict round trip keeps the momentum buffer (bit-identical resume)") {
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  auto grad_at = [](int t) { return Tensor::from_vector(std::vector<float>{0.1f * t, -0.2f, 0.3f / (t + 1)}, {3}); };
  for (int t = 0; t < 4; ++t) p.set_grad(grad_at(t)), opt.step();
  const nlohmann::json sd = nlohmann::json::parse(opt.state_dict().dump());
  CHECK(sd.at("param_groups")[0].at("nesterov") == true);
  Tensor q = p.clone().set_requires_grad(true);
  optim::SGD resumed({q}, optim::SGDOptions(1.0));
  resumed.load_state_dict(sd);
  CHECK(resumed.param_groups()[0].options().get_lr() == 0.05);
  for (int t = 4; t < 8; ++t) {
    p.set_grad(grad_at(t)), opt.step();
    q.set_grad(grad_at(t)), resumed.step();
  }
  CHECK(std::memcmp(p.raw_data(), q.raw_data(), p.nbytes()) == 0);
}
