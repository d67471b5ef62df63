// DistributedDataParallel (dist/distributed_data_parallel.h) on the in-process group, threads as
// ranks, world sizes 1-4: bucket membership by cap, dtype and device; launch order and launch during
// backward; N ranks on 1/N of a batch give one rank's whole-batch gradient; no_sync accumulation;
// FP16 pre-division against FP32 reduction; unused parameters; check_replicas.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "autograd/node.h"
#include "core/half.h"
#include "dist/distributed_data_parallel.h"
#include "nn/activation.h"
#include "nn/containers.h"
#include "nn/conv3d.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/elementwise_loss.h"
#include "ops/reduce/reduce.h"
#include "optim/sgd.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test_case.h"
#include "tests/dist/dist_test_util.h"

using namespace halfgrad;
using halfgrad::dist::Communicator;
using halfgrad::dist::DdpOptions;
using halfgrad::dist::DistributedDataParallel;
using halfgrad::testing::run_ranks;

namespace {

// conv(1 -> 3, k3, p1) - relu - conv(3 -> 2, k3, p1); parameters 0.weight [3,1,3,3,3] (324 B),
// 0.bias [3] (12 B), 2.weight [2,3,3,3,3] (648 B), 2.bias [2] (8 B).
std::shared_ptr<nn::Sequential> small_conv_net(uint64_t seed) {
  Generator g(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 3, 3).padding(1), g));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(3, 2, 3).padding(1), g));
  return net;
}

constexpr int kBatch = 12;  // divisible by every world size 1-4
const Shape kInput = {kBatch, 1, 4, 4, 4};
const Shape kTarget = {kBatch, 2, 4, 4, 4};

Tensor batch_tensor(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(s, g);
}

// Samples [begin, begin + count) of a batch tensor.
Tensor samples(const Tensor& t, int64_t begin, int64_t count) {
  const std::vector<float> v = t.to_float_vector();
  const int64_t per = t.numel() / t.size(0);
  Shape s = t.shape();
  s[0] = count;
  return Tensor::from_vector(std::vector<float>(v.begin() + begin * per, v.begin() + (begin + count) * per), s);
}

std::map<std::string, std::vector<float>> grads_of(nn::Module& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, p] : m.named_parameters()) out[name] = p.grad().defined() ? p.grad().to_float_vector() : std::vector<float>();
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// One parameter per dtype given, forward = sum over parameters of sum(p * x) (x cast to p's dtype);
// with unused_last, the last parameter takes no part.
class Params : public nn::Module {
 public:
  Params(const std::vector<std::pair<std::string, Tensor>>& ps, bool unused_last = false)
      : Module("Params"), unused_last_(unused_last) {
    for (auto& [name, t] : ps) params_.push_back(register_parameter(name, t));
  }
  Tensor forward(const Tensor& x) override {
    Tensor loss;
    for (size_t i = 0; i + (unused_last_ ? 1 : 0) < params_.size(); ++i) {
      const Tensor& p = params_[i];
      Tensor xi = x.numel() == p.numel() ? x.cast_copy(p.dtype()).view_as_shape(p.shape())
                                         : Tensor::full(p.shape(), 1.0, p.dtype());
      Tensor term = ops::sum(ops::mul(p, xi)).to(kFloat32);
      loss = loss.defined() ? ops::add(loss, term) : term;
    }
    return loss;
  }

 private:
  std::vector<Tensor> params_;
  bool unused_last_;
};

}  // namespace

