// flatten (torch.flatten): shapes for default and negative dims, the logical element order, the
// gradient shape, 0-d input, and the errors.
#include <doctest/doctest.h>

#include "core/error.h"
#include "ops/shape/shape.h"
#include "tests/check_error.h"

using namespace halfgrad;
using namespace halfgrad::testing;

TEST_CASE("ops: flatten shapes as torch.flatten: defaults, negative dims, start == end, 0-d") {
  const Tensor x = Tensor::zeros({2, 3, 4, 5, 6});
  CHECK(ops::flatten(x).shape() == Shape{2, 360});
  CHECK(ops::flatten(x, 0).shape() == Shape{720});
  CHECK(ops::flatten(x, 2, -2).shape() == Shape{2, 3, 20, 6});
  CHECK(ops::flatten(x, -3, 3).shape() == Shape{2, 3, 20, 6});
  CHECK(ops::flatten(x, 1, 1).is_same(x));
  CHECK(ops::flatten(Tensor::scalar(3.0), 0).shape() == Shape{1});
  CHECK(ops::flatten(Tensor::scalar(3.0), 0, -1).shape() == Shape{1});
}

TEST_CASE("ops: flatten keeps the logical order; its gradient has the input's shape") {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor x = Tensor::from_vector(v, {2, 3, 4}).set_requires_grad(true);
  Tensor y = ops::flatten(x);
  CHECK(y.to_float_vector() == v);
  y.backward(Tensor::ones({2, 12}));
  CHECK(x.grad().shape() == Shape{2, 3, 4});
}

TEST_CASE("ops: flatten errors: dims out of range, start after end") {
  const Tensor x = Tensor::zeros({2, 3, 4});
  check_error([&] { ops::flatten(x, 3); }, {"flatten", "start_dim 3", "out of range", "[-3, 2]"});
  check_error([&] { ops::flatten(x, 0, -4); }, {"flatten", "end_dim -4"});
  check_error([&] { ops::flatten(x, 2, 1); }, {"flatten", "start_dim 2 comes after end_dim 1"});
}
