#include <doctest/doctest.h>

#include <set>
#include <string>
#include <thread>

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "core/error.h"
#include "ops/activation/activation.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"

using namespace halfgrad;
using amp::OpKind;

TEST_CASE("amp: the policy table puts each op on PyTorch's list") {
  CHECK(amp::default_policy(OpKind::Conv3d) == amp::CastPolicy::Lower);
  CHECK(amp::default_policy(OpKind::Linear) == amp::CastPolicy::Lower);
  CHECK(amp::default_policy(OpKind::Softmax) == amp::CastPolicy::Fp32);
  // As PyTorch: batch_norm / instance_norm are on no autocast list (FP16 in, FP16 out, FP32 statistics).
  CHECK(amp::default_policy(OpKind::BatchNorm) == amp::CastPolicy::None);
  CHECK(amp::default_policy(OpKind::InstanceNorm) == amp::CastPolicy::None);
  CHECK(amp::default_policy(OpKind::Sum) == amp::CastPolicy::Fp32);
  CHECK(amp::default_policy(OpKind::Add) == amp::CastPolicy::Promote);
  CHECK(amp::default_policy(OpKind::Relu) == amp::CastPolicy::None);
}

TEST_CASE("amp: one precision table: every OpKind has one row, in order, with a unique name") {
  static_assert(amp::kOpTable[static_cast<size_t>(OpKind::Conv3d)].kind == OpKind::Conv3d, "rows in enum order");
  std::set<std::string> names;
  for (size_t k = 0; k < static_cast<size_t>(OpKind::kCount); ++k) {
    const amp::OpRecord& r = amp::kOpTable[k];
    CAPTURE(r.name);
    CHECK(static_cast<size_t>(r.kind) == k);
    CHECK(names.insert(r.name).second);
    CHECK(std::string(amp::op_kind_name(r.kind)) == r.name);
    CHECK(amp::op_kind_from_name(r.name) == r.kind);
    CHECK(amp::find_op_record(r.name) == &r);
    CHECK(std::string(r.why).size() > 0);
    // An op on no list casts nothing; a loss casts its logits only.
    if (r.policy == amp::CastPolicy::None) CHECK(r.inputs == amp::CastInputs::None);
  }
  CHECK(amp::find_op_record("no_such_op") == nullptr);
  CHECK(std::string(amp::op_record(OpKind::CrossEntropy).enum_name) == "CrossEntropy");
  CHECK(amp::op_record(OpKind::CrossEntropy).inputs == amp::CastInputs::First);
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

TEST_CASE("amp: op_kind_from_name inverts op_kind_name and lists the names for an unknown one") {
  for (size_t k = 0; k < static_cast<size_t>(OpKind::kCount); ++k)
    CHECK(amp::op_kind_from_name(amp::op_kind_name(static_cast<OpKind>(k))) == static_cast<OpKind>(k));
  CHECK_THROWS_WITH_AS(amp::op_kind_from_name("convolution"), doctest::Contains("conv_transpose3d"), Error);
}

TEST_CASE("amp: set_op_fp32 refuses the kinds whose ops never ask the table (relu, view, ...), naming the op") {
  for (OpKind k : {OpKind::Relu, OpKind::LeakyRelu, OpKind::MaxPool3d, OpKind::Reshape, OpKind::View, OpKind::Permute,
                   OpKind::NllLoss}) {
    CAPTURE(amp::op_kind_name(k));
    CHECK_THROWS_WITH_AS(amp::set_op_fp32(k, true), doctest::Contains(amp::op_kind_name(k)), Error);
    CHECK(amp::policy(k) == amp::default_policy(k));  // the refused override left nothing behind
    CHECK_FALSE(amp::set_op_fp32(k, false));           // moving it back to its default list is always fine
  }
  CHECK_FALSE(amp::set_op_fp32(OpKind::Softmax, true));  // an op that asks: accepted
  CHECK(amp::set_op_fp32(OpKind::Softmax, false));
}

TEST_CASE("amp: inner AutocastGuard(false) runs float32 matmul and float16 sum in their inputs' types; outer state returns") {
  Tensor a = Tensor::ones({2, 4}), b = Tensor::ones({4, 3}), h = Tensor::ones({5}, kFloat16);
  amp::AutocastGuard on;
#ifndef HALFGRAD_FORCE_FP32
  CHECK(ops::matmul(a, b).dtype() == kFloat16);
#endif
  {
    amp::AutocastGuard off(false);
    CHECK_FALSE(amp::autocast_enabled());
    CHECK(ops::matmul(a, b).dtype() == kFloat32);
    CHECK(ops::matmul(a.cast_copy(kFloat16), b.cast_copy(kFloat16)).dtype() == kFloat16);
    CHECK(ops::sum(h).dtype() == kFloat16);  // FP32 list, but autocast is off: the input's type
    {
      amp::AutocastGuard on_again;  // regions nest both ways
      CHECK(ops::sum(h).dtype() == kFloat32);
    }
    CHECK_FALSE(amp::autocast_enabled());
  }
  CHECK(amp::autocast_enabled());
#ifndef HALFGRAD_FORCE_FP32
  CHECK(ops::matmul(a, b).dtype() == kFloat16);
#endif
}

TEST_CASE("amp: autocast state is per thread; another std::thread does not see this thread's guard or FP32 list") {
  amp::AutocastGuard on;
  const bool prev = amp::set_op_fp32(OpKind::Matmul, true);
  bool other_enabled = true, other_sees_fp32 = true;
  Dtype other_dtype = kFloat64;
  std::thread t([&] {
    other_enabled = amp::autocast_enabled();
    other_sees_fp32 = amp::policy(OpKind::Matmul) == amp::CastPolicy::Fp32;
    amp::AutocastGuard there;  // a guard on the other thread changes nothing here
    other_dtype = amp::autocast_dtype(OpKind::Matmul, {kFloat32});
  });
  t.join();
  CHECK_FALSE(other_enabled);
  CHECK_FALSE(other_sees_fp32);
  CHECK(other_dtype == amp::autocast_lower_dtype());
  CHECK(amp::autocast_enabled());
  CHECK(amp::autocast_dtype(OpKind::Matmul, {kFloat32}) == kFloat32);  // this thread's FP32 list entry
  amp::set_op_fp32(OpKind::Matmul, prev);
}

#ifndef HALFGRAD_FORCE_FP32  // with FP32 forced nothing is lowered, so nothing is cached

TEST_CASE("amp: weight-cast cache: an FP32 weight read by two matmuls in one region is cast to FP16 once; its grad sums both") {
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}).set_requires_grad(true);
  Tensor x1 = Tensor::ones({1, 3}), x2 = Tensor::full({1, 3}, 2.0);
  Tensor loss;
  {
    amp::AutocastGuard on;
    CHECK(amp::cast_cache_size() == 0);
    Tensor y1 = ops::matmul(x1, w);
    REQUIRE(amp::cast_cache_size() == 1);
    const Tensor cached = amp::cast_cache_lookup(w);
    REQUIRE(cached.defined());
    CHECK(cached.dtype() == kFloat16);
    Tensor y2 = ops::matmul(x2, w);
    CHECK(amp::cast_cache_size() == 1);
    // Both matmuls read the one FP16 copy: it is the second input of each product's tape node.
    CHECK(y1.grad_fn()->inputs[1].grad_fn == cached.grad_fn());
    CHECK(y2.grad_fn()->inputs[1].grad_fn == cached.grad_fn());
    loss = ops::sum(y1) + ops::sum(y2);
  }
  CHECK(amp::cast_cache_size() == 0);  // emptied when the region closed
  loss.backward();
  REQUIRE(w.grad().dtype() == kFloat32);
  // d/dw sum(x1 w) + sum(x2 w) = (x1 + x2)^T 1 = 3 everywhere
  for (int64_t i = 0; i < 6; ++i) CHECK(w.grad().item_at(i) == 3.0);
}

