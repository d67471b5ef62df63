// linear_cuda_test.cpp - nn::Linear and nn::Flatten on CUDA: a (*, in) input with leading dims and a
// channels-last 5-D input give the CPU's values and gradients; under autocast Linear runs in FP16 (the
// FP16 list) with FP32 weight gradients; flatten of a channels-last input keeps the logical order.
// (ops::linear itself: matmul_cuda_test.cpp.)
#include "autocast/autocast.h"
#include "nn/linear.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

CUDA_TEST_CASE("nn::Linear cuda f32/f16 (2, 3, 7, 33) -> (2, 3, 7, 5) and Flatten of NDHWC (2, 3, 4, 5, 6) vs CPU") {
  for (Dtype dt : {kFloat32, kFloat16}) {
    SUBCASE(dtype_name(dt)) {
      const Tolerance t = dt == kFloat16 ? Tolerance{2e-3, 1e-2} : Tolerance{1e-5, 1e-4};
      compare_with_cpu("linear (*, in)", {{{2, 3, 7, 33}}, {{5, 33}}, {{5}}}, dt,
                       [](const std::vector<Tensor>& x) {
                         return ops::reshape(ops::linear(ops::reshape(x[0], {42, 33}), x[1], x[2]), {2, 3, 7, 5});
                       },
                       t, t);
      nn::Linear lin(nn::LinearOptions(360, 4));  // flatten of (2, 3, 4, 5, 6): 3 * 4 * 5 * 6 = 360
      if (dt == kFloat16) lin.to(kFloat16);
      nn::Linear lin_gpu(nn::LinearOptions(360, 4));
      lin_gpu.weight.copy_from(lin.weight);
      lin_gpu.bias.copy_from(lin.bias);
      if (dt == kFloat16) lin_gpu.to(kFloat16);
      lin_gpu.to(Device::CUDA);
      nn::Flatten flat;
      const Tensor x = random_tensor({2, 3, 4, 5, 6}, 11, dt);
      const Tensor y_cpu = lin(flat(x));
      const Tensor y_gpu = lin_gpu(flat(to_cuda(x, MemoryFormat::ChannelsLast3d)));
      CHECK(y_gpu.shape() == Shape{2, 4});
      check_close(y_gpu, y_cpu, t.rtol, t.atol, "flatten + linear of NDHWC");
    }
  }
}

CUDA_TEST_CASE("nn::Linear cuda under autocast: FP16 output, FP32 weight gradients") {
  nn::Linear lin(nn::LinearOptions(16, 8));
  lin.to(Device::CUDA);
  const Tensor x = to_cuda(random_tensor({4, 5, 16}, 3));
  amp::AutocastGuard on;
  Tensor y = lin(x);
#ifndef HALFGRAD_FORCE_FP32
  CHECK(y.dtype() == kFloat16);
#endif
  CHECK(y.shape() == Shape{4, 5, 8});
  ops::sum(y).backward();
  CHECK(lin.weight.grad().dtype() == kFloat32);
  CHECK(lin.bias.grad().is_cuda());
}

CUDA_TEST_CASE("flatten cuda f32/f16 of an NDHWC (2, 3, 4, 5, 6) input keeps PyTorch's logical order; dx too") {
  for (Dtype dt : {kFloat32, kFloat16}) {
    const Tensor x = random_tensor({2, 3, 4, 5, 6}, 21, dt);
    for (const auto& [s, e] : {std::pair<int64_t, int64_t>{1, -1}, {0, 2}, {2, 4}, {-2, -1}}) {
      CAPTURE(s);
      CAPTURE(e);
      Tensor xg = to_cuda(x, MemoryFormat::ChannelsLast3d).set_requires_grad(true);
      Tensor y = ops::flatten(xg, s, e);
      const Tensor y_cpu = ops::flatten(x, s, e);
      CHECK(y.shape() == y_cpu.shape());
      CHECK(y.to_float_vector() == y_cpu.to_float_vector());
      const Tensor dy = random_tensor(y.shape(), 22, dt);
      y.backward(to_cuda(dy));
      CHECK(xg.grad().shape() == x.shape());
      CHECK(ops::flatten(xg.grad().contiguous(), s, e).to_float_vector() == dy.to_float_vector());
    }
  }
}
