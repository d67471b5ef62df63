// AdamW and SGD trajectories against PyTorch 1.13's torch.optim (tests/golden/optim.json, written by
// `/usr/bin/python3 tools/golden/make_golden.py`).
//
// The problem (make_golden.py, optim()): loss = sum((A @ w - b)^2) + sum(c * (W - D)^2), 100 steps of
// zero_grad; backward; step. The gradients are formed here by hand, in the order PyTorch's autograd
// forms them, so that this test exercises the optimizers alone:
//   r  = A @ w - b                (rounded to the dtype)       dw = A^T @ (2 r)
//   dW = c * (2 * (W - D))        (PyTorch's pow backward: grad * (2 * base))
// The dot products are accumulated in double here and by BLAS in PyTorch, so a gradient may differ in
// its last bit; the trajectories are held to 1e-6 relative plus 1e-7 absolute for elements near zero
// (float32; the worst element of the 100 steps uses about half of that) and 1e-10 + 1e-11 (float64).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "tests/golden.h"

using namespace halfgrad;
using halfgrad::testing::check_close;

namespace {

struct QuadraticProblem {
  Tensor A, b, c, D;  // (6, 10), (6, 1), (3, 4), (3, 4)

  // Sets w.grad and W.grad (fresh tensors, as after zero_grad(set_to_none)); returns the loss.
  template <typename T>
  double backward(Tensor w, Tensor W) const {
    const int64_t m = A.size(0), n = A.size(1);
    const T* a = A.data<T>();
    const T* pw = w.data<T>();
    std::vector<T> two_r(m);
    double loss = 0;
    for (int64_t i = 0; i < m; ++i) {
      double dot = 0;
      for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(a[i * n + j]) * pw[j];
      const T r = static_cast<T>(static_cast<T>(dot) - b.data<T>()[i]);
      loss += static_cast<double>(r) * r;
      two_r[i] = 2 * r;
    }
    Tensor gw = Tensor::zeros(w.shape(), w.dtype());
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += static_cast<double>(a[i * n + j]) * two_r[i];
      gw.data<T>()[j] = static_cast<T>(dot);
    }
    Tensor gW = Tensor::zeros(W.shape(), W.dtype());
    for (int64_t k = 0; k < W.numel(); ++k) {
      const T diff = W.data<T>()[k] - D.data<T>()[k];
      loss += static_cast<double>(c.data<T>()[k]) * diff * diff;
      gW.data<T>()[k] = c.data<T>()[k] * (2 * diff);
    }
    w.set_grad(gw);
    W.set_grad(gW);
    return loss;
  }
};

// Replays one golden case with the optimizer `make` builds over {w, W}.
template <typename T, typename MakeOptimizer>
void replay(const std::string& case_name, MakeOptimizer make) {
  const auto c = halfgrad::testing::load_golden("optim.json").at(case_name);
  const Dtype d = DtypeOf<T>::value;
  QuadraticProblem prob{c.input("A", d), c.input("b", d), c.input("c", d), c.input("D", d)};
  Tensor w = c.input("w", d).set_requires_grad(true);
  Tensor W = c.input("W", d).set_requires_grad(true);
  auto opt = make(std::vector<Tensor>{w, W});
  const int steps = c.param<int>("steps"), every = c.param<int>("record_every");
  const double rtol = d == kFloat64 ? 1e-10 : 1e-6;
  const Tensor losses = c.output("loss", kFloat64);
  for (int t = 1; t <= steps; ++t) {
    opt->zero_grad();
    const double loss = prob.backward<T>(w, W);
    CHECK_MESSAGE(std::abs(loss - losses.item_at(t - 1)) <= 1e-5 * std::abs(losses.item_at(t - 1)),
                  case_name << " loss at step " << t << ": " << loss << " vs " << losses.item_at(t - 1));
    opt->step();
    if (t % every == 0) {
      for (const auto& [name, p] : {std::pair<std::string, Tensor>{"w", w}, {"W", W}}) {
        const std::string key = name + "_step" + std::to_string(t);
        check_close(p, c.output(key, d), rtol * 1e-1, rtol, case_name + " " + key);
      }
    }
  }
}

optim::AdamWOptions adamw_options(const halfgrad::testing::GoldenCase& c) {
  const auto& h = c.params().at("hyper");
  return optim::AdamWOptions()
      .lr(h.at("lr").get<double>())
      .betas({h.at("betas").at(0).get<double>(), h.at("betas").at(1).get<double>()})
      .eps(h.at("eps").get<double>())
      .weight_decay(h.at("weight_decay").get<double>());
}

optim::SGDOptions sgd_options(const halfgrad::testing::GoldenCase& c) {
  const auto& h = c.params().at("hyper");
  return optim::SGDOptions(h.at("lr").get<double>())
      .momentum(h.at("momentum").get<double>())
      .dampening(h.at("dampening").get<double>())
      .weight_decay(h.at("weight_decay").get<double>())
      .nesterov(h.at("nesterov").get<bool>());
}

template <typename T>
void replay_adamw(const std::string& name) {
  const auto c = halfgrad::testing::load_golden("optim.json").at(name);
  replay<T>(name, [&](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(ps, adamw_options(c)); });
}

template <typename T>
void replay_sgd(const std::string& name) {
  const auto c = halfgrad::testing::load_golden("optim.json").at(name);
  replay<T>(name, [&](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, sgd_options(c)); });
}

}  // namespace

TEST_CASE("optim: AdamW float32 100-step trajectory matches PyTorch (optim.json adamw)") {
  replay_adamw<float>("adamw");
}

TEST_CASE("optim: AdamW float64 100-step trajectory matches PyTorch (optim.json adamw_f64)") {
  replay_adamw<double>("adamw_f64");
}

TEST_CASE("optim: SGD momentum float32 100-step trajectory matches PyTorch (optim.json sgd_momentum)") {
  replay_sgd<float>("sgd_momentum");
}

TEST_CASE("optim: SGD momentum float64 100-step trajectory matches PyTorch (optim.json sgd_momentum_f64)") {
  replay_sgd<double>("sgd_momentum_f64");
}

TEST_CASE("optim: SGD momentum + weight decay float32/float64 trajectories match PyTorch (optim.json sgd_momentum_wd)") {
  replay_sgd<float>("sgd_momentum_wd");
  replay_sgd<double>("sgd_momentum_wd_f64");
}
