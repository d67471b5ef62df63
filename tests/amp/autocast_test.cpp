#include <doctest/doctest.h>

#include "amp/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

using namespace halfgrad;
using amp::OpKind;

TEST_CASE("amp: the policy table puts each op on PyTorch's list") {
  CHECK(amp::default_policy(OpKind::Conv3d) == amp::CastPolicy::Lower);
  CHECK(amp::default_policy(OpKind::Linear) == amp::CastPolicy::Lower);
  CHECK(amp::default_policy(OpKind::Softmax) == amp::CastPolicy::Fp32);
  CHECK(amp::default_policy(OpKind::BatchNorm) == amp::CastPolicy::Fp32);
  CHECK(amp::default_policy(OpKind::Sum) == amp::CastPolicy::Fp32);
  CHECK(amp::default_policy(OpKind::Add) == amp::CastPolicy::Promote);
  CHECK(amp::default_policy(OpKind::Relu) == amp::CastPolicy::None);
}

TEST_CASE("amp: autocast_dtype inside and outside a guard, nesting restores") {
  CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat32, kFloat32}) == kFloat32);
  {
    amp::AutocastGuard on;
    CHECK(amp::autocast_enabled());
#ifndef HALFGRAD_FORCE_FP32
    CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat32, kFloat32}) == kFloat16);
#endif
    CHECK(amp::autocast_dtype(OpKind::Softmax, {kFloat16}) == kFloat32);
    CHECK(amp::autocast_dtype(OpKind::Add, {kFloat16, kFloat32}) == kFloat32);
    CHECK(amp::autocast_dtype(OpKind::Add, {kFloat16, kFloat16}) == kFloat16);
    CHECK(amp::autocast_dtype(OpKind::Relu, {kFloat16}) == kFloat16);
    CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat64, kFloat64}) == kFloat64);
    {
      amp::AutocastGuard off(false);
      CHECK_FALSE(amp::autocast_enabled());
      CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat32, kFloat32}) == kFloat32);
    }
    CHECK(amp::autocast_enabled());
    bool prev = amp::set_op_fp32(OpKind::Conv3d, true);
    CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat32}) == kFloat32);
    amp::set_op_fp32(OpKind::Conv3d, prev);
  }
  CHECK_FALSE(amp::autocast_enabled());
}

TEST_CASE("amp: sum under autocast runs in FP32, add promotes") {
  Tensor h = Tensor::ones({8}, kFloat16), f = Tensor::ones({8}, kFloat32);
  amp::AutocastGuard on;
  CHECK(ops::sum(h).dtype() == kFloat32);
  CHECK((h + f).dtype() == kFloat32);
  CHECK((h + h).dtype() == kFloat16);
}
