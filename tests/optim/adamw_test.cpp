// AdamW beyond the golden trajectories (golden_trajectory_test.cpp): the first step by hand, FP16
// parameters with FP32 master weights, bit-identical resume from state_dict, parameter groups,
// argument checks, and that a step leaves no trace on the autograd tape.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <unistd.h>
#include <vector>

#include "core/error.h"
#include "tests/check_error.h"
#include "core/half.h"
#include "core/safetensors.h"
#include "ops/elementwise/elementwise.h"
#include "optim/adamw.h"

using namespace halfgrad;

namespace {

// n pseudo-random gradients of magnitude ~scale, each exactly representable in half.
std::vector<float> half_exact_values(int64_t n, uint64_t seed, double scale) {
  Generator g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to_half(static_cast<float>(g.normal() * scale));
  return v;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("optim: AdamW float32 first step equals the formula by hand") {
  // t = 1: m = (1-b1) g, v = (1-b2) g^2, so m / (1-b1) = g and sqrt(v / (1-b2)) = |g|:
  // p = p (1 - lr wd) - lr * g / (|g| + eps), about lr * sign(g).
  Tensor p = Tensor::from_vector(std::vector<float>{1.0f, -2.0f, 0.5f}, {3}).set_requires_grad(true);
  p.set_grad(Tensor::from_vector(std::vector<float>{0.3f, -0.01f, 2.0f}, {3}));
  optim::AdamW opt({p}, optim::AdamWOptions().lr(0.1).weight_decay(0.5));
  opt.step();
  const double expect[3] = {1.0 * 0.95 - 0.1, -2.0 * 0.95 + 0.1, 0.5 * 0.95 - 0.1};
  for (int i = 0; i < 3; ++i) CHECK(p.item_at(i) == doctest::Approx(expect[i]).epsilon(1e-6));
  const auto* st = dynamic_cast<const optim::AdamWParamState*>(opt.param_state(p));
  REQUIRE(st != nullptr);
  CHECK(st->step == 1);
  CHECK(st->exp_avg.item_at(0) == doctest::Approx(0.1 * 0.3).epsilon(1e-6));
  CHECK(!st->master.defined());  // FP32 parameters are updated in place
}

TEST_CASE("optim: AdamW options default to PyTorch's and are validated") {
  const optim::AdamWOptions o;
  CHECK(o.lr() == 1e-3);
  CHECK(std::get<0>(o.betas()) == 0.9);
  CHECK(std::get<1>(o.betas()) == 0.999);
  CHECK(o.eps() == 1e-8);
  CHECK(o.weight_decay() == 1e-2);
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  CHECK_THROWS_AS(optim::AdamW({p}, optim::AdamWOptions().lr(-1)), Error);
  CHECK_THROWS_AS(optim::AdamW({p}, optim::AdamWOptions().betas({1.0, 0.999})), Error);
  CHECK_THROWS_AS(optim::AdamW({p}, optim::AdamWOptions().betas({0.9, -0.1})), Error);
  CHECK_THROWS_AS(optim::AdamW({p}, optim::AdamWOptions().eps(-1e-8)), Error);
  CHECK_THROWS_AS(optim::AdamW({p}, optim::AdamWOptions().weight_decay(-1)), Error);
  CHECK_THROWS_AS(optim::AdamW(std::vector<Tensor>{}), Error);
  CHECK_THROWS_AS(optim::AdamW({p, p}), Error);  // a parameter twice
  Tensor nonleaf = Tensor::zeros({2}).set_requires_grad(true) * 2.0;
  CHECK_THROWS_AS(optim::AdamW({nonleaf}), Error);
}

TEST_CASE("optim: AdamW skips parameters without grad and records nothing on the tape") {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor b = Tensor::from_vector(std::vector<float>{3, 4}, {2}).set_requires_grad(true);
  a.set_grad(Tensor::ones({2}));
  optim::AdamW opt({a, b});
  opt.step();  // grad mode is on here: the update must still not be recorded
  CHECK(a.is_leaf());
  CHECK(a.requires_grad());
  CHECK(a.item_at(0) != 1.0);
  CHECK(b.item_at(0) == 3.0);
  CHECK(b.item_at(1) == 4.0);
  CHECK(opt.param_state(b) == nullptr);
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().item_at(0) == 0.0);
  opt.zero_grad();
  CHECK(!a.grad().defined());
}

TEST_CASE("optim: AdamW param groups keep their own lr and weight decay") {
  Tensor decayed = Tensor::full({1}, 1.0).set_requires_grad(true);
  Tensor plain = Tensor::full({1}, 1.0).set_requires_grad(true);
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{decayed});
  groups.emplace_back(std::vector<Tensor>{plain},
                      std::make_unique<optim::AdamWOptions>(optim::AdamWOptions().lr(0.01).weight_decay(0.0)));
  optim::AdamW opt(groups, optim::AdamWOptions().lr(0.1).weight_decay(0.1));
  decayed.set_grad(Tensor::full({1}, 1.0));
  plain.set_grad(Tensor::full({1}, 1.0));
  opt.step();
  CHECK(decayed.item() == doctest::Approx(1.0 * (1 - 0.1 * 0.1) - 0.1).epsilon(1e-6));
  CHECK(plain.item() == doctest::Approx(1.0 - 0.01).epsilon(1e-6));
  CHECK(opt.param_groups()[0].options().get_lr() == 0.1);
  CHECK(opt.param_groups()[1].options().get_lr() == 0.01);
}

