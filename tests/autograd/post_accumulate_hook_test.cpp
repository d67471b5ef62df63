// autograd/node.h's post-accumulate-grad hooks and queue_backward_callback (what DDP builds on), and
// the engine run by several threads at once.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "autograd/node.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/check_error.h"

using namespace halfgrad;

TEST_CASE("post-accumulate-grad hook: once per backward, after the last contribution, sees the accumulated grad") {
  Tensor p = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}).set_requires_grad(true);
  std::vector<std::vector<float>> seen;
  const int id = autograd::add_post_accumulate_grad_hook(p, [&](const Tensor& leaf) {
    CHECK(leaf.is_same(p));
    seen.push_back(leaf.grad().to_float_vector());
  });
  // p reaches the loss along three edges (mul twice, sum once): d/dp = 2p + 1.
  ops::add(ops::sum(ops::mul(p, p)), ops::sum(p)).backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<float>{3.0f, 5.0f});
  ops::sum(p).backward();  // accumulates: the hook sees the sum of both passes
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<float>{4.0f, 6.0f});
  p.backward(Tensor::ones({2}));  // p itself as the root
  REQUIRE(seen.size() == 3);
  CHECK(seen[2] == std::vector<float>{5.0f, 7.0f});
  autograd::remove_post_accumulate_grad_hook(p, id);
  ops::sum(p).backward();
  CHECK(seen.size() == 3);
  autograd::remove_post_accumulate_grad_hook(p, id);  // unknown id: nothing

  Tensor q = Tensor::ones({2}).set_requires_grad(true);
  testing::check_error([&] { autograd::add_post_accumulate_grad_hook(ops::mul(q, q), [](const Tensor&) {}); },
                       {"add_post_accumulate_grad_hook", "leaf that requires grad"});
  testing::check_error([] { autograd::add_post_accumulate_grad_hook(Tensor::ones({2}), [](const Tensor&) {}); },
                       {"add_post_accumulate_grad_hook"});
}

TEST_CASE("post-accumulate-grad hook: not run for a leaf that got no gradient; a dead tensor's hook never runs") {
  Tensor a = Tensor::ones({2}).set_requires_grad(true);
  Tensor b = Tensor::ones({2}).set_requires_grad(true);
  int fired = 0;
  autograd::add_post_accumulate_grad_hook(b, [&](const Tensor&) { ++fired; });
  ops::sum(a).backward();
  CHECK(fired == 0);
  int dead_fired = 0;
  for (int i = 0; i < 20; ++i) {  // tensors die with a hook left on: a new one at the same address is clean
    {
      Tensor t = Tensor::ones({2}).set_requires_grad(true);
      autograd::add_post_accumulate_grad_hook(t, [&](const Tensor&) { ++dead_fired; });
    }
    Tensor u = Tensor::ones({2}).set_requires_grad(true);
    ops::sum(u).backward();
  }
  CHECK(dead_fired == 0);
}

TEST_CASE("queue_backward_callback: runs after every hook, before backward returns; only inside backward") {
  Tensor p = Tensor::ones({3}).set_requires_grad(true);
  Tensor r = Tensor::ones({3}).set_requires_grad(true);
  std::vector<std::string> events;
  autograd::add_post_accumulate_grad_hook(p, [&](const Tensor&) {
    events.push_back("hook p");
    autograd::queue_backward_callback([&] {
      events.push_back("callback");
      autograd::queue_backward_callback([&] { events.push_back("callback queued by a callback"); });
    });
  });
  autograd::add_post_accumulate_grad_hook(r, [&](const Tensor&) { events.push_back("hook r"); });
  ops::sum(ops::add(ops::mul(p, Tensor::full({3}, 2.0)), ops::exp(r))).backward();
  events.push_back("returned");
  REQUIRE(events.size() == 5);
  CHECK(events[3] == "callback queued by a callback");
  CHECK(events[2] == "callback");
  CHECK(events[4] == "returned");
  testing::check_error([] { autograd::queue_backward_callback([] {}); }, {"queue_backward_callback", "outside a backward"});
}

TEST_CASE("engine: several threads run backward at once while hooks are added and removed") {
  constexpr int kThreads = 4, kPasses = 200;
  std::atomic<bool> stop{false};
  std::thread churn([&] {  // process-wide backward hooks added and removed meanwhile
    while (!stop.load()) autograd::remove_backward_hook(autograd::add_backward_hook([](const autograd::Node&, const Tensor&) {}));
  });
  std::vector<int> fired(kThreads, 0);
  std::vector<std::vector<float>> grads(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Tensor p = Tensor::full({16}, t + 1.0).set_requires_grad(true);
      autograd::add_post_accumulate_grad_hook(p, [&, t](const Tensor&) { ++fired[t]; });
      for (int i = 0; i < kPasses; ++i) ops::sum(ops::mul(p, p)).backward();
      grads[t] = p.grad().to_float_vector();
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  churn.join();
  for (int t = 0; t < kThreads; ++t) {
    CHECK(fired[t] == kPasses);
    CHECK(grads[t] == std::vector<float>(16, static_cast<float>(kPasses * 2 * (t + 1))));
  }
}
