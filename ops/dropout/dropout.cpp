// dropout.cpp - dropout and dropout3d on the CPU, and their dispatch to CUDA (math, mask and errors in
// dropout.h; the keep decision in dropout_math.h, shared with dropout_cuda.cu).
// One parallel loop over the logical (NCDHW) order in float (Float32; Float16 through an FP32 copy,
// rounded once) or double (Float64). Each element's decision depends only on (seed, its index), so
// the thread count changes nothing. The backward saves the 64-bit seed, not the mask.
#include "ops/dropout/dropout.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "autocast/autocast.h"
#include "core/nvtx.h"
#include "ops/common.h"
#include "ops/dropout/dropout_math.h"
#ifdef HALFGRAD_CUDA
#include "ops/dropout/dropout_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

// in * (keep ? scale : 0) in in's dtype and device (the forward on x, the backward on dy).
Tensor apply_mask(const char* op, const Tensor& in, const dropout::Mask& m) {
#ifdef HALFGRAD_CUDA
  if (in.is_cuda()) return cuda::dropout_apply(op, in, m);
#endif
  const int64_t n = in.numel();
  const int64_t S = in.dim() >= 2 ? n / std::max<int64_t>(in.shape()[0] * in.shape()[1], 1) : n;
  Tensor cin = to_compute(in);
  Tensor out = Tensor::empty(in.shape(), compute_dtype(in.dtype()));
  dispatch_compute(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pi = cin.data<T>();
    T* po = out.data<T>();
    // float for Float32 / Float16: the FP32 scale the CUDA kernel multiplies by; double for Float64.
    const T scale = std::is_same_v<T, double> ? static_cast<T>(m.scale_exact) : static_cast<T>(m.scale);
#pragma omp parallel for schedule(static) if (parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t key = static_cast<uint64_t>(m.per_channel ? i / S : i);
      po[i] = pi[i] * (dropout::keep(m.seed, key, m.drop_threshold) ? scale : T(0));
    }
  });
  return from_compute(out, in.dtype());
}

Tensor dropout_op(const char* op, amp::OpKind kind, const Tensor& x_in, double p, bool training, Generator& gen,
                  bool per_channel) {
  NvtxRange nvtx_range(op);
  check_floating_tensor(op, "input", x_in);
  HG_CHECK(p >= 0.0 && p <= 1.0, op << ": dropout probability has to be between 0 and 1, but got " << p);
  if (per_channel)
    HG_CHECK(x_in.dim() == 5, op << ": input must be 5-D (N, C, D, H, W), got shape " << shape_str(x_in.shape()));
  // Identity when nothing is dropped (eval mode, p = 0): the input itself, as F.dropout returns it,
  // without asking the precision table (an op that records nothing must not leave a request that the
  // precision report would charge to the next op).
  if (!training || p == 0.0) return x_in;
  const Tensor x = x_in.to(amp::autocast_dtype(kind, {x_in.dtype()}));
  dropout::Mask m;
  m.seed = gen.engine()();
  m.per_channel = per_channel;
  m.drop_threshold = p >= 1.0 ? dropout::kUnit : static_cast<uint64_t>(std::llround(p * static_cast<double>(dropout::kUnit)));
  m.scale = p >= 1.0 ? 0.f : static_cast<float>(1.0 / (1.0 - p));
  m.scale_exact = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Tensor y = apply_mask(op, x, m);
  return autograd::record(op, y, {x}, {}, [op, m](const Tensor& gy) -> std::vector<Tensor> {
    return {apply_mask(op, gy, m)};
  });
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  return dropout_op("dropout", amp::OpKind::Dropout, x, p, training, gen, false);
}

Tensor dropout3d(const Tensor& x, double p, bool training, Generator& gen) {
  return dropout_op("dropout3d", amp::OpKind::Dropout3d, x, p, training, gen, true);
}

}  // namespace halfgrad::ops