TEST_CASE("optim: AdamW float16 params with FP32 master weights equal the FP32 run, rounded") {
  for (Dtype grad_dtype : {kFloat16, kFloat32}) {
    CAPTURE(dtype_name(grad_dtype));
    const int64_t n = 257;
    const std::vector<float> init = half_exact_values(n, 7, 1.0);
    Tensor p16 = Tensor::from_vector(init, {n}, kFloat16).set_requires_grad(true);
    Tensor p32 = Tensor::from_vector(init, {n}, kFloat32).set_requires_grad(true);
    const auto options = optim::AdamWOptions().lr(1e-3).weight_decay(1e-2);
    optim::AdamW opt16({p16}, options), opt32({p32}, options);
    for (int t = 0; t < 20; ++t) {
      const std::vector<float> g = half_exact_values(n, 100 + t, 1e-2);
      p16.set_grad(Tensor::from_vector(g, {n}, grad_dtype));
      p32.set_grad(Tensor::from_vector(g, {n}, kFloat32));
      opt16.step();
      opt32.step();
      const auto* st = opt16.param_state(p16);
      REQUIRE(st != nullptr);
      REQUIRE(st->master.dtype() == kFloat32);
      CHECK_MESSAGE(same_bits(st->master, p32), "master differs from the FP32 run at step " << t + 1);
      CHECK_MESSAGE(same_bits(p16, p32.cast_copy(kFloat16)), "param is not the FP32 value rounded, step " << t + 1);
    }
  }
}

TEST_CASE("optim: AdamW float16 master weight keeps updates smaller than half's spacing") {
  // Near 1.0 halves are 2^-10 ~ 9.8e-4 apart; an lr of 1e-4 moves the parameter by about 1e-4 per
  // step, which rounds away in FP16 every time. The FP32 master accumulates it.
  Tensor p = Tensor::full({1}, 1.0, kFloat16).set_requires_grad(true);
  optim::AdamW opt({p}, optim::AdamWOptions().lr(1e-4).weight_decay(0.0));
  for (int t = 0; t < 10; ++t) {
    p.set_grad(Tensor::full({1}, -1.0, kFloat16));
    opt.step();
  }
  const double master = opt.param_state(p)->master.item();
  CHECK(master == doctest::Approx(1.0 + 10 * 1e-4).epsilon(1e-5));
  CHECK(p.item() == round_to_half(static_cast<float>(master)));
  CHECK(p.item() > 1.0);
}

