// buffer_snapshot.cpp - nn::BufferSnapshot (buffer_snapshot.h).
#include "nn/buffer_snapshot.h"

#include "core/error.h"
#ifdef HALFGRAD_CUDA
#include "core/cuda/tensor_kernels.h"
#endif

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

void BufferSnapshot::restore_if(const Tensor& found_inf) {
  HG_CHECK(found_inf.defined() && found_inf.is_cuda() && found_inf.dtype() == kFloat32 && found_inf.numel() == 1,
           "nn::BufferSnapshot::restore_if: expected a 1-element float32 CUDA flag");
#ifdef HALFGRAD_CUDA
  std::vector<cuda::FlaggedCopy> copies;
  for (size_t i = 0; i < live_.size(); ++i) {
    check_same(live_[i].first, live_[i].second, saved_[i]);
    if (!live_[i].second.is_cuda()) continue;  // a host count (see the header)
    HG_CHECK(live_[i].second.memory_format() == saved_[i].memory_format(),
             "nn::BufferSnapshot::restore_if: buffer '" << live_[i].first << "' changed its memory format");
    live_[i].second.bump_version();  // perhaps written in place below
    copies.push_back({live_[i].second.raw_data(), saved_[i].raw_data(), static_cast<int64_t>(saved_[i].nbytes())});
  }
  cuda::copy_if_flag(copies.data(), static_cast<int64_t>(copies.size()), found_inf.data<float>());
#endif
}

size_t BufferSnapshot::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : saved_) n += t.nbytes();
  return n;
}

}  // namespace halfgrad::nn
