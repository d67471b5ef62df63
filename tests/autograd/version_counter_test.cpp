// Version counters (core/tensor.h) and the saved-tensor check at backward (autograd/node.h): which
// APIs bump a tensor's version, that views share it, that backward refuses a saved tensor written in
// place since the forward (naming the op, the tensor and both versions, as PyTorch), that tensors no
// closure reads are free to change, and that training loops (optimizer steps between iterations,
// gradient accumulation, retain_graph, GradScaler, the autocast weight cache) are unaffected.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "tests/check_error.h"
#include "core/error.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

using namespace halfgrad;
using halfgrad::testing::check_error;

namespace {

Tensor iota(const Shape& s, double start = 1.0, double step = 0.25, Dtype dt = kFloat32) {
  std::vector<double> v(shape_numel(s));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i);
  return Tensor::from_vector(v, s, dt);
}

// "<op> backward: a tensor saved for gradient computation (<what>, <shape> <dtype>) has been modified
// by an in-place operation: it is at version <now>, expected version <then>"
std::string modified(const std::string& op, const std::string& what, const std::string& shape_dtype, uint64_t now,
                     uint64_t then) {
  return op + " backward: a tensor saved for gradient computation (" + what + ", " + shape_dtype +
         ") has been modified by an in-place operation: it is at version " + std::to_string(now) +
         ", expected version " + std::to_string(then);
}

}  // namespace

// ---- which APIs bump ------------------------------------------------------------------------------

TEST_CASE("version: float32 [3, 4] starts at 0; fill_, zero_ and copy_from bump it once each; reads do not") {
  Tensor t = Tensor::zeros({3, 4});
  CHECK(t.version() == 0);
  (void)t.data<float>();  // a plain pointer: not counted
  (void)t.item_at(3);
  (void)t.to_float_vector();
  (void)t.clone();
  (void)t.cast_copy(kFloat16);
  CHECK(t.version() == 0);
  t.fill_(2.0);
  CHECK(t.version() == 1);
  t.zero_();
  CHECK(t.version() == 2);
  t.copy_from(iota({3, 4}, 0.0, 1.0, kFloat64));  // converting copy
  CHECK(t.version() == 3);
  CHECK(t.item_at(5) == 5.0);
  t.bump_version();
  CHECK(t.version() == 4);
  // Copies are new storages at version 0.
  CHECK(t.clone().version() == 0);
  CHECK(t.cast_copy(kFloat64).version() == 0);
  CHECK(t.to(kFloat16).version() == 0);
  CHECK(Tensor::ones({2}).version() == 0);  // factories fill without counting, as torch.ones
  CHECK(Tensor::full({2}, 3.0, kInt64).version() == 0);
  CHECK(Tensor().defined() == false);
  CHECK_THROWS_AS(Tensor().version(), Error);
}

TEST_CASE("version: views (view_as_shape, reshape) and detach() share one counter; clone() does not") {
  Tensor x = Tensor::zeros({2, 6}).set_requires_grad(true);
  Tensor view = x.view_as_shape({3, 4});
  Tensor det = x.detach();
  Tensor r = ops::reshape(x, {12});
  Tensor c = x.clone();
  view.fill_(1.0);
  CHECK(x.version() == 1);
  CHECK(det.version() == 1);
  CHECK(r.version() == 1);
  CHECK(c.version() == 0);
  r.detach().zero_();
  CHECK(view.version() == 2);
  CHECK(x.item_at(0) == 0.0);
  // A channels-last view whose shape changes is a copy (tensor.h): its own counter.
  Tensor cl = Tensor::zeros({1, 2, 2, 2, 2}).format_copy(MemoryFormat::ChannelsLast3d);
  Tensor same = cl.view_as_shape({1, 2, 2, 2, 2});
  Tensor flat = cl.view_as_shape({16});
  same.fill_(3.0);
  CHECK(cl.version() == 1);
  CHECK(flat.version() == 0);
}

