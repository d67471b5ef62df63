// The in-process communicator (dist/in_process_communicator.h): values and bits of all_reduce and
// broadcast for world sizes 1-4 and every reducible dtype, against a rank-order reference computed
// here; mismatches and failing ranks end in an Error on every rank, never a hang.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "core/cuda/runtime.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test_case.h"
#include "tests/dist/dist_test_util.h"

using namespace halfgrad;
using halfgrad::dist::Communicator;
using halfgrad::dist::ReduceOp;
using halfgrad::testing::run_ranks;

namespace {

// Rank r's input: N(0, 1) seeded by the rank, scaled so that FP16 sums round visibly.
Tensor rank_input(int rank, Dtype dt, const Shape& s = {3, 5}) {
  Generator g(100 + rank);
  if (dt == kInt64) {
    std::vector<int64_t> v(shape_numel(s));
    for (auto& x : v) x = g.randint(1000) - 500;
    return Tensor::from_labels(v, s);
  }
  return Tensor::randn(s, g, kFloat32, 3.0).cast_copy(dt);
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.copy_to(Device::CPU);
  std::vector<uint8_t> b(c.nbytes());
  std::memcpy(b.data(), c.raw_data(), b.size());
  return b;
}

// The reference: rank 0's values, then each rank's added (or maxed) in order, rounded to the dtype
// after each step.
Tensor reference_reduce(int world_size, Dtype dt, ReduceOp op) {
  Tensor acc = rank_input(0, dt);
  std::vector<double> a = acc.to_double_vector();
  for (int r = 1; r < world_size; ++r) {
    const std::vector<double> x = rank_input(r, dt).to_double_vector();
    for (size_t i = 0; i < a.size(); ++i) {
      const float fa = static_cast<float>(a[i]), fx = static_cast<float>(x[i]);
      double v = a[i] + x[i];  // float64, int64 (exact here)
      if (op == ReduceOp::kMax) v = std::max(a[i], x[i]);
      else if (dt == kFloat32) v = fa + fx;
      else if (dt == kFloat16) v = round_to_half(fa + fx);
      else if (dt == kBFloat16) v = round_to_bfloat16(fa + fx);
      a[i] = v;
    }
  }
  if (dt == kInt64) {
    std::vector<int64_t> v(a.begin(), a.end());
    return Tensor::from_labels(v, acc.shape());
  }
  return Tensor::from_vector(a, acc.shape()).cast_copy(dt);
}

}  // namespace

TEST_CASE("in_process all_reduce sum and max: rank-order values, identical bits on every rank, every run") {
  for (int n = 1; n <= 4; ++n) {
    for (Dtype dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        CAPTURE(n);
        CAPTURE(dtype_name(dt));
        CAPTURE(dist::reduce_op_name(op));
        const std::vector<uint8_t> want = bytes_of(reference_reduce(n, dt, op));
        for (int run = 0; run < 2; ++run) {
          std::vector<std::vector<uint8_t>> got(n);
          run_ranks(n, [&](Communicator& c) {
            Tensor t = rank_input(c.rank(), dt);
            c.all_reduce(t, op);
            got[c.rank()] = bytes_of(t);
          });
          for (int r = 0; r < n; ++r) CHECK_MESSAGE(got[r] == want, "rank " << r << " run " << run);
        }
      }
    }
  }
}

TEST_CASE("in_process all_reduce: several in flight at once complete in call order; max keeps NaN") {
  run_ranks(3, [](Communicator& c) {
    Tensor a = Tensor::full({4}, c.rank() + 1.0);
    Tensor b = Tensor::full({2}, c.rank() == 1 ? std::nan("") : 1.0);
    Tensor i = Tensor::from_labels({c.rank(), 10 * c.rank()}, {2});
    auto wa = c.all_reduce_async(a, ReduceOp::kSum);
    auto wb = c.all_reduce_async(b, ReduceOp::kMax);
    auto wi = c.all_reduce_async(i, ReduceOp::kSum);
    wi->wait();
    wb->wait();
    wa->wait();
    wa->wait();  // a second wait does nothing
    CHECK(a.to_double_vector() == std::vector<double>(4, 6.0));
    CHECK(std::isnan(b.item_at(0)));
    CHECK(i.to_double_vector() == std::vector<double>{3.0, 30.0});
  });
}

