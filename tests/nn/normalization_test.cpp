// nn::GroupNorm, nn::LayerNorm (parameters, defaults, forward as the ops, errors) and nn::Dropout,
// nn::Dropout3d (train / eval, options, errors).
#include <doctest/doctest.h>

#include "core/error.h"
#include "nn/dropout.h"
#include "nn/normalization.h"
#include "ops/dropout/dropout.h"
#include "ops/norm/layer_norm.h"
#include "ops/norm/norm.h"
#include "tests/check_error.h"

using namespace halfgrad;
using namespace halfgrad::testing;

TEST_CASE("nn: GroupNorm float32 defaults (eps 1e-5, affine true: weight 1, bias 0), forward is ops::group_norm") {
  nn::GroupNorm gn(nn::GroupNormOptions(2, 6));
  CHECK(gn.options.eps() == 1e-5);
  CHECK(gn.options.affine());
  CHECK(gn.weight.to_float_vector() == std::vector<float>(6, 1.f));
  CHECK(gn.bias.to_float_vector() == std::vector<float>(6, 0.f));
  Generator g(4);
  const Tensor x = Tensor::randn({2, 6, 3, 4}, g);
  CHECK(gn(x).to_float_vector() == ops::group_norm(x, 2, gn.weight, gn.bias).to_float_vector());
  nn::GroupNorm plain(nn::GroupNormOptions(3, 6).affine(false).eps(1e-3));
  CHECK_FALSE(plain.weight.defined());
  CHECK(plain.named_parameters().empty());
  CHECK(plain(x).to_float_vector() == ops::group_norm(x, 3, {}, {}, 1e-3).to_float_vector());
  CHECK(gn.extra_repr() == "2, 6, eps=1e-05, affine=true");
}

TEST_CASE("nn: GroupNorm errors: channels not divisible by groups, wrong input channels") {
  check_error([] { nn::GroupNorm(nn::GroupNormOptions(4, 6)); }, {"GroupNorm", "divisible by num_groups"});
  check_error([] { nn::GroupNorm(nn::GroupNormOptions(2, 6).eps(0)); }, {"GroupNorm", "eps"});
  nn::GroupNorm gn(nn::GroupNormOptions(2, 6));
  check_error([&] { gn(Tensor::zeros({2, 4, 3})); }, {"GroupNorm", "[2, 4, 3]", "(N, 6, *)"});
}

TEST_CASE("nn: LayerNorm float32 defaults (elementwise_affine: weight 1, bias 0 of normalized_shape), forward is ops::layer_norm") {
  nn::LayerNorm ln(nn::LayerNormOptions({3, 4}));
  CHECK(ln.weight.shape() == Shape{3, 4});
  CHECK(ln.bias.to_float_vector() == std::vector<float>(12, 0.f));
  Generator g(6);
  const Tensor x = Tensor::randn({2, 3, 4}, g);
  CHECK(ln(x).to_float_vector() == ops::layer_norm(x, {3, 4}, ln.weight, ln.bias).to_float_vector());
  nn::LayerNorm plain(nn::LayerNormOptions({4}).elementwise_affine(false).eps(1e-6));
  CHECK(plain.named_parameters().empty());
  CHECK(plain(x).to_float_vector() == ops::layer_norm(x, {4}, {}, {}, 1e-6).to_float_vector());
  CHECK(ln.extra_repr() == "[3, 4], eps=1e-05, elementwise_affine=true");
  check_error([] { nn::LayerNorm(nn::LayerNormOptions({})); }, {"LayerNorm", "at least one dim"});
  check_error([] { nn::LayerNorm(nn::LayerNormOptions({3, 0})); }, {"LayerNorm", "[3, 0]"});
}

TEST_CASE("nn: Dropout / Dropout3d drop in training, are the identity in eval(); p checked at construction") {
  Generator g(10), ref(10);
  nn::Dropout drop(nn::DropoutOptions(0.5), g);
  const Tensor x = Tensor::ones({8, 16});
  CHECK(drop(x).to_float_vector() == ops::dropout(x, 0.5, true, ref).to_float_vector());
  drop.eval();
  CHECK(drop(x).is_same(x));
  Generator g3(11), ref3(11);
  nn::Dropout3d drop3(0.25, g3);
  const Tensor v = Tensor::ones({2, 8, 2, 2, 2});
  CHECK(drop3(v).to_float_vector() == ops::dropout3d(v, 0.25, true, ref3).to_float_vector());
  drop3.eval();
  CHECK(drop3(v).is_same(v));
  CHECK(drop3.extra_repr() == "p=0.25");
  check_error([] { nn::Dropout(nn::DropoutOptions(1.2)); }, {"Dropout", "between 0 and 1", "1.2"});
  check_error([] { nn::Dropout3d(-0.5); }, {"Dropout3d", "between 0 and 1"});
}
