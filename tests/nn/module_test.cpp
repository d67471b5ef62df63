// Module base and containers: registration, naming and ordering, train/eval, zero_grad, to(dtype).
#include <doctest/doctest.h>

#include <cstring>
#include <sstream>

#include "autocast/autocast.h"
#include "core/error.h"
#include "nn/nn.h"
#include "ops/ops.h"

using namespace halfgrad;

namespace {

// A module with one parameter, one buffer and a child, to check the walk order.
struct Leafy : nn::Module {
  Leafy() : Module("Leafy") {
    w = register_parameter("w", Tensor::ones({2}));
    b = register_buffer("count", Tensor::zeros({}, kInt64));
  }
  Tensor forward(const Tensor& x) override { return ops::mul(x, w); }
  Tensor w, b;
};

struct Tree : nn::Module {
  Tree() : Module("Tree") {
    own = register_parameter("own", Tensor::zeros({3}));
    first = register_module("first", std::make_shared<Leafy>());
    second = register_module("second", std::make_shared<nn::Sequential>());
    second->push_back(std::make_shared<Leafy>());
    second->push_back(std::make_shared<nn::ReLU>());
    second->push_back(std::make_shared<Leafy>());
    stat = register_buffer("stat", Tensor::ones({1}));
  }
  Tensor own, stat;
  std::shared_ptr<Leafy> first;
  std::shared_ptr<nn::Sequential> second;
};

std::vector<std::string> names(const nn::NamedTensors& ts) {
  std::vector<std::string> out;
  for (auto& p : ts) out.push_back(p.first);
  return out;
}

}  // namespace

TEST_CASE("nn: Module named_parameters/named_buffers use dotted names in registration order, own first") {
  auto t = std::make_shared<Tree>();
  CHECK(names(t->named_parameters()) == std::vector<std::string>{"own", "first.w", "second.0.w", "second.2.w"});
  CHECK(names(t->named_buffers()) == std::vector<std::string>{"stat", "first.count", "second.0.count", "second.2.count"});
  CHECK(names(t->named_parameters(/*recurse=*/false)) == std::vector<std::string>{"own"});
  CHECK(t->parameters().size() == 4);
  CHECK(t->buffers().size() == 4);
  CHECK(t->num_parameters() == 3 + 2 + 2 + 2);
  // The returned handles are the members themselves (same TensorImpl), and parameters require grad.
  CHECK(t->parameters()[1].is_same(t->first->w));
  for (auto& p : t->parameters()) CHECK(p.requires_grad());
  CHECK_FALSE(t->stat.requires_grad());

  std::vector<std::string> mods;
  for (auto& [n, m] : t->named_modules()) mods.push_back(n + ":" + m->name());
  CHECK(mods == std::vector<std::string>{":Tree", "first:Leafy", "second:Sequential", "second.0:Leafy",
                                         "second.1:ReLU", "second.2:Leafy"});
  CHECK(t->children().size() == 2);
  CHECK(t->named_children()[1].first == "second");
}

TEST_CASE("nn: Module register_* rejects empty, dotted and duplicate names and bad tensors") {
  nn::Module m;
  m.register_parameter("a", Tensor::zeros({1}));
  CHECK_THROWS_AS(m.register_parameter("a", Tensor::zeros({1})), Error);
  CHECK_THROWS_AS(m.register_buffer("a", Tensor::zeros({1})), Error);
  CHECK_THROWS_AS(m.register_module("a", std::make_shared<nn::ReLU>()), Error);
  CHECK_THROWS_AS(m.register_parameter("x.y", Tensor::zeros({1})), Error);
  CHECK_THROWS_AS(m.register_parameter("", Tensor::zeros({1})), Error);
  CHECK_THROWS_AS(m.register_parameter("i", Tensor::zeros({1}, kInt64)), Error);
  CHECK_THROWS_AS(m.register_parameter("u", Tensor()), Error);
  CHECK_THROWS_AS(m.register_module("n", std::shared_ptr<nn::ReLU>()), Error);
  // A non-leaf (the output of an op on a tensor requiring grad) cannot be a parameter.
  Tensor leaf = Tensor::ones({2});
  leaf.set_requires_grad(true);
  CHECK_THROWS_AS(m.register_parameter("nl", ops::mul(leaf, leaf)), Error);
  CHECK(m.named_parameters().size() == 1);  // failed registrations left nothing behind
  // register_parameter(.., requires_grad=false) keeps it out of the tape.
  CHECK_FALSE(m.register_parameter("frozen", Tensor::zeros({1}), false).requires_grad());
  CHECK_THROWS_WITH_AS(m.forward(Tensor::zeros({1})), doctest::Contains("no forward"), Error);
}

TEST_CASE("nn: Module train()/eval() switch the whole tree") {
  auto t = std::make_shared<Tree>();
  CHECK(t->is_training());
  t->eval();
  for (auto& m : t->modules()) CHECK_FALSE(m->is_training());
  t->train();
  for (auto& m : t->modules()) CHECK(m->is_training());
}

TEST_CASE("nn: Module zero_grad set_to_none drops .grad; set_to_none=false zero-fills it") {
  auto leafy = std::make_shared<Leafy>();
  ops::sum(leafy->forward(Tensor::full({2}, 3.0))).backward();
  REQUIRE(leafy->w.grad().defined());
  CHECK(leafy->w.grad().to_float_vector() == std::vector<float>{3, 3});
  Tensor g = leafy->w.grad();
  leafy->zero_grad(/*set_to_none=*/false);
  CHECK(leafy->w.grad().is_same(g));
  CHECK(leafy->w.grad().to_float_vector() == std::vector<float>{0, 0});
  leafy->zero_grad();
  CHECK_FALSE(leafy->w.grad().defined());
  leafy->zero_grad();  // nothing to clear: no error
}

