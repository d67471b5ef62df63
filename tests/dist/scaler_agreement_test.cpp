// GradScaler agreement across ranks (dist/scaler_agreement.h): an inf injected into one rank's
// gradient after the DDP reduction makes EVERY rank skip that step, keep the same scale and growth
// tracker, and the replicas stay identical (check_replicas). Without the agreement the same run
// leaves the replicas different, which check_replicas reports.
#include <doctest/doctest.h>

#include <limits>
#include <mutex>

#include "amp/grad_scaler.h"
#include "dist/distributed_data_parallel.h"
#include "dist/scaler_agreement.h"
#include "nn/linear.h"
#include "ops/loss/elementwise_loss.h"
#include "optim/sgd.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test_case.h"
#include "tests/dist/dist_test_util.h"

using namespace halfgrad;
using halfgrad::dist::Communicator;
using halfgrad::dist::DistributedDataParallel;
using halfgrad::testing::run_ranks;

namespace {

struct StepRecord {
  bool stepped;
  double scale;
  int64_t tracker;
};

// Three AMP iterations on rank c's quarter of a fixed batch; in iteration 0 rank `inject_rank` gets an
// inf in its first gradient after backward (after the reduction). Returns the rank's records; throws
// what check_replicas throws.
std::vector<StepRecord> amp_iterations(Communicator& c, bool agree, int inject_rank, Device device) {
  auto comm = std::shared_ptr<Communicator>(&c, [](Communicator*) {});
  Generator g(10 + c.rank());
  auto lin = std::make_shared<nn::Linear>(nn::LinearOptions(4, 2), g);
  if (device == Device::CUDA) lin->to(Device::CUDA);
  DistributedDataParallel ddp(lin, comm);
  optim::SGD sgd(ddp.module().parameters(), optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024).growth_interval(2));
  if (agree) dist::set_communicator(scaler, comm);
  Generator data(99);
  const Tensor x_all = Tensor::randn({4 * c.world_size(), 4}, data), y_all = Tensor::randn({4 * c.world_size(), 2}, data);
  std::vector<StepRecord> out;
  for (int it = 0; it < 3; ++it) {
    ddp.module().zero_grad();
    const std::vector<float> xv = x_all.to_float_vector(), yv = y_all.to_float_vector();
    const Tensor x = Tensor::from_vector(std::vector<float>(xv.begin() + 16 * c.rank(), xv.begin() + 16 * (c.rank() + 1)), {4, 4}).copy_to(device);
    const Tensor y = Tensor::from_vector(std::vector<float>(yv.begin() + 8 * c.rank(), yv.begin() + 8 * (c.rank() + 1)), {4, 2}).copy_to(device);
    scaler.scale(ops::mse_loss(ddp(x), y)).backward();
    if (it == 0 && c.rank() == inject_rank) {
      Tensor grad = ddp.module().parameters()[0].grad();
      std::vector<float> v = grad.to_float_vector();
      v[0] = std::numeric_limits<float>::infinity();
      grad.copy_from(Tensor::from_vector(v, grad.shape()));
    }
    const bool stepped = scaler.step(sgd);
    scaler.update();
    out.push_back({stepped, scaler.get_scale(), scaler.get_growth_tracker()});
    ddp.check_replicas("after a GradScaler step");
  }
  return out;
}

void check_agreement(int n, Device device) {
  std::vector<std::vector<StepRecord>> rec(n);
  run_ranks(n, [&](Communicator& c) { rec[c.rank()] = amp_iterations(c, true, 1, device); });
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    REQUIRE(rec[r].size() == 3);
    // The inf on rank 1 skips step 0 everywhere (scale halved, tracker reset); two clean steps then
    // reach growth_interval 2 and double the scale again.
    CHECK(!rec[r][0].stepped);
    CHECK(rec[r][0].scale == 512.0);
    CHECK(rec[r][0].tracker == 0);
    CHECK(rec[r][1].stepped);
    CHECK(rec[r][1].scale == 512.0);
    CHECK(rec[r][1].tracker == 1);
    CHECK(rec[r][2].stepped);
    CHECK(rec[r][2].scale == 1024.0);
    CHECK(rec[r][2].tracker == 0);
  }
}

}  // namespace

TEST_CASE("scaler agreement: an inf on one rank skips the step on every rank, same scale and tracker, same weights") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    check_agreement(n, Device::CPU);
  }
}

TEST_CASE("scaler without agreement: one rank skips alone and check_replicas names the diverged weight") {
  std::mutex mu;
  std::vector<std::string> msgs;
  run_ranks(2, [&](Communicator& c) {
    try {
      amp_iterations(c, false, 1, Device::CPU);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      msgs.push_back(e.what());
    }
  });
  REQUIRE(msgs.size() == 2);
  for (const std::string& m : msgs) CHECK_MESSAGE(m.find("parameter 'weight' [2, 4] float32 differs between ranks") != std::string::npos, m);
}

CUDA_TEST_CASE("scaler agreement cuda: the device found_inf flag is max-reduced; every rank skips together") {
  check_agreement(2, Device::CUDA);
}