TEST_CASE("ddp buckets: reverse registration order, closed at bucket_cap_mb, one dtype and device each") {
  auto names = [](const DistributedDataParallel& ddp) {
    std::vector<std::vector<std::string>> out;
    for (const auto& b : ddp.buckets()) out.push_back(b.params);
    return out;
  };
  using Buckets = std::vector<std::vector<std::string>>;
  run_ranks(1, [&](Communicator& c) {
    auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
    DistributedDataParallel all(small_conv_net(1), comm);  // 25 MB: one bucket
    CHECK(names(all) == Buckets{{"2.bias", "2.weight", "0.bias", "0.weight"}});
    CHECK(all.buckets()[0].numel == 2 + 162 + 3 + 81);
    // 600 B: 2.bias (8) + 2.weight (648) reach the cap; 0.bias (12) + 0.weight (324) stay below it.
    DistributedDataParallel capped(small_conv_net(1), comm, DdpOptions().bucket_cap_mb(600.0 / (1 << 20)));
    CHECK(names(capped) == Buckets{{"2.bias", "2.weight"}, {"0.bias", "0.weight"}});
    DistributedDataParallel tiny(small_conv_net(1), comm, DdpOptions().bucket_cap_mb(4.0 / (1 << 20)));
    CHECK(names(tiny) == Buckets{{"2.bias"}, {"2.weight"}, {"0.bias"}, {"0.weight"}});

    auto mixed = [] {
      return std::make_shared<Params>(std::vector<std::pair<std::string, Tensor>>{
          {"a", Tensor::ones({4})}, {"b", Tensor::ones({4}, kFloat16)}, {"c", Tensor::ones({4})}});
    };
    DistributedDataParallel by_dtype(mixed(), comm);
    CHECK(names(by_dtype) == Buckets{{"c", "a"}, {"b"}});
    CHECK(by_dtype.buckets()[0].dtype == kFloat32);
    CHECK(by_dtype.buckets()[1].dtype == kFloat16);
    DistributedDataParallel as_fp32(mixed(), comm, DdpOptions().gradient_as_fp32(true));
    CHECK(names(as_fp32) == Buckets{{"c", "b", "a"}});
    CHECK(as_fp32.buckets()[0].dtype == kFloat32);

    testing::check_error([&] { DistributedDataParallel(nullptr, comm); }, {"DistributedDataParallel", "module is null"});
    testing::check_error([&] { DistributedDataParallel(small_conv_net(1), nullptr); }, {"communicator is null"});
    testing::check_error([&] { DistributedDataParallel(small_conv_net(1), comm, DdpOptions().bucket_cap_mb(0)); },
                         {"bucket_cap_mb 0"});
  });
}

TEST_CASE("ddp buckets launch in index order (reverse registration) from hooks, during backward") {
  const Tensor x = batch_tensor(kInput, 7), y = batch_tensor(kTarget, 8);
  // Per thread: when each backward node started (backward hooks are process-wide).
  std::mutex mu;
  std::map<std::thread::id, std::vector<std::chrono::steady_clock::time_point>> node_times;
  const int hook = autograd::add_backward_hook([&](const autograd::Node&, const Tensor&) {
    std::lock_guard<std::mutex> lock(mu);
    node_times[std::this_thread::get_id()].push_back(std::chrono::steady_clock::now());
  });
  for (int n : {1, 2, 3}) {
    run_ranks(n, [&](Communicator& c) {
      auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
      DistributedDataParallel ddp(small_conv_net(c.rank()), comm, DdpOptions().bucket_cap_mb(4.0 / (1 << 20)));
      const int64_t per = kBatch / n;
      Tensor loss = ops::mse_loss(ddp(samples(x, c.rank() * per, per)), samples(y, c.rank() * per, per));
      {
        std::lock_guard<std::mutex> lock(mu);
        node_times[std::this_thread::get_id()].clear();
      }
      loss.backward();
      const auto returned = std::chrono::steady_clock::now();
      const std::vector<dist::BucketLaunch>& launches = ddp.last_launches();
      REQUIRE(launches.size() == 4);
      for (int b = 0; b < 4; ++b) {
        CHECK(launches[b].bucket == b);
        CHECK(launches[b].from_hook);
        CHECK(launches[b].time <= returned);
      }
      std::lock_guard<std::mutex> lock(mu);
      const auto& nodes = node_times[std::this_thread::get_id()];
      REQUIRE(nodes.size() >= 3);
      // Bucket 0 (the last conv's bias) is launched before the first conv's node has run:
      // communication starts while backward still has work to do.
      CHECK(launches[0].time < nodes.back());
      CHECK(ddp.reductions() == 1);
    });
  }
  autograd::remove_backward_hook(hook);
}