TEST_CASE("version: SGD momentum and AdamW float32 steps bump each parameter with a gradient and its state once") {
  Tensor p = iota({4}).set_requires_grad(true);
  Tensor q = iota({2}).set_requires_grad(true);  // no gradient: not updated, not bumped
  optim::SGD sgd({p, q}, optim::SGDOptions(0.1).momentum(0.9));
  p.set_grad(Tensor::ones({4}));
  sgd.step();
  CHECK(p.version() == 1);
  CHECK(q.version() == 0);
  const auto* st = dynamic_cast<const optim::SGDParamState*>(sgd.param_state(p));
  REQUIRE(st != nullptr);
  const uint64_t buf0 = st->momentum_buffer.version();
  sgd.step();
  CHECK(p.version() == 2);
  CHECK(st->momentum_buffer.version() == buf0 + 1);
  // zero_grad without set_to_none zeroes the .grad in place.
  const uint64_t g0 = p.grad().version();
  sgd.zero_grad(/*set_to_none=*/false);
  CHECK(p.grad().version() == g0 + 1);

  Tensor w = iota({3}).set_requires_grad(true);
  optim::AdamW adamw({w}, optim::AdamWOptions(1e-2));
  w.set_grad(Tensor::ones({3}));
  adamw.step();
  adamw.step();
  CHECK(w.version() == 2);
  const auto* ast = dynamic_cast<const optim::AdamWParamState*>(adamw.param_state(w));
  REQUIRE(ast != nullptr);
  CHECK(ast->exp_avg.version() == 1);  // made by the first step, updated in place by the second
  CHECK(ast->exp_avg_sq.version() == 1);
}

TEST_CASE("version: a float16 parameter with an FP32 master: the step bumps both") {
  Tensor p = iota({4}, 1.0, 0.25, kFloat16).set_requires_grad(true);
  optim::SGD sgd({p}, optim::SGDOptions(0.1));
  p.set_grad(Tensor::ones({4}, kFloat16));
  sgd.step();
  sgd.step();
  CHECK(p.version() == 2);
  const auto* st = sgd.param_state(p);
  REQUIRE(st != nullptr);
  REQUIRE(st->master.defined());
  CHECK(st->master.version() == 1);  // made by the first step (version 0), updated by the second
}

TEST_CASE("version: GradScaler::unscale_, clip_grad_norm_ and backward's accumulation write .grad in place") {
  Tensor p = iota({3}).set_requires_grad(true);
  const Tensor c = iota({3});
  ops::sum(ops::mul(p, c)).backward();
  const Tensor g = p.grad();
  CHECK(g.version() == 0);  // the first gradient is a new tensor
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(4.0));
  scaler.scale(ops::sum(ops::mul(p, c))).backward();
  CHECK(g.version() == 1);  // the second is added into it
  CHECK(p.grad().is_same(g));
  ops::sum(ops::mul(p, p)).backward();  // p used twice: two contributions, two in-place adds
  CHECK(g.version() == 3);

  optim::SGD sgd({p}, optim::SGDOptions(0.1));
  scaler.unscale_(sgd);
  CHECK(g.version() == 4);
  CHECK(g.item_at(1) == doctest::Approx((1.25 + 4 * 1.25 + 2 * 1.25) / 4.0));

  optim::clip_grad_norm_({p}, 1e-3);  // scales below max_norm
  CHECK(g.version() == 5);
  optim::clip_grad_norm_({p}, 1e9);  // coefficient 1: still counted, as PyTorch's mul_
  CHECK(g.version() == 6);
}

TEST_CASE("version: nn::init, BatchNorm3d's running statistics (training only), load_checkpoint and Module::to bump") {
  Generator gen(3);
  Tensor w = Tensor::zeros({4, 2, 3, 3, 3});
  nn::init::kaiming_uniform_(w, std::sqrt(5.0), gen);
  CHECK(w.version() == 1);

  nn::BatchNorm3d bn(nn::BatchNorm3dOptions(2));
  const uint64_t m0 = bn.running_mean.version(), v0 = bn.running_var.version(), n0 = bn.num_batches_tracked.version();
  const Tensor x = Tensor::randn({2, 2, 2, 2, 2}, gen);
  bn.forward(x);
  CHECK(bn.running_mean.version() == m0 + 1);
  CHECK(bn.running_var.version() == v0 + 1);
  CHECK(bn.num_batches_tracked.version() == n0 + 1);
  bn.eval();
  bn.forward(x);  // evaluation reads the statistics
  CHECK(bn.running_mean.version() == m0 + 1);
  CHECK(bn.num_batches_tracked.version() == n0 + 1);

  nn::Conv3d conv(nn::Conv3dOptions(1, 2, 3), gen);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("halfgrad_version_ckpt_" + std::to_string(::getpid()))).string();
  nn::save_checkpoint(path, conv);
  const uint64_t before = conv.weight.version();
  nn::load_checkpoint(path, conv);
  std::filesystem::remove(path);
  CHECK(conv.weight.version() == before + 1);
  CHECK(conv.bias.version() >= 1);

  conv.to(kFloat64);  // a storage swap that continues the count
  CHECK(conv.weight.dtype() == kFloat64);
  CHECK(conv.weight.version() == before + 2);
}

