// CUDA sigmoid / tanh / silu / gelu (exact and tanh) against the CPU ops: float32 and float16, NCDHW
// and NDHWC, odd sizes (a tail shorter than one 16-byte pack), forward and gradients; non-finite
// inputs give what the CPU gives.
#include <cmath>
#include <functional>
#include <limits>

#include "ops/activation/smooth.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

CUDA_TEST_CASE("smooth activation cuda f32/f16 NCDHW/NDHWC sigmoid/tanh/silu/gelu (2,3,5,7,6), (1,1,1,1,13)") {
  const std::pair<const char*, std::function<Tensor(const Tensor&)>> ops_[] = {
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }},
      {"silu", [](const Tensor& x) { return ops::silu(x); }},
      {"gelu", [](const Tensor& x) { return ops::gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return ops::gelu(x, ops::GeluApproximate::Tanh); }},
  };
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d})
      for (const Shape& s : {Shape{2, 3, 5, 7, 6}, Shape{1, 1, 1, 1, 13}}) {
        const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " " + shape_str(s);
        SUBCASE(what.c_str()) {
          // The device's expf/erff/tanhf are within 2 ulp of the host's: a little more than one
          // rounding in FP32.
          const Tolerance t = dt == kFloat16 ? pointwise_tol(dt) : Tolerance{1e-5, 1e-5};
          for (const auto& [name, f] : ops_) {
            Tensor y = compare_with_cpu(std::string(name) + " " + what, {{s, Values::Normal, fmt}}, dt,
                                        [&](const std::vector<Tensor>& x) { return f(x[0]); }, t, t);
            CHECK(y.memory_format() == fmt);
          }
        }
      }
}

CUDA_TEST_CASE("smooth activation cuda float32 NaN / inf inputs give the CPU's values and gradients") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {nan, inf, -inf, 0.f, 1e30f, -30.f, 30.f};
  for (int k = 0; k < 4; ++k) {
    auto f = [k](const Tensor& x) {
      return k == 0 ? ops::sigmoid(x) : k == 1 ? ops::tanh(x) : k == 2 ? ops::silu(x) : ops::gelu(x);
    };
    Tensor xc = Tensor::from_vector(v, {7}).set_requires_grad(true);
    Tensor xg = to_cuda(Tensor::from_vector(v, {7})).set_requires_grad(true);
    Tensor yc = f(xc), yg = f(xg);
    yc.backward(Tensor::ones({7}));
    yg.backward(to_cuda(Tensor::ones({7})));
    const std::vector<float> a = yc.to_float_vector(), b = yg.to_float_vector();
    const std::vector<float> ga = xc.grad().to_float_vector(), gb = xg.grad().to_float_vector();
    for (size_t i = 0; i < v.size(); ++i) {
      CAPTURE(k);
      CAPTURE(i);
      CHECK(std::isnan(a[i]) == std::isnan(b[i]));
      if (!std::isnan(a[i]) && std::isinf(a[i])) CHECK(b[i] == a[i]);  // doctest's Approx(inf) is never equal
      else if (!std::isnan(a[i])) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-6));
      CHECK(std::isnan(ga[i]) == std::isnan(gb[i]));
      if (!std::isnan(ga[i]) && std::isinf(ga[i])) CHECK(gb[i] == ga[i]);
      else if (!std::isnan(ga[i])) CHECK(gb[i] == doctest::Approx(ga[i]).epsilon(1e-6));
    }
  }
}
