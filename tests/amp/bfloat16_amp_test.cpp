// BF16 autocast regions (AutocastOptions().dtype(kBFloat16)): the region's lower dtype, nesting, the
// Lower ops running in BF16, the weight-cast cache keyed by target dtype; and GradScaler with BF16
// (not needed: one note on std::cerr, and it still works).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/node.h"
#include "core/error.h"
#include "ops/conv/conv3d.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "ops/softmax/softmax.h"
#include "optim/sgd.h"

using namespace halfgrad;
using amp::OpKind;

namespace {
struct CerrCapture {
  std::ostringstream text;
  std::streambuf* old;
  CerrCapture() : old(std::cerr.rdbuf(text.rdbuf())) {}
  ~CerrCapture() { std::cerr.rdbuf(old); }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

#if defined(HALFGRAD_FORCE_FP32)
constexpr bool kForceFp32 = true;
#else
constexpr bool kForceFp32 = false;
#endif
}  // namespace

TEST_CASE("amp: AutocastOptions defaults, chaining, and a dtype that is not 16-bit throws") {
  const amp::AutocastOptions o;
  CHECK(o.dtype() == kFloat16);
  CHECK(o.enabled());
  CHECK(o.cache_enabled());
  const amp::AutocastOptions b = amp::AutocastOptions().dtype(kBFloat16).enabled(false).cache_enabled(false);
  CHECK(b.dtype() == kBFloat16);
  CHECK_FALSE(b.enabled());
  CHECK_FALSE(b.cache_enabled());
  CHECK_THROWS_WITH_AS(amp::AutocastOptions().dtype(kFloat32), doctest::Contains("float16 or bfloat16"), Error);
  CHECK_THROWS_AS(amp::AutocastOptions().dtype(kFloat64), Error);
}

TEST_CASE("amp: a bfloat16 region lowers the Lower list to bf16; nesting keeps or replaces the dtype and restores it") {
  if (kForceFp32) return;  // a HALFGRAD_FORCE_FP32 build lowers to float32 whatever the region says
  CHECK(amp::autocast_lower_dtype() == kFloat16);  // outside any guard
  {
    amp::AutocastGuard bf(amp::AutocastOptions().dtype(kBFloat16));
    CHECK(amp::autocast_enabled());
    CHECK(amp::autocast_lower_dtype() == kBFloat16);
    CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat32, kFloat32}) == kBFloat16);
    CHECK(amp::autocast_dtype(OpKind::Matmul, {kFloat16, kFloat32}) == kBFloat16);
    CHECK(amp::autocast_dtype(OpKind::Softmax, {kBFloat16}) == kFloat32);  // the FP32 list is the same
    CHECK(amp::autocast_dtype(OpKind::Add, {kBFloat16, kBFloat16}) == kBFloat16);
    CHECK(amp::autocast_dtype(OpKind::Add, {kBFloat16, kFloat16}) == kFloat32);  // promote: f16 with bf16
    CHECK(amp::autocast_dtype(OpKind::Relu, {kBFloat16}) == kBFloat16);
    CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat64}) == kFloat64);
    {
      amp::AutocastGuard plain;  // the bool constructor keeps the enclosing dtype
      CHECK(amp::autocast_lower_dtype() == kBFloat16);
    }
    {
      amp::AutocastGuard fp16(amp::AutocastOptions().dtype(kFloat16));
      CHECK(amp::autocast_dtype(OpKind::Linear, {kFloat32}) == kFloat16);
    }
    {
      amp::AutocastGuard off(amp::AutocastOptions().enabled(false));
      CHECK_FALSE(amp::autocast_enabled());
      CHECK(amp::autocast_dtype(OpKind::Conv3d, {kFloat32}) == kFloat32);
    }
    CHECK(amp::autocast_enabled());
    CHECK(amp::autocast_lower_dtype() == kBFloat16);
  }
  CHECK_FALSE(amp::autocast_enabled());
  CHECK(amp::autocast_lower_dtype() == kFloat16);
}

TEST_CASE("amp: Lower ops (matmul, linear, conv3d) run in bf16 inside a bf16 region; softmax and sum in FP32") {
  if (kForceFp32) return;
  Generator g(5);
  const Tensor a = Tensor::randn({4, 6}, g), b = Tensor::randn({6, 3}, g);
  const Tensor x = Tensor::randn({1, 2, 4, 4, 4}, g), w = Tensor::randn({3, 2, 3, 3, 3}, g);
  amp::AutocastGuard bf(amp::AutocastOptions().dtype(kBFloat16));
  const Tensor y = ops::matmul(a, b);
  CHECK(y.dtype() == kBFloat16);
  // The bf16 product of the bf16-rounded operands, accumulated in FP32 and rounded once.
  const Tensor ref = [&] {
    amp::AutocastGuard off(false);
    return ops::matmul(a.cast_copy(kBFloat16).cast_copy(kFloat32), b.cast_copy(kBFloat16).cast_copy(kFloat32));
  }();
  for (int64_t i = 0; i < y.numel(); ++i) CHECK(y.item_at(i) == round_to_bfloat16(static_cast<float>(ref.item_at(i))));
  CHECK(ops::linear(a, Tensor::randn({5, 6}, g), Tensor::zeros({5})).dtype() == kBFloat16);
  CHECK(ops::conv3d(x, w, Tensor(), ops::Conv3dParams().padding(1)).dtype() == kBFloat16);
  CHECK(ops::softmax(y, 1).dtype() == kFloat32);
  CHECK(ops::sum(y).dtype() == kFloat32);
}

