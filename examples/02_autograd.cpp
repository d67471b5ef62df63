// 02_autograd - the tape: forward records, backward replays in reverse and accumulates into .grad.
//
//   build/examples/02_autograd
//
// Builds y = sum((a * b + a) / b) by hand, prints the gradients the tape computes next to the ones
// from calculus, then checks them with float64 central differences (gradcheck).
#include <cstdio>

#include "autograd/gradcheck.h"
#include "ops/ops.h"

using namespace halfgrad;

int main() {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
  Tensor b = Tensor::from_vector(std::vector<float>{4, 5, 6}, {3}).set_requires_grad(true);
  Tensor y = ops::sum((a * b + a) / b);  // = sum(a + a / b)
  y.backward();
  std::printf("y = %.6f\n", y.item());
  for (int i = 0; i < 3; ++i) {
    const double av = a.item_at(i), bv = b.item_at(i);
    std::printf("dy/da[%d] tape %.6f calculus %.6f | dy/db[%d] tape %.6f calculus %.6f\n", i, a.grad().item_at(i),
                1 + 1 / bv, i, b.grad().item_at(i), -av / (bv * bv));
  }
  Generator gen(0);
  Tensor a64 = Tensor::randn({3}, gen, kFloat64).set_requires_grad(true);
  Tensor b64 = Tensor::uniform({3}, 1, 2, gen, kFloat64).set_requires_grad(true);
  auto r = autograd::gradcheck([](const std::vector<Tensor>& x) { return ops::sum((x[0] * x[1] + x[0]) / x[1]); },
                               {a64, b64});
  std::printf("gradcheck (float64 central differences): %s, max abs error %.2e\n", r.ok ? "ok" : "FAILED",
              r.max_abs_error);
  return r.ok ? 0 : 1;
}
