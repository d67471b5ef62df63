// CUDA softmax / log_softmax against the CPU ops: along every dim of (2,3,5,7,6) and (1,17,3,4,5)
// (the U-Net's dim 1 = classes), NCDHW and NDHWC, float32 and float16, long rows (a warp per row)
// and short ones (a thread per row), forward and gradients through backward().
#include "autocast/autocast.h"
#include "ops/softmax/softmax.h"
#include "tests/check_error.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

CUDA_TEST_CASE("softmax cuda f32/f16 NCDHW/NDHWC softmax/log_softmax along each dim of (2,3,5,7,6), (1,17,3,4,5)") {
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d})
      for (const Shape& s : {Shape{2, 3, 5, 7, 6}, Shape{1, 17, 3, 4, 5}})
        for (int64_t dim : {1, 0, 2, 4, -1}) {
          const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " " + shape_str(s) + " dim " +
                                   std::to_string(dim);
          SUBCASE(what.c_str()) {
            const Tolerance t = pointwise_tol(dt);
            Tensor y = compare_with_cpu("softmax " + what, {{s, Values::Normal, fmt}}, dt,
                                        [&](const std::vector<Tensor>& x) { return ops::softmax(x[0], dim); }, t, t);
            CHECK(y.memory_format() == fmt);
            y = compare_with_cpu("log_softmax " + what, {{s, Values::Normal, fmt}}, dt,
                                 [&](const std::vector<Tensor>& x) { return ops::log_softmax(x[0], dim); }, t, t);
            CHECK(y.memory_format() == fmt);
          }
        }
}

CUDA_TEST_CASE("softmax cuda f32/f16 rows: (5,1000) and (3,65) last dim (warp per row), (4,7) (thread per row)") {
  for (Dtype dt : {kFloat32, kFloat16})
    for (const Shape& s : {Shape{5, 1000}, Shape{3, 65}, Shape{4, 7}, Shape{33}}) {
      const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s);
      SUBCASE(what.c_str()) {
        const Tolerance t = pointwise_tol(dt);
        compare_with_cpu("softmax " + what, {{s}}, dt, [](const std::vector<Tensor>& x) { return ops::softmax(x[0], -1); }, t, t);
        compare_with_cpu("log_softmax " + what, {{s}}, dt,
                         [](const std::vector<Tensor>& x) { return ops::log_softmax(x[0], -1); }, t, t);
      }
    }
}

CUDA_TEST_CASE("softmax cuda f16 NDHWC under autocast: float32 output (FP32 list), gradient back in float16") {
  amp::AutocastGuard guard;
  const Tolerance t = pointwise_tol(kFloat16);
  const Tensor y = compare_with_cpu("autocast softmax", {{{2, 3, 5, 7, 6}, Values::Normal, MemoryFormat::ChannelsLast3d}},
                                    kFloat16, [](const std::vector<Tensor>& x) { return ops::softmax(x[0], 1); }, t, t);
  CHECK(y.dtype() == amp::autocast_dtype(amp::OpKind::Softmax, {kFloat16}));
}

CUDA_TEST_CASE("softmax cuda errors: float64 on cuda, dim out of range") {
  const Tensor x = to_cuda(random_tensor({2, 3}, 1));
  check_error([&] { ops::softmax(to_cuda(random_tensor({2, 3}, 1, kFloat64)), 1); }, {"softmax", "float64"});
  check_error([&] { ops::log_softmax(x, 2); }, {"log_softmax", "dim 2"});
}
