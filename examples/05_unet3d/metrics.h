// metrics.h - Dice of an argmax prediction, the figure halfgrad-unet3d reports.
//   Dice_c(volume) = 2 |P_c & T_c| / (|P_c| + |T_c|), and 1 when both are empty;
//   the reported per-class Dice is the mean over volumes (as torch_hippo_train.py's `dice`).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace unet3d_app {

/// pred, target: (D, H, W) int64. Returns Dice for classes 1..num_classes-1.
std::vector<double> dice_per_class(const halfgrad::Tensor& pred, const halfgrad::Tensor& target, int64_t num_classes);

}  // namespace unet3d_app
