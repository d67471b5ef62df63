#include <doctest/doctest.h>

#include "core/error.h"
#include "core/tensor.h"

using namespace halfgrad;

TEST_CASE("core: tensor factories, shapes and dtypes") {
  Tensor z = Tensor::zeros({2, 3, 4});
  CHECK(z.numel() == 24);
  CHECK(z.dim() == 3);
  CHECK(z.size(-1) == 4);
  CHECK(z.dtype() == kFloat32);
  CHECK(Tensor::ones({2}, kFloat16).item_at(1) == 1.0);
  CHECK(Tensor::full({3}, 2.5, kFloat64).to_double_vector() == std::vector<double>{2.5, 2.5, 2.5});
  CHECK(Tensor::scalar(4.0).item() == 4.0);
  CHECK(Tensor::from_labels({0, 2, 1}, {3}).data<int64_t>()[1] == 2);
  CHECK(dtype_size(kFloat16) == 2);
  CHECK(promote_types(kFloat16, kFloat32) == kFloat32);
  CHECK(promote_types(kFloat64, kFloat16) == kFloat64);
}

TEST_CASE("core: seeded random init is reproducible") {
  Generator a(42), b(42), c(43);
  Tensor x = Tensor::randn({100}, a), y = Tensor::randn({100}, b), w = Tensor::randn({100}, c);
  CHECK(x.to_float_vector() == y.to_float_vector());
  CHECK(x.to_float_vector() != w.to_float_vector());
  Tensor u = Tensor::uniform({1000}, -1, 1, a);
  for (float v : u.to_float_vector()) CHECK((v >= -1 && v < 1));
}

TEST_CASE("core: errors name the operation and the shapes") {
  CHECK_THROWS_WITH_AS(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}),
                       doctest::Contains("from_vector: 3 values for shape [2, 2]"), Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}).item(), doctest::Contains("[2]"), Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}).data<double>(), doctest::Contains("float32"), Error);
  CHECK_THROWS_WITH_AS(Tensor().shape(), doctest::Contains("undefined"), Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2, 3}).view_as_shape({4}), doctest::Contains("[2, 3]"), Error);
  CHECK_THROWS_AS(Tensor::empty({-1}), Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({(int64_t{1} << 62) + 1, 4}), doctest::Contains("more than 2^63 elements"), Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}), doctest::Contains("2^63"), Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t{1} << 61, 4}), doctest::Contains("2^63"), Error);
  CHECK_THROWS_WITH_AS(Tensor::from_labels({1}, {1}).set_requires_grad(true), doctest::Contains("int64"), Error);
}
