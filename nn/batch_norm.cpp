#include "nn/batch_norm.h"

#include <sstream>

#include "core/error.h"
#include "ops/norm/norm.h"

namespace halfgrad::nn {

BatchNorm3d::BatchNorm3d(const BatchNorm3dOptions& o) : Module("BatchNorm3d"), options(o) {
  HG_CHECK(o.num_features_ >= 1, "BatchNorm3d: num_features must be >= 1, got " << o.num_features_);
  HG_CHECK(o.eps_ > 0, "BatchNorm3d: eps must be > 0, got " << o.eps_);
  HG_CHECK(o.momentum_ >= 0 && o.momentum_ <= 1, "BatchNorm3d: momentum must be in [0, 1], got " << o.momentum_);
  const int64_t c = o.num_features_;
  if (o.affine_) {
    weight = register_parameter("weight", Tensor::empty({c}));
    bias = register_parameter("bias", Tensor::empty({c}));
  }
  if (o.track_running_stats_) {
    running_mean = register_buffer("running_mean", Tensor::empty({c}));
    running_var = register_buffer("running_var", Tensor::empty({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, kInt64));
  }
  reset_parameters();
}

void BatchNorm3d::reset_running_stats() {
  if (!options.track_running_stats_) return;
  running_mean.fill_(0.0);
  running_var.fill_(1.0);
  num_batches_tracked.fill_(0.0);
}

void BatchNorm3d::reset_parameters() {
  reset_running_stats();
  if (!options.affine_) return;
  weight.fill_(1.0);
  bias.fill_(0.0);
}

Tensor BatchNorm3d::forward(const Tensor& x) {
  HG_CHECK(x.defined(), "BatchNorm3d: input is undefined");
  HG_CHECK(x.dim() == 5, "BatchNorm3d: expected 5D input (N, C, D, H, W), got " << x.dim() << "D input "
                                                                              << shape_str(x.shape()));
  HG_CHECK(x.size(1) == options.num_features_, "BatchNorm3d: input " << shape_str(x.shape()) << " has " << x.size(1)
                                                                    << " channels; expected " << options.num_features_);
  // As PyTorch: batch statistics whenever training, or always when no running statistics are kept
  // (running_mean / running_var are then undefined, and ops::batch_norm updates nothing).
  const bool use_batch_stats = is_training() || !options.track_running_stats_;
  if (is_training() && options.track_running_stats_) {
    num_batches_tracked.data<int64_t>()[0] += 1;
    num_batches_tracked.bump_version();  // an in-place write, like the running statistics' update
  }
  return ops::batch_norm(x, running_mean, running_var, weight, bias,
                         ops::BatchNormParams().training(use_batch_stats).momentum(options.momentum_).eps(options.eps_));
}

std::string BatchNorm3d::extra_repr() const {
  std::ostringstream os;
  os << options.num_features_ << ", eps=" << options.eps_ << ", momentum=" << options.momentum_
     << ", affine=" << (options.affine_ ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats_ ? "true" : "false");
  return os.str();
}

}  // namespace halfgrad::nn
