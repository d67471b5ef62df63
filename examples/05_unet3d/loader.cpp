// loader.cpp - BatchLoader and StepGapTimer (loader.h).
#include "examples/05_unet3d/loader.h"

#include <chrono>
#include <cstring>
#include <sstream>

#include "core/cuda/runtime.h"
#include "core/cuda/streams.h"
#include "core/error.h"

namespace unet3d_app {

using namespace halfgrad;

namespace {
constexpr size_t kAlign = 256;  // y starts on a 256-byte boundary of a slot, as allocator blocks do
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

// One staging slot: the batch of step s lives here between the worker's H2D copy and next()'s D2D copy.
struct BatchLoader::Slot {
  cuda::PinnedBuffer host;
  cuda::DeviceBuffer device;
  cuda::Event h2d_done;  // on the copy stream: the batch is in `device` and `host` may be refilled
  cuda::Event consumed;  // on the main stream: next() has copied `device` out, so it may be refilled
};

struct BatchLoader::CopyEngine {
  cuda::Stream stream;
  std::mutex mu;  // a slot's wait, copy and record are queued together
};

std::string LoaderStats::summary(int workers, int prefetch) const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << "loader: " << batches << " batches, " << workers << (workers == 1 ? " worker" : " workers");
  if (workers > 0) os << ", prefetch " << prefetch;
  os << "; the training thread waited " << wait_seconds << " s for them in total ("
     << (batches ? 1000.0 * wait_seconds / batches : 0.0) << " ms per step; the first batch " << first_wait_seconds
     << " s)";
  return os.str();
}

BatchLoader::BatchLoader(BatchBuilder build, int64_t first_step, int64_t end_step, LoaderOptions options)
    : build_(std::move(build)), end_(end_step), opt_(options), next_(first_step), claim_(first_step) {
  HG_CHECK(opt_.workers >= 0, "BatchLoader: --workers must be >= 0, got " << opt_.workers);
  HG_CHECK(opt_.prefetch >= 1, "BatchLoader: --prefetch must be >= 1, got " << opt_.prefetch);
  HG_CHECK(first_step >= 0 && first_step <= end_step,
           "BatchLoader: first step " << first_step << " outside [0, " << end_step << "]");
  if (opt_.workers == 0) return;
  if (opt_.device == Device::CUDA) {
    copy_ = std::make_unique<CopyEngine>();
    for (int k = 0; k < opt_.prefetch; ++k) slots_.push_back(std::make_unique<Slot>());
  }
  for (int w = 0; w < opt_.workers; ++w) threads_.emplace_back([this] { worker_loop(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  // The buffers are freed only once no stream still reads or writes them.
  try {
    if (copy_) copy_->stream.synchronize();
    for (auto& s : slots_) s->consumed.synchronize();
  } catch (const std::exception&) {
    // A CUDA fault was already reported (or will be) by the training thread's own calls.
  }
}

void BatchLoader::worker_loop() {
  for (;;) {
    int64_t step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Step s may be built once s - prefetch has been delivered: the queue holds at most `prefetch`
      // batches, and the CUDA slot s % prefetch is free.
      work_cv_.wait(lock, [&] { return stop_ || claim_ >= end_ || claim_ < next_ + opt_.prefetch; });
      if (stop_ || claim_ >= end_) return;
      step = claim_++;
    }
    Built b;
    try {
      build_(step, b.x, b.y);
      HG_CHECK(b.x.defined() && b.y.defined() && b.x.device() == Device::CPU && b.y.device() == Device::CPU &&
                   b.x.memory_format() == MemoryFormat::Contiguous,
               "the batch builder must return contiguous CPU tensors x and y");
      if (copy_) stage(step, b.x, b.y);
    } catch (...) {
      b.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_[step] = std::move(b);
    }
    ready_cv_.notify_all();
  }
}

void BatchLoader::stage(int64_t step, const Tensor& x, const Tensor& y) {
  Slot& s = *slots_[static_cast<size_t>(step % opt_.prefetch)];
  const size_t need = aligned(x.nbytes()) + y.nbytes();
  s.h2d_done.synchronize();  // the slot's previous H2D has read the pinned buffer
  if (s.host.size() < need) s.host = cuda::PinnedBuffer(need);
  if (s.device.size() < need) {
    s.consumed.synchronize();  // the main stream no longer reads the old device buffer
    s.device = cuda::DeviceBuffer(need);
  }
  auto* host = static_cast<unsigned char*>(s.host.data());
  std::memcpy(host, x.raw_data(), x.nbytes());
  std::memcpy(host + aligned(x.nbytes()), y.raw_data(), y.nbytes());
  std::lock_guard<std::mutex> lock(copy_->mu);
  copy_->stream.wait(s.consumed);
  copy_->stream.copy_h2d_async(s.device.data(), s.host.data(), need);
  s.h2d_done.record(copy_->stream);
}

void BatchLoader::next(Tensor& x, Tensor& y) {
  HG_CHECK(next_ < end_, "BatchLoader::next: all " << end_ << " steps' batches were delivered");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t step = next_;
  Built b;
  if (opt_.workers == 0) {
    try {
      build_(step, b.x, b.y);
    } catch (...) {
      b.error = std::current_exception();
    }
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [&] { return ready_.count(step) > 0; });
    b = std::move(ready_[step]);
    ready_.erase(step);
  }
  if (b.error) {
    // The step leaves the queue either way, so a caller that goes on gets the next step's batch.
    if (opt_.workers > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      ++next_;
    } else {
      ++next_;
    }
    work_cv_.notify_all();
    try {
      std::rethrow_exception(b.error);
    } catch (const std::exception& e) {
      HG_FAIL("halfgrad-unet3d loader: building the batch of training step " << step
                                                                             << " (counting from 0) failed: " << e.what());
    }
  }
  if (copy_) {
    Slot& s = *slots_[static_cast<size_t>(step % opt_.prefetch)];
    cuda::main_stream_wait(s.h2d_done);
    Tensor dx = Tensor::empty(b.x.shape(), b.x.dtype(), Device::CUDA);
    Tensor dy = Tensor::empty(b.y.shape(), b.y.dtype(), Device::CUDA);
    const auto* dev = static_cast<const unsigned char*>(s.device.data());
    cuda::copy_d2d(dx.raw_data(), dev, dx.nbytes());
    cuda::copy_d2d(dy.raw_data(), dev + aligned(dx.nbytes()), dy.nbytes());
    s.consumed.record_on_main();  // before the slot is handed out again (under the lock below)
    b.x = dx;
    b.y = dy;
  }
  if (opt_.workers > 0) {
    { std::lock_guard<std::mutex> lock(mu_); ++next_; }
    work_cv_.notify_all();
  } else {
    ++next_;
  }
  x = b.x;
  y = b.y;
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats_.batches == 0) stats_.first_wait_seconds = waited;
  ++stats_.batches;
  stats_.wait_seconds += waited;
}

// ---- StepGapTimer -----------------------------------------------------------------------------------
struct StepGapTimer::Pair {
  cuda::Event end, start;  // end of step i, start of step i + 1
  bool complete = false;   // both recorded, not yet read
};

StepGapTimer::StepGapTimer(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  for (int k = 0; k < kDepth; ++k) ring_.push_back(std::make_unique<Pair>());
}
StepGapTimer::~StepGapTimer() = default;

void StepGapTimer::collect(Pair& p) {
  if (!p.complete) return;
  p.start.synchronize();
  total_ms_ += p.start.elapsed_ms_since(p.end);
  ++gaps_;
  p.complete = false;
}

void StepGapTimer::step_end() {
  if (!enabled_) return;
  Pair& p = *ring_[cur_];
  collect(p);  // recorded kDepth steps ago
  p.end.record_on_main();
  have_end_ = true;
}

void StepGapTimer::step_start() {
  if (!enabled_ || !have_end_) return;
  Pair& p = *ring_[cur_];
  p.start.record_on_main();
  p.complete = true;
  have_end_ = false;
  cur_ = (cur_ + 1) % kDepth;
}

double StepGapTimer::finish() {
  for (auto& p : ring_) collect(*p);
  return total_ms_ / 1000.0;
}

}  // namespace unet3d_app
