#include "nn/conv_bn_relu.h"

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/conv3d.h"
#include "ops/conv/conv_bn.h"

namespace halfgrad::nn {

namespace {

// The (conv, bn) modules of stage i (0 or 1), or null when the child is not of the expected type.
struct StageModules {
  std::shared_ptr<Conv3d> conv;
  std::shared_ptr<BatchNorm3d> bn;
  bool relu = false;
};

StageModules stage_of(const Sequential& s, size_t i) {
  StageModules m;
  if (s.size() != 6) return m;
  m.conv = std::dynamic_pointer_cast<Conv3d>(s[3 * i]);
  m.bn = std::dynamic_pointer_cast<BatchNorm3d>(s[3 * i + 1]);
  m.relu = std::dynamic_pointer_cast<ReLU>(s[3 * i + 2]) != nullptr;
  return m;
}

bool plain_stage(const StageModules& m) {
  if (!m.conv || !m.bn || !m.relu) return false;
  const Conv3dOptions& o = m.conv->options;
  return o.kernel_size() == ExpandingArray<3>(3) && o.stride() == ExpandingArray<3>(1) &&
         o.padding() == ExpandingArray<3>(1) && o.dilation() == ExpandingArray<3>(1) && !m.conv->bias.defined() &&
         !m.conv->autocast_fp32() && !m.bn->autocast_fp32();
}

ops::ConvBnReluStage op_stage(const StageModules& m) {
  ops::ConvBnReluStage s;
  s.conv_weight = m.conv->weight;
  s.bn_weight = m.bn->weight;
  s.bn_bias = m.bn->bias;
  s.running_mean = m.bn->running_mean;
  s.running_var = m.bn->running_var;
  // As BatchNorm3d::forward: batch statistics in training or without running statistics.
  const bool batch_stats = m.bn->is_training() || !m.bn->options.track_running_stats_;
  s.bn = ops::BatchNormParams().training(batch_stats).momentum(m.bn->options.momentum_).eps(m.bn->options.eps_);
  return s;
}

}  // namespace

ConvBnReluPair::ConvBnReluPair(int64_t ci, int64_t co, Generator& gen) {
  for (int64_t in : {ci, co}) {
    push_back(std::make_shared<Conv3d>(Conv3dOptions(in, co, 3).padding(1).bias(false), gen));
    push_back(std::make_shared<BatchNorm3d>(BatchNorm3dOptions(co)));
    push_back(std::make_shared<ReLU>());
  }
}

bool ConvBnReluPair::fused_for(const Tensor& x) const {
  const StageModules a = stage_of(*this, 0), b = stage_of(*this, 1);
  if (!plain_stage(a) || !plain_stage(b)) return false;
  return ops::conv_bn_relu_pair_fusable(x, op_stage(a), op_stage(b));
}

Tensor ConvBnReluPair::forward(const Tensor& x) {
  if (!fused_for(x)) return Sequential::forward(x);
  const StageModules a = stage_of(*this, 0), b = stage_of(*this, 1);
  for (const StageModules* m : {&a, &b}) {  // BatchNorm3d::forward's bookkeeping
    if (m->bn->is_training() && m->bn->options.track_running_stats_) {
      m->bn->num_batches_tracked.data<int64_t>()[0] += 1;
      m->bn->num_batches_tracked.bump_version();
    }
  }
  return ops::conv_bn_relu_pair(x, op_stage(a), op_stage(b));
}

}  // namespace halfgrad::nn
