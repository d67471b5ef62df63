// buffer_snapshot.cpp - nn::BufferSnapshot (buffer_snapshot.h).
#include "nn/buffer_snapshot.h"

#include "core/error.h"

namespace halfgrad::nn {

BufferSnapshot::BufferSnapshot(Module& module) : live_(module.named_buffers()) {
  saved_.reserve(live_.size());
  for (const auto& kv : live_) saved_.push_back(kv.second.clone());
}

static void check_same(const std::string& name, const Tensor& live, const Tensor& saved) {
  HG_CHECK(live.shape() == saved.shape() && live.dtype() == saved.dtype() && live.device() == saved.device(),
           "nn::BufferSnapshot: buffer '" << name << "' is now " << shape_str(live.shape()) << " "
                                          << dtype_name(live.dtype()) << " on " << device_name(live.device())
                                          << ", but was " << shape_str(saved.shape()) << " " << dtype_name(saved.dtype())
                                          << " on " << device_name(saved.device())
                                          << " when the snapshot was made; make a new BufferSnapshot after Module::to");
}

void BufferSnapshot::capture() {
  for (size_t i = 0; i < live_.size(); ++i) {
    check_same(live_[i].first, live_[i].second, saved_[i]);
    saved_[i].copy_from(live_[i].second);
  }
}

void BufferSnapshot::restore() {
  for (size_t i = 0; i < live_.size(); ++i) {
    check_same(live_[i].first, live_[i].second, saved_[i]);
    Tensor live = live_[i].second;
    live.copy_from(saved_[i]);
  }
}

size_t BufferSnapshot::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : saved_) n += t.nbytes();
  return n;
}

}  // namespace halfgrad::nn
