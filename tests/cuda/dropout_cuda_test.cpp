// dropout_cuda_test.cpp - dropout and dropout3d on CUDA (ops/dropout/dropout_cuda.cu) give the CPU's
// mask bit for bit from the same seed (the counter-based hash of dropout_math.h): float32 and
// float16, NCDHW and NDHWC, forward and backward.
#include <string>

#include "ops/dropout/dropout.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
const char* format_name(MemoryFormat f) { return f == MemoryFormat::ChannelsLast3d ? "NDHWC" : "NCDHW"; }
}  // namespace

CUDA_TEST_CASE("dropout/dropout3d cuda f32/f16 NCDHW/NDHWC (2,5,6,7,9): the CPU's mask and values, bit for bit") {
  for (const bool channel : {false, true})
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
        const std::string what = std::string(channel ? "dropout3d " : "dropout ") + dtype_name(dt) + " " + format_name(fmt);
        SUBCASE(what.c_str()) {
          const Shape s{2, 5, 6, 7, 9};
          const Tensor x = random_tensor(s, 42, dt), dy = random_tensor(s, 43, dt);
          Tensor xc = x.clone().set_requires_grad(true), xg = to_cuda(x, fmt).set_requires_grad(true);
          Generator g1(2024), g2(2024);
          Tensor yc = channel ? ops::dropout3d(xc, 0.3, true, g1) : ops::dropout(xc, 0.3, true, g1);
          Tensor yg = channel ? ops::dropout3d(xg, 0.3, true, g2) : ops::dropout(xg, 0.3, true, g2);
          CHECK(yg.is_cuda());
          CHECK(yg.memory_format() == fmt);
          CHECK(yg.dtype() == dt);
          check_close(yg, yc, 0.0, 0.0, what + " y");  // exact: one FP32 multiply, one rounding
          yc.backward(dy);
          yg.backward(to_cuda(dy, fmt));
          check_close(xg.grad(), xc.grad(), 0.0, 0.0, what + " dx");
        }
      }
}

CUDA_TEST_CASE("dropout cuda float32 1-D (1000003) matches the CPU; p = 1 gives zeros") {
  const Tensor x = random_tensor({1000003}, 7);
  Generator g1(9), g2(9);
  check_close(ops::dropout(to_cuda(x), 0.6, true, g2), ops::dropout(x, 0.6, true, g1), 0.0, 0.0, "y");
  Generator g3(1);
  const std::vector<float> z = ops::dropout(to_cuda(x), 1.0, true, g3).to_float_vector();
  bool all_zero = true;
  for (float v : z) all_zero = all_zero && v == 0.f;
  CHECK(all_zero);
}
