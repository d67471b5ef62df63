// conv_bn_relu.h - ConvBnReluPair: the U-Net block Sequential(Conv3d, BatchNorm3d, ReLU, Conv3d,
// BatchNorm3d, ReLU) that runs as the fused op ops::conv_bn_relu_pair (ops/conv/conv_bn.h) where that
// applies, and as the Sequential it is everywhere else.
//
// It is a Sequential with the same six children, so parameter and buffer names ("0.weight",
// "1.running_mean", "4.num_batches_tracked", ...), state_dict and checkpoints are those of the plain
// block. forward takes the fused op when ops::conv_bn_relu_pair_fusable holds (CUDA, FP16/BF16 autocast,
// 16 or 32 channels, ...), the convs are 3x3x3 stride 1 padding 1 dilation 1 without bias, and no child
// is marked set_autocast_fp32; it then does what BatchNorm3d::forward does besides the op
// (num_batches_tracked += 1 in training with running statistics). Otherwise Sequential::forward.
#pragma once
#include <memory>

#include "nn/containers.h"

namespace halfgrad::nn {

class ConvBnReluPair : public Sequential {
 public:
  /// Conv3d(ci, co, 3, padding 1, no bias), BatchNorm3d(co), ReLU, Conv3d(co, co, ...), BatchNorm3d(co), ReLU.
  ConvBnReluPair(int64_t ci, int64_t co, Generator& gen = default_generator());
  /// x (N, ci, D, H, W) -> (N, co, D, H, W); errors as the Sequential's.
  Tensor forward(const Tensor& x) override;
  /// Whether forward(x) would take the fused op now (for tests and benchmarks).
  bool fused_for(const Tensor& x) const;
};

}  // namespace halfgrad::nn
