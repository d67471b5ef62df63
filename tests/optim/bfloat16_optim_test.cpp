// BFloat16 parameters in the optimizers: an FP32 master weight (as for Float16), so the bf16
// parameter is exactly the FP32 run rounded to bfloat16; master_weights(false) refuses bf16; the
// state survives state_dict (tensor_json's "bfloat16"); clip_grad_norm_ scales bf16 gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "optim/tensor_json.h"

using namespace halfgrad;

namespace {
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}
const std::vector<float> kInit = {1.0f, -0.5f, 0.25f, 3.0f, -2.0f};
Tensor grad_at(int t) {
  std::vector<float> g(kInit.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7f * static_cast<float>(t + 1) * static_cast<float>(i + 1));
  return Tensor::from_vector(g, {static_cast<int64_t>(g.size())}, kBFloat16);
}
}  // namespace

TEST_CASE("optim: AdamW and SGD update a bf16 parameter through an FP32 master: the FP32 run rounded to bf16") {
  for (int which = 0; which < 2; ++which) {
    CAPTURE(which);
    Tensor pb = Tensor::from_vector(kInit, {5}, kBFloat16).set_requires_grad(true);
    Tensor pf = Tensor::from_vector(kInit, {5}, kFloat32).set_requires_grad(true);
    std::unique_ptr<optim::Optimizer> ob, of;
    if (which == 0) {
      ob = std::make_unique<optim::AdamW>(std::vector<Tensor>{pb}, optim::AdamWOptions().lr(1e-3));
      of = std::make_unique<optim::AdamW>(std::vector<Tensor>{pf}, optim::AdamWOptions().lr(1e-3));
    } else {
      ob = std::make_unique<optim::SGD>(std::vector<Tensor>{pb}, optim::SGDOptions(1e-3).momentum(0.9));
      of = std::make_unique<optim::SGD>(std::vector<Tensor>{pf}, optim::SGDOptions(1e-3).momentum(0.9));
    }
    for (int t = 0; t < 5; ++t) {
      pb.set_grad(grad_at(t));
      pf.set_grad(grad_at(t).cast_copy(kFloat32));
      ob->step();
      of->step();
      CHECK(pb.dtype() == kBFloat16);
      CHECK(same_bits(pb, pf.cast_copy(kBFloat16)));
    }
    // The FP32 run (= the master) holds bits the bf16 parameter cannot: updates of ~1e-3 are below
    // bf16's spacing near 1 (2^-8 below, 2^-7 above), which is why the master exists.
    int64_t differ = 0;
    for (int64_t i = 0; i < pb.numel(); ++i) differ += pb.item_at(i) != pf.item_at(i);
    CHECK(differ > 0);

    // The state (FP32 master, FP32 moments) round-trips through state_dict into a fresh optimizer.
    Tensor pc = Tensor::from_vector(kInit, {5}, kBFloat16).set_requires_grad(true);
    std::unique_ptr<optim::Optimizer> oc;
    if (which == 0) oc = std::make_unique<optim::AdamW>(std::vector<Tensor>{pc}, optim::AdamWOptions().lr(1e-3));
    else oc = std::make_unique<optim::SGD>(std::vector<Tensor>{pc}, optim::SGDOptions(1e-3).momentum(0.9));
    oc->load_state_dict(ob->state_dict());
    pb.set_grad(grad_at(9));
    pc.set_grad(grad_at(9));
    ob->step();
    oc->step();  // pc started from the initial values, but the restored master carries the run on
    CHECK(same_bits(pb, pc));
  }
}

TEST_CASE("optim: AdamW master_weights(false) refuses a bfloat16 parameter, naming it") {
  Tensor p = Tensor::from_vector(kInit, {5}, kBFloat16).set_requires_grad(true);
  optim::AdamW opt({p}, optim::AdamWOptions().lr(1e-3).master_weights(false));
  p.set_grad(grad_at(0));
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("bfloat16 parameter of shape [5] needs master_weights(true)"), Error);
}

TEST_CASE("optim: tensor_json keeps a bfloat16 tensor's dtype and bits") {
  const Tensor b = Tensor::from_vector(kInit, {5}, kBFloat16);
  const nlohmann::json j = optim::tensor_to_json(b);
  CHECK(j["dtype"] == "bfloat16");
  CHECK(same_bits(optim::tensor_from_json(j, "test"), b));
  nlohmann::json bad = j;
  bad["dtype"] = "bfloat17";
  CHECK_THROWS_WITH_AS(optim::tensor_from_json(bad, "test"), doctest::Contains("float16, bfloat16, float64"), Error);
}

TEST_CASE("optim: clip_grad_norm_ takes bfloat16 gradients: the norm as torch.norm gives it, scaled in float") {
  Tensor p = Tensor::zeros({4}, kBFloat16).set_requires_grad(true);
  p.set_grad(Tensor::from_vector(std::vector<float>{3, 4, 0, 0}, {4}, kBFloat16));
  const double norm = optim::clip_grad_norm_({p}, 1.0);
  CHECK(norm == 5.0);
  CHECK(p.grad().dtype() == kBFloat16);
  const double coef = (1.0f / (5.0f + 1e-6f)) * 1.0f;
  CHECK(p.grad().item_at(0) == round_to_bfloat16(3.0f * static_cast<float>(coef)));
  CHECK(p.grad().item_at(1) == round_to_bfloat16(4.0f * static_cast<float>(coef)));
}