TEST_CASE("version: gradcheck's perturbation of a float64 input [3] counts one write per element") {
  Tensor x = iota({3}, 0.5, 0.5, kFloat64).set_requires_grad(true);
  const auto res = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[0]); }, {x});
  CHECK(res.ok);
  CHECK(x.version() == 3);
}

// ---- backward refuses a modified saved tensor -------------------------------------------------------

TEST_CASE("version: conv3d float32 weight [16, 1, 3, 3, 3] modified after the forward: backward names op, input, versions") {
  Generator gen(1);
  Tensor x = Tensor::randn({1, 1, 5, 5, 5}, gen).set_requires_grad(true);
  Tensor w = Tensor::randn({16, 1, 3, 3, 3}, gen);
  w.fill_(0.5);
  w.copy_from(Tensor::randn({16, 1, 3, 3, 3}, gen));  // version 2 when the forward saves it
  w.set_requires_grad(true);
  Tensor loss = ops::mean(ops::conv3d(x, w, Tensor()));
  {
    NoGradGuard ng;
    w.fill_(0.0);  // version 3
  }
  const std::string want =
      "conv3d backward: a tensor saved for gradient computation (input 1 'weight', [16, 1, 3, 3, 3] float32) has "
      "been modified by an in-place operation: it is at version 3, expected version 2";
  check_error([&] { loss.backward(); }, {want, "Hint"});
  CHECK_FALSE(x.grad().defined());  // nothing was accumulated into x
}

TEST_CASE("version: conv3d float32 input modified when dweight is needed: 'input 0'; when only dx is needed, no error") {
  Generator gen(2);
  Tensor x = Tensor::randn({1, 2, 4, 4, 4}, gen);
  Tensor w = Tensor::randn({3, 2, 3, 3, 3}, gen).set_requires_grad(true);
  Tensor loss = ops::sum(ops::conv3d(x, w, Tensor()));
  x.fill_(1.0);
  check_error([&] { loss.backward(); }, {modified("conv3d", "input 0 'input'", "[1, 2, 4, 4, 4] float32", 1, 0)});

  // dx only (the weight does not require grad): the closure keeps the weight, not the input.
  Tensor x2 = Tensor::randn({1, 2, 4, 4, 4}, gen).set_requires_grad(true);
  Tensor w2 = Tensor::randn({3, 2, 3, 3, 3}, gen);
  Tensor loss2 = ops::sum(ops::conv3d(x2, w2, Tensor()));
  const std::vector<float> ref = [&] {
    Tensor xr = x2.detach().clone().set_requires_grad(true);
    ops::sum(ops::conv3d(xr, w2, Tensor())).backward();
    return xr.grad().to_float_vector();
  }();
  x2.detach().fill_(7.0);
  loss2.backward();
  CHECK(x2.grad().to_float_vector() == ref);  // dx does not depend on x
}

TEST_CASE("version: mul float32 [3, 4]: the operand a gradient needs is checked, the other is not") {
  Tensor a = iota({3, 4}).set_requires_grad(true);
  Tensor b = iota({3, 4}, -1.0, 0.5);
  Tensor y = ops::sum(ops::mul(a, b));  // da = b: b is saved; a is not (b needs no gradient)
  b.fill_(3.0);
  check_error([&] { y.backward(); }, {modified("mul", "input 1 'b'", "[3, 4] float32", 1, 0)});

  Tensor y2 = ops::sum(ops::mul(a, b));
  a.detach().fill_(100.0);  // not read by this backward
  y2.backward();
  for (int64_t i = 0; i < 12; ++i) CHECK(a.grad().item_at(i) == 3.0);
}

TEST_CASE("version: matmul float32 [2, 3] x [3, 4] and linear: a modified weight throws") {
  Tensor a = iota({2, 3}).set_requires_grad(true);
  Tensor b = iota({3, 4}, 0.0, 0.1);
  Tensor y = ops::sum(ops::matmul(a, b));
  b.copy_from(Tensor::ones({3, 4}));
  check_error([&] { y.backward(); }, {modified("matmul", "input 1 'b'", "[3, 4] float32", 1, 0)});

  Tensor x = iota({2, 3}).set_requires_grad(true);
  Tensor w = iota({5, 3}, 0.0, 0.1);
  Tensor z = ops::sum(ops::linear(x, w));
  w.zero_();
  check_error([&] { z.backward(); }, {modified("linear", "input 1 'weight'", "[5, 3] float32", 1, 0)});
}