TEST_CASE("nn: Module to(float16) casts floating parameters and buffers in place, keeping leaves") {
  auto bn = std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(2));
  Tensor w = bn->weight;
  w.set_grad(Tensor::full({2}, 0.5));
  bn->to(kFloat16);
  CHECK(w.is_same(bn->parameters()[0]));
  CHECK(w.dtype() == kFloat16);
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
  CHECK(w.grad().dtype() == kFloat16);
  CHECK(w.to_float_vector() == std::vector<float>{1, 1});
  CHECK(bn->running_var.dtype() == kFloat16);
  CHECK(bn->num_batches_tracked.dtype() == kInt64);  // integer buffers are left alone
  bn->to(kFloat32);
  CHECK(w.dtype() == kFloat32);
  CHECK_THROWS_AS(bn->to(kInt64), Error);
}

TEST_CASE("nn: Sequential chains forward and names its children 0, 1, ...") {
  auto seq = std::make_shared<nn::Sequential>();
  auto l = seq->push_back(std::make_shared<Leafy>());
  seq->push_back(std::make_shared<nn::ReLU>());
  l->w.fill_(-2.0);
  Tensor y = seq->forward(Tensor::from_vector(std::vector<float>{1, -1}, {2}));
  CHECK(y.to_float_vector() == std::vector<float>{0, 2});
  CHECK(seq->size() == 2);
  CHECK((*seq)[1]->name() == "ReLU");
  CHECK_THROWS_AS((*seq)[2], Error);
  CHECK(names(seq->named_parameters()) == std::vector<std::string>{"0.w"});

  nn::Sequential listed{std::make_shared<nn::LeakyReLU>(nn::LeakyReLUOptions().negative_slope(0.5)),
                        std::make_shared<nn::LeakyReLU>(nn::LeakyReLUOptions().negative_slope(0.5))};
  CHECK(listed.forward(Tensor::from_vector(std::vector<float>{-1}, {1})).item() == doctest::Approx(-0.25));

  nn::ModuleList list;
  list.push_back(std::make_shared<nn::ReLU>());
  CHECK_THROWS_AS(list.forward(Tensor::zeros({1})), Error);
}

TEST_CASE("nn: Module prints as a PyTorch-style tree") {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 3).padding(1).bias(false)));
  seq->push_back(std::make_shared<nn::ReLU>());
  std::ostringstream os;
  os << *seq;
  CHECK(os.str() == "Sequential(\n  (0): Conv3d(1, 2, kernel_size=3, stride=1, padding=1, bias=false)\n  (1): ReLU()\n)");
}

TEST_CASE("nn: Module::operator() runs a module marked set_autocast_fp32 in FP32 under autocast; forward() bypasses it") {
  Generator gen(3);
  auto conv = std::make_shared<nn::Conv3d>(nn::Conv3dOptions(2, 3, 3).padding(1), gen);
  Tensor x = Tensor::randn({1, 2, 4, 4, 4}, gen, kFloat16).set_requires_grad(true);
  Tensor ref;
  {
    amp::AutocastGuard off(false);  // the FP32 computation the mark must reproduce
    ref = (*conv)(x.cast_copy(kFloat32));
  }
  CHECK(conv->set_autocast_fp32(true).autocast_fp32());
  amp::AutocastGuard on;
  Tensor y = (*conv)(x);
  CHECK(y.dtype() == kFloat32);
  CHECK(std::memcmp(y.raw_data(), ref.raw_data(), ref.nbytes()) == 0);
  CHECK(amp::autocast_enabled());  // the FP32 region closed with the call
  ops::sum(y).backward();
  CHECK(x.grad().dtype() == kFloat16);  // the input's gradient comes back through the cast, in its dtype
  CHECK(conv->weight.grad().dtype() == kFloat32);
#ifndef HALFGRAD_FORCE_FP32
  CHECK(conv->forward(x).dtype() == kFloat16);  // forward() is the bare computation
  conv->set_autocast_fp32(false);
  CHECK((*conv)(x).dtype() == kFloat16);
#endif
}

TEST_CASE("nn: Sequential calls its elements through operator(), so a marked element inside runs in FP32") {
  Generator gen(5);
  auto conv1 = std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 3).padding(1), gen);
  auto bn = std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(2));
  auto conv2 = std::make_shared<nn::Conv3d>(nn::Conv3dOptions(2, 2, 1), gen);
  nn::Sequential seq{conv1, bn, std::make_shared<nn::ReLU>(), conv2};
  Tensor x = Tensor::randn({2, 1, 4, 4, 4}, gen);
  amp::AutocastGuard on;
#ifndef HALFGRAD_FORCE_FP32
  CHECK(seq(x).dtype() == kFloat16);
#endif
  conv2->set_autocast_fp32(true);
  CHECK(seq(x).dtype() == kFloat32);
  // A marked BatchNorm3d takes the FP16 conv output, cast to FP32 by the mark, and gives an FP32
  // output; unmarked, it runs in its input's dtype (FP16, as in PyTorch): the same values rounded once.
  conv2->set_autocast_fp32(false);
  bn->eval();
  Tensor h = (*conv1)(x);
  Tensor plain = (*bn)(h);
#ifndef HALFGRAD_FORCE_FP32
  CHECK(plain.dtype() == kFloat16);
#endif
  bn->set_autocast_fp32(true);
  Tensor marked = (*bn)(h);
  CHECK(marked.dtype() == kFloat32);
  CHECK(std::memcmp(marked.cast_copy(plain.dtype()).raw_data(), plain.raw_data(), plain.nbytes()) == 0);
}