TEST_CASE("optim: AdamW state_dict round trip resumes bit-identically (float32 and float16 params)") {
  for (Dtype d : {kFloat32, kFloat16}) {
    CAPTURE(dtype_name(d));
    const std::vector<float> init = half_exact_values(40, 3, 1.0);
    Tensor a = Tensor::from_vector(init, {5, 8}, d).set_requires_grad(true);
    Tensor b = Tensor::from_vector(std::vector<float>(init.begin(), init.begin() + 6), {6}, d).set_requires_grad(true);
    const auto options = optim::AdamWOptions().lr(3e-3).betas({0.8, 0.99}).weight_decay(0.05);
    optim::AdamW opt({a, b}, options);
    auto grads_at = [&](int t) {
      a.set_grad(Tensor::from_vector(half_exact_values(40, 50 + t, 0.1), {5, 8}, d));
      b.set_grad(Tensor::from_vector(half_exact_values(6, 90 + t, 0.1), {6}, d));
    };
    for (int t = 0; t < 5; ++t) grads_at(t), opt.step();
    // Save through text, as a checkpoint file would.
    const std::string saved = opt.state_dict().dump();
    Tensor a2 = a.clone().set_requires_grad(true), b2 = b.clone().set_requires_grad(true);
    optim::AdamW resumed({a2, b2}, optim::AdamWOptions());  // options come from the state dict
    resumed.load_state_dict(nlohmann::json::parse(saved));
    CHECK(std::get<0>(static_cast<const optim::AdamWOptions&>(resumed.param_groups()[0].options()).betas()) == 0.8);
    for (int t = 5; t < 10; ++t) {
      grads_at(t);
      a2.set_grad(a.grad());
      b2.set_grad(b.grad());
      opt.step();
      resumed.step();
    }
    CHECK(same_bits(a, a2));
    CHECK(same_bits(b, b2));
    CHECK(opt.state_dict() == resumed.state_dict());
  }
}

TEST_CASE("optim: AdamW load_state_dict rejects a mismatched optimizer and changes nothing") {
  Tensor a = Tensor::zeros({3}).set_requires_grad(true);
  a.set_grad(Tensor::ones({3}));
  optim::AdamW opt({a});
  opt.step();
  const nlohmann::json sd = opt.state_dict();
  Tensor wrong_shape = Tensor::zeros({4}).set_requires_grad(true);
  optim::AdamW other({wrong_shape}, optim::AdamWOptions().lr(0.5));
  CHECK_THROWS_AS(other.load_state_dict(sd), Error);
  CHECK(other.param_groups()[0].options().get_lr() == 0.5);
  CHECK(other.param_state(wrong_shape) == nullptr);
  Tensor x = Tensor::zeros({3}).set_requires_grad(true), y = Tensor::zeros({3}).set_requires_grad(true);
  optim::AdamW two({x, y});
  CHECK_THROWS_AS(two.load_state_dict(sd), Error);  // group sizes differ
}

TEST_CASE("optim: AdamW load_state_dict of wrong-type fields names the field, never nlohmann's text; changes nothing") {
  Tensor a = Tensor::zeros({3}).set_requires_grad(true);
  a.set_grad(Tensor::ones({3}));
  optim::AdamW opt({a});
  opt.step();
  const nlohmann::json sd = opt.state_dict();
  Tensor b = Tensor::zeros({3}).set_requires_grad(true);
  optim::AdamW fresh({b}, optim::AdamWOptions().lr(0.5));
  auto bad = [&](nlohmann::json broken, const std::vector<std::string>& parts) {
    testing::check_error([&] { fresh.load_state_dict(broken); }, parts);
    CHECK(fresh.param_groups()[0].options().get_lr() == 0.5);
    CHECK(fresh.param_state(b) == nullptr);
  };
  nlohmann::json j = sd;
  j["param_groups"][0]["lr"] = "0.1";
  bad(j, {"AdamW::load_state_dict: field 'param_groups[0].lr' must be a number, got string \"0.1\""});
  j = sd;
  j["param_groups"][0]["betas"] = {0.9};
  bad(j, {"field 'param_groups[0].betas' has 1 elements; expected [beta1, beta2]"});
  j = sd;
  j["state"]["0"]["step"] = "1";
  bad(j, {"field 'state.0.step' must be an integer, got string"});
  j = sd;
  j["state"]["0"]["exp_avg"]["shape"] = {int64_t{1} << 15, int64_t{1} << 15};  // 4 GiB claimed: refused before allocating
  bad(j, {"'state.0.exp_avg'", "base64 characters cannot hold the 4294967296 bytes"});
  j = sd;
  j["state"]["0"]["exp_avg"]["shape"] = {int64_t{1} << 30, int64_t{1} << 30};
  bad(j, {"field 'state.0.exp_avg.shape' is too large (more than 2^40 elements)"});
  j = sd;
  j["state"]["0"]["exp_avg"]["shape"] = {int64_t{0}, int64_t{1} << 30, int64_t{1} << 30};  // a 0 hides nothing
  bad(j, {"field 'state.0.exp_avg.shape' is too large (more than 2^40 elements)"});
  j = sd;
  j["state"]["0"]["exp_avg"]["shape"] = {-3};
  bad(j, {"field 'state.0.exp_avg.shape' holds the negative extent -3"});
  j = sd;
  j["param_groups"][0]["initial_lr"] = nullptr;
  bad(j, {"field 'param_groups[0].initial_lr' must be a number, got null"});
  j = sd;
  j["state"] = nlohmann::json::array();
  bad(j, {"field 'state' must be an object, got array"});
  fresh.load_state_dict(sd);  // the intact dict loads
  CHECK(fresh.param_state(b) != nullptr);
}

