// dropout_cuda.h - the CUDA launcher of ops/dropout/dropout.h (kernel in dropout_cuda.cu).
#pragma once
#include "core/tensor.h"
#include "ops/dropout/dropout_math.h"

namespace halfgrad::cuda {

/// out = in * (keep(key) ? scale : 0) over a float32 / float16 / bfloat16 CUDA tensor in either memory format; the
/// key is the element's logical (NCDHW) index, or n*C + c with mask.per_channel (a 5-D input). out
/// has in's shape, dtype and format. Throws halfgrad::Error naming `op` for other dtypes or devices.
Tensor dropout_apply(const char* op, const Tensor& in, const dropout::Mask& mask);

}  // namespace halfgrad::cuda