TEST_CASE("version: batch_norm float32 weight [2] and input modified after the forward throw") {
  Generator gen(4);
  Tensor x = Tensor::randn({2, 2, 2, 2, 2}, gen).set_requires_grad(true);
  Tensor w = Tensor::ones({2}).set_requires_grad(true), b = Tensor::zeros({2}).set_requires_grad(true);
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  Tensor loss = ops::sum(ops::mul(ops::batch_norm(x, rm, rv, w, b), Tensor::randn({2, 2, 2, 2, 2}, gen)));
  CHECK(rm.version() == 1);  // the running statistics are not read by backward (training)
  rm.fill_(5.0);
  {
    NoGradGuard ng;
    w.fill_(2.0);
  }
  check_error([&] { loss.backward(); }, {modified("batch_norm", "input 1 'weight'", "[2] float32", 1, 0)});

  Tensor x2 = Tensor::randn({2, 2, 2, 2, 2}, gen).set_requires_grad(true);
  Tensor square = ops::mul(x2, x2);
  Tensor loss2 = ops::sum(ops::mul(ops::instance_norm(square, Tensor(), Tensor()), Tensor::randn({2, 2, 2, 2, 2}, gen)));
  square.fill_(0.0);  // an intermediate of the graph
  check_error([&] { loss2.backward(); },
              {"instance_norm backward", "input 0 'input', [2, 2, 2, 2, 2] float32", "at version 1, expected version 0"});
}

TEST_CASE("version: relu, exp and softmax save their outputs; modifying the output throws 'the op's output'") {
  Tensor x = iota({3, 4}, -1.0).set_requires_grad(true);
  Tensor y = ops::relu(x);
  Tensor loss = ops::sum(ops::mul(y, Tensor::ones({3, 4})));
  y.fill_(1.0);
  check_error([&] { loss.backward(); }, {modified("relu", "the op's output", "[3, 4] float32", 1, 0)});

  Tensor e = ops::exp(x);
  Tensor loss_e = ops::sum(e);
  e.zero_();
  check_error([&] { loss_e.backward(); }, {modified("exp", "the op's output", "[3, 4] float32", 1, 0)});

  Tensor s = ops::softmax(x, 1);
  Tensor loss_s = ops::sum(ops::mul(s, iota({3, 4})));
  s.copy_from(Tensor::full({3, 4}, 0.25));
  check_error([&] { loss_s.backward(); }, {modified("softmax", "the op's output", "[3, 4] float32", 1, 0)});

  Tensor ls = ops::log_softmax(x, 0);
  Tensor loss_ls = ops::sum(ops::mul(ls, iota({3, 4})));
  ls.view_as_shape({12}).fill_(0.0);  // through a view: the same counter
  check_error([&] { loss_ls.backward(); }, {modified("log_softmax", "the op's output", "[3, 4] float32", 1, 0)});
}

