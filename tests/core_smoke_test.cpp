#include <doctest/doctest.h>

#include "autograd/gradcheck.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

using namespace halfgrad;

TEST_CASE("smoke: add/mul/sum backward") {
  Generator g(1);
  Tensor a = Tensor::randn({2, 3}, g, kFloat64).set_requires_grad(true);
  Tensor b = Tensor::randn({1, 3}, g, kFloat64).set_requires_grad(true);
  auto r = autograd::gradcheck([](const std::vector<Tensor>& x) { return ops::sum(x[0] * x[1] + x[0] / x[1], {0}); },
                               {a, b});
  CHECK_MESSAGE(r.ok, r.report);
}