TEST_CASE("in_process broadcast from every root, any dtype; barrier waits for every rank") {
  for (int n = 1; n <= 4; ++n) {
    for (int root = 0; root < n; ++root) {
      std::vector<std::vector<uint8_t>> got(n);
      run_ranks(n, [&](Communicator& c) {
        Tensor t = rank_input(c.rank(), kFloat16, {7});
        c.broadcast(t, root);
        got[c.rank()] = bytes_of(t);
      });
      for (int r = 0; r < n; ++r) CHECK(got[r] == bytes_of(rank_input(root, kFloat16, {7})));
    }
  }
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  run_ranks(4, [&](Communicator& c) {
    if (c.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    arrived.fetch_add(1);
    c.barrier();
    if (arrived.load() != 4) early.fetch_add(1);
  });
  CHECK(early.load() == 0);
}

TEST_CASE("in_process mismatched shape or dtype: an Error on every rank naming both, no hang") {
  for (int n = 2; n <= 4; ++n) {
    std::mutex mu;
    std::vector<std::string> msgs;
    run_ranks(n, [&](Communicator& c) {
      Tensor t = c.rank() == n - 1 ? Tensor::zeros({3}) : Tensor::zeros({2, 3});
      try {
        c.all_reduce(t, ReduceOp::kSum);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        msgs.push_back(e.what());
      }
      // The group stays usable after a mismatch: the next collective agrees.
      Tensor ok = Tensor::ones({2});
      c.all_reduce(ok, ReduceOp::kSum);
      CHECK(ok.item_at(0) == n);
    });
    REQUIRE(msgs.size() == static_cast<size_t>(n));
    for (const std::string& m : msgs) {
      CHECK_MESSAGE(m.find("all_reduce") != std::string::npos, m);
      CHECK_MESSAGE(m.find("[2, 3] float32") != std::string::npos, m);
      CHECK_MESSAGE(m.find("[3] float32") != std::string::npos, m);
    }
  }
  testing::check_error(
      [] {
        run_ranks(2, [](Communicator& c) {
          Tensor t = Tensor::zeros({4}, c.rank() == 0 ? kFloat32 : kFloat16);
          c.all_reduce(t, ReduceOp::kSum);
        });
      },
      {"all_reduce", "float32", "float16"});
  testing::check_error(
      [] {
        run_ranks(2, [](Communicator& c) {
          Tensor t = Tensor::zeros({4});
          if (c.rank() == 0) c.all_reduce(t, ReduceOp::kSum);
          else c.broadcast(t, 0);
        });
      },
      {"ranks disagree", "all_reduce(sum)", "broadcast(root 0)"});
  testing::check_error(
      [] {
        run_ranks(2, [](Communicator& c) {
          Tensor t = Tensor::zeros({4});
          c.broadcast(t, 2);
        });
      },
      {"broadcast", "root 2"});
}

TEST_CASE("in_process a failing rank breaks the group: the others throw 'rank R failed', never hang") {
  std::atomic<int> broken_seen{0};
  testing::check_error(
      [&] {
        run_ranks(4, [&](Communicator& c) {
          Tensor t = Tensor::ones({8});
          c.all_reduce(t, ReduceOp::kSum);  // everyone gets past the first one
          if (c.rank() == 1) HG_FAIL("the loss of rank 1 is NaN");
          try {
            c.all_reduce(t, ReduceOp::kSum);
          } catch (const dist::GroupBrokenError& e) {
            CHECK(std::string(e.what()).find("rank 1 failed") != std::string::npos);
            broken_seen.fetch_add(1);
            throw;
          }
        });
      },
      {"the loss of rank 1 is NaN"});
  CHECK(broken_seen.load() == 3);

  // A rank that stops calling collectives without failing: the others time out instead of hanging.
  auto t0 = std::chrono::steady_clock::now();
  testing::check_error(
      [] {
        dist::run_in_process_ranks(
            2,
            [](Communicator& c) {
              if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
              Tensor t = Tensor::ones({2});
              c.all_reduce(t, ReduceOp::kSum);
            },
            std::chrono::milliseconds(200));
      },
      {"timed out after 200 ms"});
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));

  testing::check_error([] { dist::make_in_process_group(0); }, {"make_in_process_group", "world_size 0"});
  testing::check_error(
      [] {
        run_ranks(2, [](Communicator& c) {
          Tensor t;
          c.all_reduce(t, ReduceOp::kSum);
        });
      },
      {"all_reduce", "undefined"});
}

CUDA_TEST_CASE("in_process all_reduce and broadcast of CUDA f32/f16 tensors match the CPU's bits") {
  for (Dtype dt : {kFloat32, kFloat16}) {
    const std::vector<uint8_t> want = bytes_of(reference_reduce(3, dt, ReduceOp::kSum));
    std::vector<std::vector<uint8_t>> got(3), bcast(3);
    run_ranks(3, [&](Communicator& c) {
      Tensor t = rank_input(c.rank(), dt).copy_to(Device::CUDA);
      c.all_reduce(t, ReduceOp::kSum);
      got[c.rank()] = bytes_of(t);
      Tensor b = rank_input(c.rank(), dt).copy_to(Device::CUDA);
      c.broadcast(b, 2);
      bcast[c.rank()] = bytes_of(b);
    });
    for (int r = 0; r < 3; ++r) {
      CHECK(got[r] == want);
      CHECK(bcast[r] == bytes_of(rank_input(2, dt)));
    }
  }
}