TEST_CASE("amp: weight-cast cache survives an inner disabled guard, is emptied only by the outermost enabled one") {
  Tensor w = Tensor::ones({3, 2}).set_requires_grad(true), x = Tensor::ones({1, 3});
  {
    amp::AutocastGuard outer;
    ops::matmul(x, w);
    {
      amp::AutocastGuard fp32_region(false);
      CHECK(ops::matmul(x, w).dtype() == kFloat32);  // autocast off: no FP16 copy is made or used
      {
        amp::AutocastGuard inner;
        ops::matmul(x, w);
        CHECK(amp::cast_cache_size() == 1);
      }
      CHECK(amp::cast_cache_size() == 1);  // the outer enabled region is still open
    }
    CHECK(amp::cast_cache_size() == 1);
    {
      amp::AutocastGuard no_cache(true, /*cache_enabled=*/false);
      Tensor y = ops::matmul(x, w);
      CHECK(y.grad_fn()->inputs[1].grad_fn != amp::cast_cache_lookup(w).grad_fn());  // a fresh cast, its own node
    }
  }
  CHECK(amp::cast_cache_size() == 0);
  // Frozen weights (requires_grad false), FP16 and non-leaf tensors are not cached, as PyTorch.
  Tensor frozen = Tensor::ones({3, 2}), nonleaf = ops::relu(w);
  amp::AutocastGuard on;
  ops::matmul(x, frozen);
  ops::matmul(x, nonleaf);
  ops::matmul(x, w.cast_copy(kFloat16));
  CHECK(amp::cast_cache_size() == 0);
}

TEST_CASE("amp: weight-cast cache: a NoGradGuard forward then a grad forward in one region gives the weight its gradient") {
  Tensor w = Tensor::ones({3, 2}).set_requires_grad(true), x = Tensor::ones({1, 3});
  Tensor loss;
  {
    amp::AutocastGuard on;
    {
      NoGradGuard no_grad;
      Tensor y = ops::matmul(x, w);  // e.g. an EMA or validation forward first
      CHECK_FALSE(y.requires_grad());
    }
    CHECK(amp::cast_cache_size() == 0);  // a tape-less copy is not cached (pytorch/pytorch#65766)
    loss = ops::sum(ops::matmul(x, w));
    CHECK(amp::cast_cache_size() == 1);
  }
  REQUIRE(loss.requires_grad());
  loss.backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().item_at(0) == 1.0);
}

TEST_CASE("amp: weight-cast cache casts again after a backward inside the region consumed the cached cast's node") {
  Tensor w = Tensor::ones({3, 2}).set_requires_grad(true), x = Tensor::ones({1, 3});
  amp::AutocastGuard on;
  ops::sum(ops::matmul(x, w)).backward();
  const Tensor first = amp::cast_cache_lookup(w);
  REQUIRE(first.grad_fn()->freed);
  ops::sum(ops::matmul(x, w)).backward();  // would throw "backward through the graph a second time"
  CHECK_FALSE(amp::cast_cache_lookup(w).is_same(first));
  CHECK(w.grad().item_at(0) == 2.0);
}

#endif  // HALFGRAD_FORCE_FP32
