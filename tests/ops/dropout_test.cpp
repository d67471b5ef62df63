// dropout and dropout3d: the masks cannot match PyTorch's RNG, so these tests check what defines
// dropout instead: the kept fraction ~ 1 - p (a binomial bound), the 1 / (1 - p) scale, the backward
// reusing the forward's mask, eval / p = 0 identity, p = 1 zeros, whole channels for dropout3d,
// the mask as a pure function of the seed (same seed same bits, any thread count, float16 the same
// mask), and the errors.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>

#include "autocast/autocast.h"
#include "core/error.h"
#include "ops/dropout/dropout.h"
#include "tests/check_error.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
// Fraction of nonzero values.
double kept_fraction(const Tensor& y) {
  const std::vector<float> v = y.to_float_vector();
  int64_t kept = 0;
  for (float e : v) kept += e != 0.f;
  return static_cast<double>(kept) / static_cast<double>(v.size());
}
}  // namespace

TEST_CASE("ops: dropout float32 (64, 1024): kept fraction within 5 sigma of 1 - p, kept values scaled by 1/(1-p)") {
  const Tensor x = Tensor::full({64, 1024}, 1.0);
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    Generator g(123);
    const Tensor y = ops::dropout(x, p, true, g);
    const double n = static_cast<double>(x.numel()), sigma = std::sqrt(p * (1 - p) / n);
    CHECK(std::fabs(kept_fraction(y) - (1 - p)) < 5 * sigma);
    for (float v : y.to_float_vector()) {
      if (v == 0.f) continue;
      CHECK(v == static_cast<float>(1.0 / (1.0 - p)));
    }
  }
}

TEST_CASE("ops: dropout backward uses the forward's mask and scale (float32 and float64)") {
  for (Dtype dt : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dt));
    Generator g(9);
    Tensor x = Tensor::randn({4, 5, 6}, g, dt).set_requires_grad(true);
    Tensor y = ops::dropout(x, 0.3, true, g);
    const Tensor gy = Tensor::randn({4, 5, 6}, g, dt);
    y.backward(gy);
    const std::vector<double> xv = x.to_double_vector(), yv = y.to_double_vector(), gv = gy.to_double_vector(),
                              dx = x.grad().to_double_vector();
    const double scale = dt == kFloat64 ? 1.0 / 0.7 : static_cast<float>(1.0 / 0.7);
    for (size_t i = 0; i < xv.size(); ++i) {
      const bool kept = yv[i] != 0.0;
      CHECK(yv[i] == doctest::Approx(kept ? xv[i] * scale : 0.0).epsilon(1e-6));
      CHECK(dx[i] == doctest::Approx(kept ? gv[i] * scale : 0.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("ops: dropout is the identity in eval and for p = 0; p = 1 gives zeros and zero gradients") {
  Generator g(1);
  Tensor x = Tensor::randn({3, 4}, g).set_requires_grad(true);
  CHECK(ops::dropout(x, 0.5, false, g).is_same(x));
  CHECK(ops::dropout(x, 0.0, true, g).is_same(x));
  CHECK(ops::dropout3d(x.detach().view_as_shape({1, 3, 2, 2, 1}), 0.5, false, g).to_float_vector() ==
        x.to_float_vector());
  Tensor y = ops::dropout(x, 1.0, true, g);
  CHECK(kept_fraction(y) == 0.0);
  y.backward(Tensor::ones({3, 4}));
  CHECK(kept_fraction(x.grad()) == 0.0);
}

TEST_CASE("ops: dropout3d float32 (4, 16, 3, 4, 5): each (n, c) channel kept or zeroed whole; fraction ~ 1 - p") {
  Generator g(77);
  const Tensor x = Tensor::full({4, 16, 3, 4, 5}, 2.0);
  const Tensor y = ops::dropout3d(x, 0.4, true, g);
  const std::vector<float> v = y.to_float_vector();
  const int64_t S = 60;
  int64_t kept = 0;
  for (int64_t k = 0; k < 64; ++k) {
    const float first = v[k * S];
    CHECK((first == 0.f || first == static_cast<float>(2.0 * static_cast<float>(1.0 / 0.6))));
    for (int64_t i = 1; i < S; ++i) CHECK(v[k * S + i] == first);
    kept += first != 0.f;
  }
  // 64 channels, p = 0.4: sigma = sqrt(64 * 0.24) = 3.9 channels.
  CHECK(std::abs(kept - 38) <= 20);
}

TEST_CASE("ops: dropout mask is a pure function of the seed: same seed same bits, thread count, float16 same mask") {
  const Tensor x = Tensor::full({8, 3, 40, 40, 40}, 1.0);  // 1.5 M values: above the parallel threshold
  Generator g1(5), g2(5);
  const std::vector<float> a = ops::dropout(x, 0.25, true, g1).to_float_vector();
  const int prev = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> b = ops::dropout(x, 0.25, true, g2).to_float_vector();
  omp_set_num_threads(prev);
  CHECK(a == b);
  Generator g3(5);
  const std::vector<float> h = ops::dropout(x.cast_copy(kFloat16), 0.25, true, g3).to_float_vector();
  bool same_mask = true;
  for (size_t i = 0; i < a.size(); ++i) same_mask = same_mask && ((a[i] == 0.f) == (h[i] == 0.f));
  CHECK(same_mask);
  Generator g4(6);
  CHECK(ops::dropout(x, 0.25, true, g4).to_float_vector() != a);  // another seed, another mask
}

TEST_CASE("ops: dropout keeps float16 under autocast (no list); NaN stays NaN where dropped (x * 0, as PyTorch)") {
  Generator g(2);
  amp::AutocastGuard on;
  CHECK(ops::dropout(Tensor::ones({16}, kFloat16), 0.5, true, g).dtype() == kFloat16);
  const Tensor y = ops::dropout(Tensor::full({64}, std::nan("")), 0.5, true, g);
  for (float v : y.to_float_vector()) CHECK(std::isnan(v));
}

TEST_CASE("ops: dropout errors: p outside [0, 1], dropout3d of a 4-D input, an int64 input") {
  Generator g(0);
  const Tensor x = Tensor::zeros({2, 3});
  check_error([&] { ops::dropout(x, 1.5, true, g); }, {"dropout", "between 0 and 1", "1.5"});
  check_error([&] { ops::dropout(x, -0.1, true, g); }, {"dropout", "between 0 and 1"});
  check_error([&] { ops::dropout(x, std::nan(""), true, g); }, {"dropout", "between 0 and 1"});
  check_error([&] { ops::dropout3d(Tensor::zeros({2, 3, 4, 5}), 0.5, true, g); }, {"dropout3d", "5-D"});
  check_error([&] { ops::dropout(Tensor::from_labels({1}, {1}), 0.5, true, g); }, {"dropout", "floating"});
}
