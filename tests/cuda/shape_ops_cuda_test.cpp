// shape_ops_cuda_test.cpp - permute / transpose / view (ops/shape/shape_cuda.cu) and sqrt / clamp
// (ops/elementwise/sqrt_clamp_cuda.cu) on CUDA against the CPU op on the same random values: outputs
// and gradients, float32 / float16, NCDHW and NDHWC inputs, and permute of int64 tensors.
#include <string>
#include <vector>

#include "ops/elementwise/sqrt_clamp.h"
#include "ops/shape/shape.h"
#include "tests/cuda/cpu_reference.h"

namespace halfgrad {

using namespace testing;

CUDA_TEST_CASE("permute / transpose / view cuda f32/f16 NCDHW/NDHWC vs CPU: exact values and gradients") {
  const Tolerance exact{0, 0};
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt);
      const Shape s = {2, 3, 4, 5, 6};
      compare_with_cpu("permute (0, -1, 1, 2, 3) " + what, {{s, Values::Normal, fmt}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::permute(x[0], {0, -1, 1, 2, 3}); }, exact, exact);
      compare_with_cpu("permute (4, 2, 0, 3, 1) " + what, {{s, Values::Normal, fmt}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::permute(x[0], {4, 2, 0, 3, 1}); }, exact, exact);
      compare_with_cpu("transpose (1, -1) " + what, {{s, Values::Normal, fmt}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::transpose(x[0], 1, -1); }, exact, exact);
      compare_with_cpu("view (6, -1) " + what, {{s, Values::Normal, fmt}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::view(x[0], {6, -1}); }, exact, exact);
    }
  Tensor l = Tensor::from_labels({0, 1, 2, 3, 4, 5}, {2, 3});
  CHECK(ops::transpose(to_cuda(l), 0, 1).to_double_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
}

CUDA_TEST_CASE("sqrt / clamp cuda f32/f16 NCDHW/NDHWC vs CPU") {
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt);
      const Shape s = {2, 8, 3, 5, 7};
      compare_with_cpu("sqrt " + what, {{s, Values::Positive, fmt}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::sqrt(x[0]); }, pointwise_tol(dt),
                       pointwise_tol(dt));
      compare_with_cpu("clamp (-0.5, 0.75) " + what, {{s, Values::Normal, fmt}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::clamp(x[0], -0.5, 0.75); }, Tolerance{0, 0},
                       Tolerance{0, 0});
      const Tensor y = compare_with_cpu("clamp (min 0) " + what, {{s, Values::Normal, fmt}}, dt,
                                        [](const std::vector<Tensor>& x) { return ops::clamp(x[0], 0.0, std::nullopt); },
                                        Tolerance{0, 0}, Tolerance{0, 0});
      CHECK(y.memory_format() == fmt);
    }
  // sqrt(-1) = NaN, sqrt(0)'s gradient inf, NaN through clamp, as on the CPU.
  Tensor x = to_cuda(Tensor::from_vector(std::vector<float>{-1, 0, 4}, {3})).set_requires_grad(true);
  Tensor y = ops::sqrt(x);
  y.backward(to_cuda(Tensor::ones({3})));
  const std::vector<float> v = y.to_float_vector(), d = x.grad().to_float_vector();
  CHECK(std::isnan(v[0]));
  CHECK(std::isinf(d[1]));
  CHECK(d[2] == 0.25f);
}

}  // namespace halfgrad