TEST_CASE("amp: the weight-cast cache keys on the target dtype: bf16 and f16 copies of one weight are separate") {
  if (kForceFp32) return;
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}).set_requires_grad(true);
  const Tensor x = Tensor::full({1, 3}, 1.0 / 3);  // 1/3 differs in f16 and bf16
  Tensor loss;
  {
    amp::AutocastGuard bf(amp::AutocastOptions().dtype(kBFloat16));
    const Tensor y1 = ops::matmul(x, w);
    REQUIRE(amp::cast_cache_size() == 1);
    const Tensor cached = amp::cast_cache_lookup(w);  // the region's dtype
    REQUIRE(cached.defined());
    CHECK(cached.dtype() == kBFloat16);
    CHECK(cached.is_same(amp::cast_cache_lookup(w, kBFloat16)));
    CHECK_FALSE(amp::cast_cache_lookup(w, kFloat16).defined());
    const Tensor y2 = ops::matmul(x, w);
    CHECK(y2.grad_fn()->inputs[1].grad_fn == cached.grad_fn());  // the second read reuses the bf16 copy
    Tensor y3;
    {
      amp::AutocastGuard h(amp::AutocastOptions().dtype(kFloat16));
      y3 = ops::matmul(x, w);
      CHECK(y3.dtype() == kFloat16);
      CHECK(amp::cast_cache_size() == 2);  // an FP16 copy beside the BF16 one, not the BF16 one served
      CHECK(amp::cast_cache_lookup(w, kFloat16).dtype() == kFloat16);
      CHECK(y3.grad_fn()->inputs[1].grad_fn != cached.grad_fn());
    }
    CHECK(amp::cast_cache_size() == 2);  // emptied only by the outermost enabled guard
    loss = ops::sum(y1) + ops::sum(y2) + ops::sum(y3);
  }
  CHECK(amp::cast_cache_size() == 0);
  loss.backward();
  REQUIRE(w.grad().dtype() == kFloat32);
  // d/dw of three sums of x w: 3 * x^T 1; x = 1/3 rounded to bf16 (twice) and to f16 (once).
  const double xb = round_to_bfloat16(1.0f / 3), xh = round_to_half(1.0f / 3);
  for (int64_t i = 0; i < 6; ++i) CHECK(w.grad().item_at(i) == doctest::Approx(2 * xb + xh).epsilon(1e-2));
}

TEST_CASE("amp: GradScaler with bf16 gradients notes once that it is not needed, and steps as without it") {
  const std::vector<float> init = {1.0f, -0.5f, 0.25f, 3.0f};
  const Tensor G = Tensor::from_vector(std::vector<float>{0.5f, -0.25f, 1e-9f, 2.0f}, {4}, kBFloat16);
  Tensor p = Tensor::from_vector(init, {4}, kBFloat16).set_requires_grad(true);
  Tensor q = Tensor::from_vector(init, {4}, kBFloat16).set_requires_grad(true);
  optim::SGD opt_p({p}, optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt_q({q}, optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024));
  CerrCapture cap;
  for (int t = 0; t < 3; ++t) {
    opt_p.zero_grad();
    scaler.scale(ops::sum(ops::mul(p, G))).backward();
    REQUIRE(p.grad().dtype() == kBFloat16);
    CHECK(p.grad().item_at(2) == round_to_bfloat16(1024 * round_to_bfloat16(1e-9f)));  // no underflow in bf16
    scaler.unscale_(opt_p);
    CHECK(p.grad().dtype() == kBFloat16);  // unscaled in place
    CHECK(same_bits(p.grad(), G));         // exactly: the scale is a power of two
    CHECK(scaler.step(opt_p));
    scaler.update();
    opt_q.zero_grad();
    ops::sum(ops::mul(q, G)).backward();
    opt_q.step();
    CHECK(same_bits(p, q));  // the scaler changed nothing
  }
  CHECK(scaler.bf16_note_written());
  const std::string text = cap.text.str();
  CHECK(text.find("FP32's exponent range") != std::string::npos);
  CHECK(text.find("GradScaler: note") == text.rfind("GradScaler: note"));  // once
}

TEST_CASE("amp: GradScaler notes a bf16 autocast region at scale(), not an FP16 one") {
  if (kForceFp32) return;
  const Tensor loss = Tensor::scalar(2.0).set_requires_grad(true);
  {
    CerrCapture cap;
    amp::GradScaler scaler;
    amp::AutocastGuard h;
    const Tensor s = scaler.scale(loss);
    CHECK(s.item() == 2.0 * 65536);
    CHECK_FALSE(scaler.bf16_note_written());
    CHECK(cap.text.str().empty());
  }
  CerrCapture cap;
  amp::GradScaler scaler;
  amp::AutocastGuard bf(amp::AutocastOptions().dtype(kBFloat16));
  CHECK(scaler.scale(loss).item() == 2.0 * 65536);  // still scales
  CHECK(scaler.bf16_note_written());
  CHECK(cap.text.str().find("the autocast region is bfloat16") != std::string::npos);
  amp::GradScaler off(amp::GradScalerOptions().enabled(false));
  off.scale(loss);
  CHECK_FALSE(off.bf16_note_written());  // a disabled scaler says nothing
}