TEST_CASE("ddp: N ranks on 1/N of the batch give one rank's whole-batch gradient (bits for N = 1)") {
  const Tensor x = batch_tensor(kInput, 7), y = batch_tensor(kTarget, 8);
  auto ref_net = small_conv_net(100);  // rank 0's initialisation, which the broadcast gives every rank
  ops::mse_loss((*ref_net)(x), y).backward();
  const auto want = grads_of(*ref_net);
  for (int n = 1; n <= 4; ++n) {
    for (double cap : {25.0, 400.0 / (1 << 20)}) {
      CAPTURE(n);
      CAPTURE(cap);
      std::vector<std::map<std::string, std::vector<float>>> got(n);
      run_ranks(n, [&](Communicator& c) {
        auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
        DistributedDataParallel ddp(small_conv_net(100 + c.rank()), comm, DdpOptions().bucket_cap_mb(cap));
        const int64_t per = kBatch / n;
        ops::mse_loss(ddp(samples(x, c.rank() * per, per)), samples(y, c.rank() * per, per)).backward();
        got[c.rank()] = grads_of(ddp.module());
        optim::SGD sgd(ddp.module().parameters(), optim::SGDOptions(0.1));
        sgd.step();
        ddp.check_replicas("after one SGD step");  // throws on a difference
      });
      for (int r = 0; r < n; ++r) CHECK(got[r] == got[0]);  // identical bits on every rank
      for (const auto& [name, g] : want) {
        CAPTURE(name);
        if (n == 1) {
          CHECK(got[0].at(name) == g);
        } else {  // FP32 rounding: the sums are grouped differently
          CHECK(max_abs_diff(got[0].at(name), g) <= 1e-6 + 1e-5 * max_abs(g));
        }
      }
    }
  }
}

TEST_CASE("ddp no_sync: local accumulation, then one reduction of the accumulated sum") {
  const Tensor x = batch_tensor(kInput, 7), y = batch_tensor(kTarget, 8);
  constexpr int kRanks = 2, kMicro = 3;
  constexpr int64_t kPer = kBatch / (kRanks * kMicro);  // 2 samples per micro-batch
  auto slice = [](int rank, int micro) { return (micro * kRanks + rank) * kPer; };
  // Expected: (1 / ranks) * sum over ranks and micro-batches of each micro-batch's gradient.
  auto ref_net = small_conv_net(100);
  for (int r = 0; r < kRanks; ++r) {
    for (int m = 0; m < kMicro; ++m) {
      Tensor loss = ops::mse_loss((*ref_net)(samples(x, slice(r, m), kPer)), samples(y, slice(r, m), kPer));
      ops::mul(loss, Tensor::scalar(1.0 / kRanks)).backward();
    }
  }
  const auto want = grads_of(*ref_net);
  std::vector<std::map<std::string, std::vector<float>>> local(kRanks), got(kRanks);
  run_ranks(kRanks, [&](Communicator& c) {
    auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
    DistributedDataParallel ddp(small_conv_net(100 + c.rank()), comm, DdpOptions().bucket_cap_mb(400.0 / (1 << 20)));
    for (int m = 0; m < kMicro; ++m) {
      const int64_t b = slice(c.rank(), m);
      if (m + 1 < kMicro) {
        auto guard = ddp.no_sync();
        ops::mse_loss(ddp(samples(x, b, kPer)), samples(y, b, kPer)).backward();
        if (m == 0) local[c.rank()] = grads_of(ddp.module());
      } else {
        ops::mse_loss(ddp(samples(x, b, kPer)), samples(y, b, kPer)).backward();
      }
    }
    CHECK(ddp.reductions() == 1);
    got[c.rank()] = grads_of(ddp.module());
  });
  CHECK(local[0] != local[1]);  // inside no_sync nothing was averaged
  CHECK(got[0] == got[1]);
  for (const auto& [name, g] : want) {
    CAPTURE(name);
    CHECK(max_abs_diff(got[0].at(name), g) <= 1e-6 + 1e-5 * max_abs(g));
  }
}

