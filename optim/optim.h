// optim.h - every optimizer, schedule and utility of halfgrad::optim in one include.
//   Optimizer (optimizer.h)      parameter groups, zero_grad, step, state_dict, FP32 master weights
//   AdamW (adamw.h), SGD (sgd.h)  torch.optim.AdamW / torch.optim.SGD updates
//   StepLR, CosineAnnealingLR, LinearLR, SequentialLR, cosine_with_warmup (lr_scheduler.h)
//   clip_grad_norm_ (clip_grad.h)
#pragma once
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