TEST_CASE("version: leaky_relu, log, pow and div float64 [4]: the saved input (or divisor) is checked") {
  auto fresh = [] { return iota({4}, 0.5, 0.5, kFloat64).set_requires_grad(true); };
  struct Case {
    const char* op;
    std::function<Tensor(const Tensor&, const Tensor&)> f;
    const char* what;
  };
  const std::vector<Case> cases = {
      {"leaky_relu", [](const Tensor& x, const Tensor&) { return ops::leaky_relu(x, 0.1); }, "input 0 'input'"},
      {"log", [](const Tensor& x, const Tensor&) { return ops::log(x); }, "input 0 'input'"},
      {"pow", [](const Tensor& x, const Tensor&) { return ops::pow(x, 3.0); }, "input 0 'input'"},
      {"div", [](const Tensor& x, const Tensor& d) { return ops::div(x, d); }, "input 1 'b'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    Tensor x = fresh();
    Tensor d = iota({4}, 2.0, 1.0, kFloat64);
    Tensor loss = ops::sum(c.f(x, d));
    Tensor modified_one = std::string(c.op) == "div" ? d : x.detach();
    modified_one.fill_(1.5);
    check_error([&] { loss.backward(); }, {modified(c.op, c.what, "[4] float64", 1, 0)});
  }
  // div keeps its output for the divisor's gradient.
  Tensor a = fresh(), b = iota({4}, 2.0, 1.0, kFloat64).set_requires_grad(true);
  Tensor q = ops::div(a, b);
  Tensor loss = ops::sum(ops::mul(q, Tensor::ones({4}, kFloat64)));
  q.fill_(0.0);
  check_error([&] { loss.backward(); }, {modified("div", "the op's output", "[4] float64", 1, 0)});
}

TEST_CASE("version: segmentation_loss float32 logits (2, 3, 2, 2, 2): modified labels throw 'target' (int64)") {
  Generator gen(5);
  Tensor logits = Tensor::randn({2, 3, 2, 2, 2}, gen).set_requires_grad(true);
  std::vector<int64_t> lab(16);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<int64_t>(i % 3);
  Tensor target = Tensor::from_labels(lab, {2, 2, 2, 2});
  Tensor loss = ops::segmentation_loss(logits, target);
  target.fill_(0);  // e.g. a loader refilling its label buffer before backward
  check_error([&] { loss.backward(); }, {modified("segmentation_loss", "'target'", "[2, 2, 2, 2] int64", 1, 0)});
  Tensor loss2 = ops::cross_entropy(logits, target);
  logits.detach().fill_(0.0);
  check_error([&] { loss2.backward(); },
              {modified("cross_entropy", "input 0 'logits'", "[2, 3, 2, 2, 2] float32", 1, 0)});
}

TEST_CASE("version: a parameter given another storage by Module::to between forward and backward throws") {
  Generator gen(6);
  nn::Conv3d conv(nn::Conv3dOptions(1, 2, 3).bias(false), gen);
  Tensor x = Tensor::randn({1, 1, 4, 4, 4}, gen).set_requires_grad(true);  // dx needs the weight
  Tensor loss = ops::sum(conv.forward(x));
  conv.to(kFloat64);
  check_error([&] { loss.backward(); },
              {"conv3d backward", "input 1 'weight', [2, 1, 3, 3, 3] float32", "another storage", "Module::to"});
}

// ---- what must not throw ----------------------------------------------------------------------------

TEST_CASE("version: inputs no closure reads (add, sub, affine, sum, mean, reshape, cat, max_pool3d, to) may change") {
  Generator gen(8);
  Tensor a = Tensor::randn({1, 2, 4, 4, 4}, gen).set_requires_grad(true);
  Tensor b = Tensor::randn({1, 2, 4, 4, 4}, gen).set_requires_grad(true);
  Tensor s = ops::add(a, b);
  Tensor t = ops::sub(s, b) * 2.0;
  Tensor p = ops::max_pool3d(t, 2, 2);
  Tensor c = ops::cat({p, ops::reshape(p, {1, 2, 2, 2, 2})}, 1);
  Tensor h = c.to(kFloat64);
  Tensor loss = ops::add(ops::sum(h), ops::mean(h));
  // Every intermediate and both leaves change now; none of them is read by its consumer's backward
  // (max_pool3d keeps only its argmax, which still points at the maxima of the original t).
  {
    NoGradGuard ng;
    for (Tensor x : {s, t, p, c, h}) x.fill_(-1.0);
    a.fill_(9.0);
    b.fill_(9.0);
  }
  loss.backward();
  REQUIRE(a.grad().defined());
  double total = 0;
  for (double v : a.grad().to_double_vector()) total += v;
  // d loss / d c = 1 + 1/32 for each of the 32 elements of c (p twice); each element of p sends its
  // gradient, twice, to one maximum of t, and t = 2 (a + b - b).
  CHECK(total == doctest::Approx(16 * 2 * (1.0 + 1.0 / 32) * 2.0));
}

TEST_CASE("version: SGD steps between iterations, gradient accumulation and retain_graph run; a step mid-graph throws") {
  Generator gen(9);
  Tensor w = Tensor::randn({4, 1, 3, 3, 3}, gen, kFloat32, 0.2).set_requires_grad(true);
  Tensor bw = Tensor::ones({4}).set_requires_grad(true), bb = Tensor::zeros({4}).set_requires_grad(true);
  Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
  optim::SGD opt({w, bw, bb}, optim::SGDOptions(0.05).momentum(0.9));
  const Tensor x = Tensor::randn({2, 1, 5, 5, 5}, gen);
  auto forward = [&] {
    Tensor h = ops::relu(ops::batch_norm(ops::conv3d(x, w, Tensor()), rm, rv, bw, bb));
    return ops::mean(ops::mul(h, h));
  };
  for (int it = 0; it < 3; ++it) {  // plain iterations: forward, backward, step
    opt.zero_grad();
    forward().backward();
    opt.step();
  }
  CHECK(w.version() == 3);
  // Gradient accumulation: two forwards (the second updates the running statistics in place, which
  // no backward reads in training), then both backwards, then one step.
  opt.zero_grad();
  Tensor l1 = forward(), l2 = forward();
  l1.backward();
  l2.backward();
  opt.step();
  // retain_graph: two backwards through one graph with nothing written between them.
  opt.zero_grad();
  Tensor loss = forward();
  loss.backward(Tensor(), /*retain_graph=*/true);
  const std::vector<float> once = w.grad().to_float_vector();
  loss.backward();
  const std::vector<float> twice = w.grad().to_float_vector();
  for (size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]).epsilon(1e-5));
  // A step between the two backwards of a retained graph (or between forward and backward) throws.
  Tensor loss2 = forward();
  loss2.backward(Tensor(), true);
  opt.step();  // writes w, bw, bb; batch_norm's backward reads its weight bw (conv3d's reads only x here)
  check_error([&] { loss2.backward(); }, {modified("batch_norm", "input 1 'weight'", "[4] float32", 5, 4)});
}