TEST_CASE("ddp fp16 gradients: pre-division keeps the sum in range; an fp32 bucket reduces without rounding") {
  constexpr int kRanks = 4;
  // Rank r's gradient is G_r = 28672 + 1024 r + 32 i (FP16-exact): the sum over 4 ranks,
  // 120832 + 128 i, exceeds FP16's 65504, so summing first overflows; the average does not.
  auto grad_of_rank = [](int r) {
    std::vector<float> g(8);
    for (int i = 0; i < 8; ++i) g[i] = 28672.0f + 1024.0f * r + 32.0f * i;
    return g;
  };
  std::vector<std::vector<float>> prediv(kRanks), fp32(kRanks);
  for (bool as_fp32 : {false, true}) {
    run_ranks(kRanks, [&](Communicator& c) {
      auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
      auto m = std::make_shared<Params>(std::vector<std::pair<std::string, Tensor>>{{"w", Tensor::ones({8}, kFloat16)}});
      DistributedDataParallel ddp(m, comm, DdpOptions().gradient_as_fp32(as_fp32));
      CHECK(ddp.buckets()[0].dtype == (as_fp32 ? kFloat32 : kFloat16));
      ddp(Tensor::from_vector(grad_of_rank(c.rank()), {8}, kFloat16)).backward();
      (as_fp32 ? fp32 : prediv)[c.rank()] = ddp.module().parameters()[0].grad().to_float_vector();
      CHECK(ddp.module().parameters()[0].grad().dtype() == kFloat16);
    });
  }
  for (int i = 0; i < 8; ++i) {
    double exact = 0;
    for (int r = 0; r < kRanks; ++r) exact += grad_of_rank(r)[i] / kRanks;
    CAPTURE(i);
    // FP32 bucket: the exact average, rounded once to FP16.
    CHECK(fp32[0][i] == round_to_half(static_cast<float>(exact)));
    // FP16 bucket: each G_r / 4 is exact (a power-of-two divisor, no underflow), then 3 rounded adds.
    CHECK(std::isfinite(prediv[0][i]));
    CHECK(std::fabs(prediv[0][i] - exact) <= 3 * 8.0);  // 3 roundings, at most half an ulp (16 below 2^15) each
    for (int r = 1; r < kRanks; ++r) CHECK(prediv[r][i] == prediv[0][i]);
  }
  // Why pre-divide: the same gradients summed in FP16 first overflow.
  run_ranks(kRanks, [&](Communicator& c) {
    Tensor g = Tensor::from_vector(grad_of_rank(c.rank()), {8}, kFloat16);
    c.all_reduce(g, dist::ReduceOp::kSum);
    CHECK(std::isinf(g.item_at(0)));
  });
}

TEST_CASE("ddp: a parameter without a gradient is an error naming it, or zeros with find_unused_parameters") {
  auto model = [] {
    return std::make_shared<Params>(
        std::vector<std::pair<std::string, Tensor>>{{"used", Tensor::ones({3})}, {"unused", Tensor::ones({2})}}, true);
  };
  std::mutex mu;
  std::vector<std::string> msgs;
  run_ranks(2, [&](Communicator& c) {
    auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
    DistributedDataParallel ddp(model(), comm);
    try {
      ddp(Tensor::ones({3})).backward();
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      msgs.push_back(e.what());
    }
  });
  REQUIRE(msgs.size() == 2);
  for (const std::string& m : msgs) {
    CHECK_MESSAGE(m.find("parameter 'unused' [2] received no gradient") != std::string::npos, m);
    CHECK_MESSAGE(m.find("find_unused_parameters") != std::string::npos, m);
  }
  run_ranks(2, [&](Communicator& c) {
    auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
    DistributedDataParallel ddp(model(), comm, DdpOptions().find_unused_parameters(true));
    ddp(Tensor::full({3}, c.rank() + 1.0)).backward();
    const auto g = grads_of(ddp.module());
    CHECK(g.at("used") == std::vector<float>(3, 1.5f));  // (1 + 2) / 2
    CHECK(g.at("unused") == std::vector<float>(2, 0.0f));
  });
}

