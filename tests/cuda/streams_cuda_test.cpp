// core/cuda/streams.h: pinned host memory, loader-owned device memory, a second stream and events.
// The round trip host -> pinned -> device (copy stream) -> main stream is checked value for value,
// with the main stream ordered after the copy by an event, and a device buffer reused only after an
// event says its reader is done. Without a device every constructor must refuse, naming itself.
#include "core/cuda/streams.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;

TEST_CASE("cuda streams: without a usable device (or CUDA) every handle refuses, naming itself") {
  if (cuda::is_available()) return;  // the cases below cover a machine with a GPU
  CHECK_THROWS_WITH_AS(cuda::PinnedBuffer(64), doctest::Contains("cuda::PinnedBuffer"), Error);
  CHECK_THROWS_WITH_AS(cuda::DeviceBuffer(64), doctest::Contains("cuda::DeviceBuffer"), Error);
  CHECK_THROWS_WITH_AS(cuda::Event(), doctest::Contains("cuda::Event"), Error);
  CHECK_THROWS_WITH_AS(cuda::Stream(), doctest::Contains("cuda::Stream"), Error);
  cuda::PinnedBuffer empty;  // default-constructed handles hold nothing and need no device
  CHECK(empty.data() == nullptr);
  CHECK(empty.size() == 0);
}

CUDA_TEST_CASE("cuda streams: pinned -> device on the copy stream, main stream waits on the event, values equal") {
  constexpr size_t kN = (1 << 20) + 3;  // not a multiple of anything
  cuda::PinnedBuffer host(kN * sizeof(float));
  cuda::DeviceBuffer dev(kN * sizeof(float));
  cuda::Stream copy;
  cuda::Event copied, consumed;
  std::vector<float> want(kN);
  for (int round = 0; round < 3; ++round) {
    std::iota(want.begin(), want.end(), static_cast<float>(round * 7));
    copied.synchronize();  // the previous round's copy has read the pinned buffer
    std::memcpy(host.data(), want.data(), kN * sizeof(float));
    copy.wait(consumed);   // the previous round's reader has finished with dev
    copy.copy_h2d_async(dev.data(), host.data(), kN * sizeof(float));
    copied.record(copy);
    cuda::main_stream_wait(copied);
    Tensor t = Tensor::empty({static_cast<int64_t>(kN)}, kFloat32, Device::CUDA);
    cuda::copy_d2d(t.raw_data(), dev.data(), kN * sizeof(float));
    consumed.record_on_main();
    CHECK(t.to_float_vector() == want);
  }
  copy.synchronize();
  CHECK(copied.query());
  CHECK(consumed.query());
  CHECK(consumed.elapsed_ms_since(consumed) == doctest::Approx(0.0));
}

CUDA_TEST_CASE("cuda streams: handles move, and a moved-from handle refuses with a message") {
  cuda::Event a;
  cuda::Event b(std::move(a));
  b.record_on_main();
  b.synchronize();
  CHECK_THROWS_WITH_AS(a.synchronize(), doctest::Contains("moved from"), Error);
  cuda::PinnedBuffer p(128);
  void* ptr = p.data();
  cuda::PinnedBuffer q = std::move(p);
  CHECK(q.data() == ptr);
  CHECK(p.data() == nullptr);
  CHECK_THROWS_WITH_AS(cuda::DeviceBuffer(0), doctest::Contains("expected a size > 0"), Error);
}