TEST_CASE("optim: AdamW update of a large tensor (OpenMP path) equals the small-tensor update") {
  const int64_t n = optim::kParallelMinElements + 1000;
  const std::vector<float> init = half_exact_values(n, 11, 1.0), g = half_exact_values(n, 12, 0.1);
  Tensor big = Tensor::from_vector(init, {n}).set_requires_grad(true);
  Tensor small = Tensor::from_vector(std::vector<float>(init.end() - 100, init.end()), {100}).set_requires_grad(true);
  optim::AdamW opt_big({big}), opt_small({small});
  for (int t = 0; t < 3; ++t) {
    big.set_grad(Tensor::from_vector(g, {n}));
    small.set_grad(Tensor::from_vector(std::vector<float>(g.end() - 100, g.end()), {100}));
    opt_big.step();
    opt_small.step();
  }
  CHECK(std::memcmp(big.data<float>() + n - 100, small.data<float>(), 100 * sizeof(float)) == 0);
}

TEST_CASE("optim: AdamW master_weights(false) on float16 params keeps float16 moments and equals the float update rounded") {
  // Pure FP16 (amp O3): no master; p, m, v are half and each step is adamw_update's float arithmetic
  // on their widened values, rounded back once (apex FusedAdam's behaviour for half parameters).
  const int64_t n = 300;  // not a multiple of the 1024-element block, and spans no block boundary
  const std::vector<float> init = half_exact_values(n, 11, 1.0);
  Tensor p = Tensor::from_vector(init, {n}, kFloat16).set_requires_grad(true);
  const auto options = optim::AdamWOptions().lr(1e-2).weight_decay(1e-2).eps(1e-4).master_weights(false);
  optim::AdamW opt({p}, options);
  // Reference: the same recurrence by hand, in float, rounding p, m, v to half after each step.
  std::vector<float> rp(init), rm(n, 0.0f), rv(n, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = half_exact_values(n, 200 + t, 0.1);
    p.set_grad(Tensor::from_vector(g, {n}, kFloat32));
    opt.step();
    const float decay = static_cast<float>(1.0 - 1e-2 * 1e-2), b1 = 0.9f, omb1 = static_cast<float>(1.0 - 0.9);
    const float b2 = 0.999f, omb2 = static_cast<float>(1.0 - 0.999), eps = 1e-4f;
    const float bc2 = static_cast<float>(std::sqrt(1.0 - std::pow(0.999, t)));
    const float nss = static_cast<float>(-(1e-2 / (1.0 - std::pow(0.9, t))));
    for (int64_t i = 0; i < n; ++i) {
      float pi = rp[i] * decay;
      float mi = rm[i] * b1 + omb1 * g[i];
      float vi = rv[i] * b2 + omb2 * g[i] * g[i];
      float denom = std::sqrt(vi) / bc2 + eps;
      pi = pi + nss * mi / denom;
      rp[i] = round_to_half(pi), rm[i] = round_to_half(mi), rv[i] = round_to_half(vi);
    }
  }
  const auto* st = static_cast<const optim::AdamWParamState*>(opt.param_state(p));
  REQUIRE(st != nullptr);
  CHECK_FALSE(st->master.defined());
  REQUIRE(st->exp_avg.dtype() == kFloat16);
  REQUIRE(st->exp_avg_sq.dtype() == kFloat16);
  // FMA contraction may differ between this loop and the optimizer's, so allow one half ulp.
  int off = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ulp = std::ldexp(1.0, std::max(-24, std::ilogb(std::max(std::abs(rp[i]), 6.1e-5f)) - 10));
    if (std::abs(p.item_at(i) - rp[i]) > ulp) ++off;
  }
  CHECK(off == 0);
  // The state round-trips and is refused by an optimizer that keeps masters.
  const nlohmann::json sd = nlohmann::json::parse(opt.state_dict().dump());
  CHECK(sd.at("param_groups")[0].at("master_weights") == false);
  Tensor q = p.clone().set_requires_grad(true);
  optim::AdamW resumed({q}, optim::AdamWOptions());
  resumed.load_state_dict(sd);
  p.set_grad(Tensor::full({n}, 0.05));
  q.set_grad(Tensor::full({n}, 0.05));
  opt.step();
  resumed.step();
  CHECK(same_bits(p, q));
}