TEST_CASE("ddp find_unused_parameters: an unused parameter's accumulated gradient is reduced, not zeroed") {
  // As after no_sync() passes that used it: the parameter holds a local sum; the synced pass that does
  // not use it must average that sum over the ranks (PyTorch copies the existing .grad), not write 0.
  run_ranks(2, [&](Communicator& c) {
    auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
    auto net = std::make_shared<Params>(
        std::vector<std::pair<std::string, Tensor>>{{"used", Tensor::ones({3})}, {"unused", Tensor::ones({2})}}, true);
    DistributedDataParallel ddp(net, comm, DdpOptions().find_unused_parameters(true));
    for (auto& [name, p] : ddp.module().named_parameters())
      if (name == "unused") p.set_grad(Tensor::full({2}, 2.0 * (c.rank() + 1)));
    ddp(Tensor::ones({3})).backward();
    const auto g = grads_of(ddp.module());
    CHECK(g.at("used") == std::vector<float>(3, 1.0f));
    CHECK(g.at("unused") == std::vector<float>(2, 3.0f));  // (2 + 4) / 2
  });
}

TEST_CASE("ddp check_replicas: identical after construction; a perturbed weight is named on every rank") {
  for (int n : {2, 4}) {
    std::mutex mu;
    std::vector<std::string> msgs;
    run_ranks(n, [&](Communicator& c) {
      auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
      DistributedDataParallel ddp(small_conv_net(100 + c.rank()), comm);
      ddp.check_replicas("after construction");  // the broadcast made them identical
      if (c.rank() == n - 1) {
        Tensor w = ddp.module().named_parameters()[2].second;  // 2.weight
        w.data<float>()[5] = std::nextafter(w.data<float>()[5], 1e9f);  // one ulp
      }
      try {
        ddp.check_replicas("after the perturbation");
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        msgs.push_back(e.what());
      }
    });
    REQUIRE(msgs.size() == static_cast<size_t>(n));
    for (const std::string& m : msgs) {
      CHECK_MESSAGE(m.find("check_replicas(after the perturbation)") != std::string::npos, m);
      CHECK_MESSAGE(m.find("parameter '2.weight' [2, 3, 3, 3, 3] float32 differs between ranks") != std::string::npos, m);
      CHECK_MESSAGE(m.find("1 of 4 parameters differ") != std::string::npos, m);
    }
  }
}

CUDA_TEST_CASE("ddp cuda f32 and f16 buckets: 2 ranks on halves of the batch give one CUDA rank's whole-batch gradient") {
  const Tensor x = batch_tensor(kInput, 7), y = batch_tensor(kTarget, 8);
  for (bool half_model : {false, true}) {
    CAPTURE(half_model);
    auto ref_net = small_conv_net(100);
    ref_net->to(Device::CUDA);
    if (half_model) ref_net->to(kFloat16);
    const Dtype dt = half_model ? kFloat16 : kFloat32;
    ops::mse_loss((*ref_net)(x.cast_copy(dt).copy_to(Device::CUDA)), y.cast_copy(dt).copy_to(Device::CUDA)).backward();
    const auto want = grads_of(*ref_net);
    std::vector<std::map<std::string, std::vector<float>>> got(2);
    run_ranks(2, [&](Communicator& c) {
      auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
      auto net = small_conv_net(100 + c.rank());
      net->to(Device::CUDA);
      if (half_model) net->to(kFloat16);
      // A 1-byte cap: one parameter per bucket in either dtype (400 bytes held the FP16 model's
      // parameters in one bucket), so the overlap of several buckets is exercised on the device.
      DistributedDataParallel ddp(net, comm, DdpOptions().bucket_cap_mb(1.0 / (1 << 20)));
      CHECK(ddp.buckets().size() >= 2);
      const int64_t per = kBatch / 2;
      ops::mse_loss(ddp(samples(x, c.rank() * per, per).cast_copy(dt).copy_to(Device::CUDA)),
                    samples(y, c.rank() * per, per).cast_copy(dt).copy_to(Device::CUDA))
          .backward();
      got[c.rank()] = grads_of(ddp.module());
      ddp.check_replicas("cuda");
    });
    CHECK(got[0] == got[1]);
    for (const auto& [name, g] : want) {
      CAPTURE(name);
      // FP32: the sums are grouped differently. FP16: each half's weight gradient is rounded to FP16
      // before the average (a few roundings of 2^-11 relative to the largest element).
      const double tol = half_model ? 2e-2 * max_abs(g) : 1e-6 + 1e-5 * max_abs(g);
      CHECK(max_abs_diff(got[0].at(name), g) <= tol);
    }
  }
}
