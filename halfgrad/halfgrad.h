// halfgrad/halfgrad.h - the whole public API in one include, as <torch/torch.h> is for libtorch:
// tensors and devices (core), autograd, ops, nn modules and checkpoints, optimizers, mixed precision
// (autocast, GradScaler, opt levels and the instruments) and NIfTI / MSD input.
//
// An outside project uses the installed package (`cmake --install build --prefix P`):
//   find_package(halfgrad CONFIG REQUIRED)            # CMAKE_PREFIX_PATH=P
//   target_link_libraries(app PRIVATE halfgrad::halfgrad)
//   #include <halfgrad/halfgrad.h>
// examples/external/ is such a project. In the tree the same include works (the source root is on
// the include path).
#pragma once
#include "autocast/autocast.h"
#include "amp/fp16_inspect.h"
#include "amp/grad_scaler.h"
#include "amp/grad_stats.h"
#include "amp/opt_level.h"
#include "amp/precision_plan.h"
#include "amp/precision_report.h"
#include "autograd/anomaly.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dist/dist.h"
#include "io/msd.h"
#include "io/nifti.h"
#include "io/preprocess.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/optim.h"