TEST_CASE("version: tiny UNet3d float32 (1,1,16,16,16) trains 3 steps with autocast, GradScaler and AdamW without a version error") {
  Generator gen(10);
  nn::UNet3d net(nn::UNet3dOptions().channels({4, 8}).bottleneck(16), gen);
  optim::AdamW opt(net.parameters(), optim::AdamWOptions(1e-3));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0));
  const Tensor x = Tensor::randn({1, 1, 16, 16, 16}, gen);
  std::vector<int64_t> lab(16 * 16 * 16);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<int64_t>((i / 7) % 3);
  const Tensor y = Tensor::from_labels(lab, {1, 16, 16, 16});
  std::vector<double> losses;
  const uint64_t v0 = net.parameters()[0].version();  // 1: kaiming_uniform_ wrote it
  CHECK(v0 == 1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast;
      loss = ops::segmentation_loss(net.forward(x), y);
    }
    scaler.scale(loss).backward();
    CHECK(scaler.step(opt));
    scaler.update();
    losses.push_back(loss.item());
  }
  for (double l : losses) CHECK(std::isfinite(l));
  CHECK(net.parameters()[0].version() == v0 + 3);
}

TEST_CASE("version: autocast weight cache float32 [3, 2]: an in-place update inside the region re-casts, no stale FP16 copy") {
  Tensor w = Tensor::ones({3, 2}).set_requires_grad(true);
  const Tensor x = Tensor::ones({1, 3});
  optim::SGD opt({w}, optim::SGDOptions(0.5));
  amp::AutocastGuard on;
  Tensor y1 = ops::matmul(x, w);
  const Tensor first = amp::cast_cache_lookup(w);
  REQUIRE(first.defined());
  CHECK(y1.item_at(0) == 3.0);
  w.set_grad(Tensor::ones({3, 2}));
  opt.step();  // w = 0.5, written in place inside the region, before y1's backward
  CHECK(w.item_at(0) == 0.5);
  Tensor y2 = ops::matmul(x, w);
  CHECK(y2.item_at(0) == 1.5);  // the stale FP16 copy of the ones would give 3
  const Tensor second = amp::cast_cache_lookup(w);
  REQUIRE(second.defined());
  CHECK_FALSE(second.is_same(first));
  CHECK(second.item_at(0) == 0.5);
  // y1's graph still holds the first copy, unmodified, so its backward runs (the FP16 copy, not the
  // FP32 weight, is what matmul saved) and adds x^T 1 = 1 to each of w's gradients.
  ops::sum(y1).backward();
  CHECK(w.grad().item_at(0) == 2.0);
  // A fill_ under NoGradGuard (no backward in between) also invalidates the entry.
  {
    NoGradGuard ng;
    w.fill_(2.0);
  }
  CHECK_FALSE(amp::cast_cache_lookup(w).defined());
  Tensor y3 = ops::matmul(x, w);
  CHECK(y3.item_at(0) == 6.0);
  CHECK(amp::cast_cache_size() == 1);
}

TEST_CASE("version: record() rejects a Save::input index outside its inputs") {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  check_error([&] {
    autograd::record("my_op", x.detach().clone(), {x}, {autograd::Save::input(1, "other")},
                     [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  }, {"my_op: record() saves input 1 'other' but the op has 1 inputs"});
}
