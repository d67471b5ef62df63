// cpu_reference.h - the comparison the CUDA op tests of elementwise, reduce, shape, activation,
// softmax and matmul share: an op runs on fresh random CPU inputs and on CUDA copies of them (in a
// chosen memory format each), and the CUDA output and, after one backward with the same random dy,
// every input's gradient must match the CPU's within the dtype's tolerance.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test.h"

namespace halfgrad::testing {

/// What the random inputs look like: N(0, 1), or |N(0, 1)| + 0.5 (log, pow, division).
enum class Values { Normal, Positive };

struct Input {
  Shape shape;
  Values values = Values::Normal;
  MemoryFormat format = MemoryFormat::Contiguous;  // of the CUDA copy (5-D only; others stay contiguous)
  bool requires_grad = true;
};

struct Tolerance {
  double rtol, atol;
};
/// One rounding per output (elementwise, activations): the dtype's rtol, a small atol. (BF16: one
/// ulp is 2^-7 relative; the device's FP32 result may sit on the other side of a rounding boundary.)
inline Tolerance pointwise_tol(Dtype d) {
  return d == kBFloat16 ? Tolerance{1e-2, 4e-3} : d == kFloat16 ? Tolerance{2e-3, 1e-3} : Tolerance{1e-5, 1e-6};
}
/// Sums of up to a few hundred terms (reductions, broadcast gradients, GEMMs with K <= 100): the FP32
/// accumulation order differs from the CPU's, so values near 0 need an absolute allowance.
inline Tolerance sum_tol(Dtype d) {
  return d == kBFloat16 ? Tolerance{1e-2, 5e-2} : d == kFloat16 ? Tolerance{2e-3, 1e-2} : Tolerance{1e-5, 1e-4};
}

inline Tensor make_input(const Input& in, Dtype dt, uint64_t seed) {
  Tensor t = random_tensor(in.shape, seed, kFloat32);
  if (in.values == Values::Positive) {
    std::vector<float> v = t.to_float_vector();
    for (float& x : v) x = std::fabs(x) + 0.5f;
    t = Tensor::from_vector(v, in.shape, kFloat32);
  }
  return t.cast_copy(dt);
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Runs `f` on the CPU and on CUDA and compares outputs and gradients (`what` names the case in
/// failures). Returns the CUDA output for further checks (its memory format, say).
inline Tensor compare_with_cpu(const std::string& what, const std::vector<Input>& inputs, Dtype dt, const OpFn& f,
                               Tolerance fwd, Tolerance grad, uint64_t seed = 1) {
  std::vector<Tensor> cpu, gpu;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor t = make_input(inputs[i], dt, seed * 101 + i);
    Tensor c = t.clone(), g = to_cuda(t, inputs[i].format);
    if (inputs[i].requires_grad) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu.push_back(c);
    gpu.push_back(g);
  }
  const Tensor y_cpu = f(cpu);
  const Tensor y_gpu = f(gpu);
  REQUIRE_MESSAGE(y_gpu.is_cuda(), what << ": output is not on cuda");
  CHECK_MESSAGE(y_gpu.dtype() == y_cpu.dtype(), what << ": dtype " << dtype_name(y_gpu.dtype()) << " vs "
                                                     << dtype_name(y_cpu.dtype()));
  check_close(y_gpu, y_cpu, fwd.rtol, fwd.atol, what + " forward");
  if (!y_cpu.requires_grad()) return y_gpu;
  const MemoryFormat dy_format = inputs.empty() ? MemoryFormat::Contiguous : inputs[0].format;
  const Tensor dy = random_tensor(y_cpu.shape(), seed * 977 + 7, y_cpu.dtype());
  y_cpu.backward(dy);
  y_gpu.backward(to_cuda(dy, dy_format));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad) continue;
    REQUIRE_MESSAGE(gpu[i].grad().defined(), what << ": no gradient for input " << i);
    CHECK_MESSAGE(gpu[i].grad().is_cuda(), what << ": gradient of input " << i << " is not on cuda");
    check_close(gpu[i].grad(), cpu[i].grad(), grad.rtol, grad.atol, what + " grad of input " + std::to_string(i));
  }
  return y_gpu;
}

inline const char* format_name(MemoryFormat f) { return f == MemoryFormat::ChannelsLast3d ? "NDHWC" : "NCDHW"; }

}  // namespace halfgrad::testing