TEST_CASE("optim: AdamW master_weights(false) loses an update smaller than half's spacing (why masters exist)") {
  // The mirror of "float16 master weight keeps updates smaller than half's spacing": near 1.0 an
  // lr-1e-4 step rounds back to 1.0 every time when there is no FP32 master to accumulate it.
  Tensor p = Tensor::full({1}, 1.0, kFloat16).set_requires_grad(true);
  optim::AdamW opt({p}, optim::AdamWOptions().lr(1e-4).weight_decay(0.0).master_weights(false));
  for (int t = 0; t < 10; ++t) {
    p.set_grad(Tensor::full({1}, -1.0, kFloat16));
    opt.step();
  }
  CHECK(p.item() == 1.0);
  // Switching the layout after the first step is refused, naming the switch.
  auto& o = static_cast<optim::AdamWOptions&>(opt.param_groups()[0].options());
  o.master_weights(true);
  p.set_grad(Tensor::full({1}, -1.0, kFloat16));
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("master_weights"), Error);
}

TEST_CASE("optim: AdamW binary state_dict (tensors in a list, names in the JSON) resumes bit-identically; "
          "float32 and float16 with masters, through a safetensors file") {
  for (Dtype d : {kFloat32, kFloat16}) {
    CAPTURE(dtype_name(d));
    const std::vector<float> init = half_exact_values(40, 7, 1.0);
    Tensor a = Tensor::from_vector(init, {5, 8}, d).set_requires_grad(true);
    optim::AdamW opt({a}, optim::AdamWOptions().lr(2e-3).weight_decay(0.03));
    auto grad_at = [&](int t) { a.set_grad(Tensor::from_vector(half_exact_values(40, 60 + t, 0.1), {5, 8}, d)); };
    for (int t = 0; t < 4; ++t) grad_at(t), opt.step();
    NamedTensors tensors;
    const nlohmann::json sd = opt.state_dict(tensors, "optim.");
    // Only names in the JSON; the bytes in the list.
    CHECK(sd.dump().find("base64") == std::string::npos);
    std::vector<std::string> names;
    for (const auto& [n, t] : tensors) names.push_back(n);
    if (d == kFloat16)
      CHECK(names == std::vector<std::string>{"optim.state.0.master", "optim.state.0.exp_avg", "optim.state.0.exp_avg_sq"});
    else
      CHECK(names == std::vector<std::string>{"optim.state.0.exp_avg", "optim.state.0.exp_avg_sq"});
    CHECK(sd["state"]["0"]["exp_avg"] == "optim.state.0.exp_avg");
    // Through a file, as a checkpoint does.
    const std::string path = "/tmp/halfgrad_adamw_binary_state_" + std::to_string(::getpid()) + ".safetensors";
    safetensors::write_file(path, tensors);
    const safetensors::Contents back = safetensors::read_file(path);
    std::remove(path.c_str());
    Tensor a2 = a.clone().set_requires_grad(true);
    optim::AdamW resumed({a2}, optim::AdamWOptions());
    resumed.load_state_dict(nlohmann::json::parse(sd.dump()), back.tensors);
    for (int t = 4; t < 8; ++t) {
      grad_at(t);
      a2.set_grad(a.grad());
      opt.step();
      resumed.step();
    }
    CHECK(same_bits(a, a2));
    CHECK(opt.state_dict() == resumed.state_dict());
  }
  // A name the list lacks is an Error naming the field and the tensor; the optimizer is unchanged.
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  p.set_grad(Tensor::ones({3}));
  optim::AdamW opt({p});
  opt.step();
  NamedTensors tensors;
  const nlohmann::json sd = opt.state_dict(tensors);
  tensors.pop_back();
  Tensor q = Tensor::zeros({3}).set_requires_grad(true);
  optim::AdamW fresh({q});
  testing::check_error([&] { fresh.load_state_dict(sd, tensors); },
                       {"AdamW::load_state_dict: field 'state.0.exp_avg_sq' names tensor 'optim.state.0.exp_avg_sq', "
                        "which is not among the saved tensors"});
  CHECK(fresh.param_state(q) == nullptr);
}
