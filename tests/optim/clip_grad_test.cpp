// clip_grad_norm_ against torch.nn.utils.clip_grad_norm_ (PyTorch 1.13). The expected values were
// printed by Debian's PyTorch:
//   a.grad = [0.1, 0.2, -0.3]; b.grad = [[1.5, -2.25], [0.125, 3.0]]; c without grad
//   clip_grad_norm_([a, b, c], 1.0)                 -> 4.058093547821045, grads below
//   clip_grad_norm_([a, b], 0.5, norm_type=inf)     -> 3.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "optim/clip_grad.h"

using namespace halfgrad;

namespace {
struct Params {
  Tensor a = Tensor::zeros({3}).set_requires_grad(true);
  Tensor b = Tensor::zeros({2, 2}).set_requires_grad(true);
  Tensor c = Tensor::zeros({1}).set_requires_grad(true);  // no grad: skipped
  Params() {
    a.set_grad(Tensor::from_vector(std::vector<float>{0.1f, 0.2f, -0.3f}, {3}));
    b.set_grad(Tensor::from_vector(std::vector<float>{1.5f, -2.25f, 0.125f, 3.0f}, {2, 2}));
  }
};
void check_floats(const Tensor& t, const std::vector<double>& expect) {
  REQUIRE(t.numel() == static_cast<int64_t>(expect.size()));
  for (size_t i = 0; i < expect.size(); ++i) CHECK(t.item_at(i) == static_cast<double>(static_cast<float>(expect[i])));
}
}  // namespace

TEST_CASE("optim: clip_grad_norm_ float32 2-norm clips like PyTorch") {
  Params p;
  const double total = optim::clip_grad_norm_({p.a, p.b, p.c}, 1.0);
  CHECK(total == 4.058093547821045);
  check_floats(p.a.grad(), {0.024642108008265495, 0.04928421601653099, -0.07392632216215134});
  check_floats(p.b.grad(), {0.3696315884590149, -0.5544474124908447, 0.030802633613348007, 0.7392631769180298});
  CHECK(!p.c.grad().defined());
}

TEST_CASE("optim: clip_grad_norm_ float32 inf-norm clips like PyTorch") {
  Params p;
  CHECK(optim::clip_grad_norm_({p.a, p.b}, 0.5, optim::kInfNorm) == 3.0);
  check_floats(p.a.grad(), {0.016666661947965622, 0.033333323895931244, -0.049999985843896866});
  check_floats(p.b.grad(), {0.24999991059303284, -0.37499988079071045, 0.020833326503634453, 0.4999998211860657});
}

TEST_CASE("optim: clip_grad_norm_ leaves grads untouched below max_norm and returns 0 without grads") {
  Params p;
  const Tensor before = p.b.grad().clone();
  CHECK(optim::clip_grad_norm_({p.a, p.b}, 10.0) == doctest::Approx(4.058093547821045));
  CHECK(std::memcmp(before.raw_data(), p.b.grad().raw_data(), before.nbytes()) == 0);
  CHECK(optim::clip_grad_norm_({p.c}, 1.0) == 0.0);
}

TEST_CASE("optim: clip_grad_norm_ with a non-finite grad gives NaN grads, or throws if asked") {
  Params p;
  p.a.grad().data<float>()[1] = INFINITY;
  // total = inf, clip_coef = 1 / inf * max_norm = 0: finite grads become 0, the inf becomes NaN.
  CHECK(std::isinf(optim::clip_grad_norm_({p.a, p.b}, 1.0)));
  CHECK(p.b.grad().item_at(0) == 0.0);
  CHECK(std::isnan(p.a.grad().item_at(1)));
  Params q;
  q.b.grad().data<float>()[2] = NAN;
  const Tensor before = q.b.grad().clone();
  CHECK_THROWS_AS(optim::clip_grad_norm_({q.a, q.b}, 1.0, 2.0, /*error_if_nonfinite=*/true), Error);
  CHECK(std::memcmp(before.raw_data(), q.b.grad().raw_data(), before.nbytes()) == 0);
}

TEST_CASE("optim: clip_grad_norm_ float16 grads are scaled in float and rounded once") {
  Tensor h = Tensor::zeros({2}, kFloat16).set_requires_grad(true);
  h.set_grad(Tensor::from_vector(std::vector<float>{3.0f, 4.0f}, {2}, kFloat16));
  CHECK(optim::clip_grad_norm_({h}, 1.0) == 5.0);
  const float coef = (1.0f / (5.0f + 1e-6f)) * 1.0f;
  CHECK(h.grad().dtype() == kFloat16);
  CHECK(h.grad().item_at(0) == round_to_half(3.0f * coef));
  CHECK(h.grad().item_at(1) == round_to_half(4.0f * coef));
}
