// max_pool3d_cuda_test.cpp - max_pool3d on CUDA (ops/pool/max_pool3d_cuda.cu) against the CPU op in
// float64 on the same values: y, and dx through backward(), for float32 / float16, NCDHW / NDHWC,
// non-overlapping, overlapping and gapped windows, and inputs full of ties (first maximum wins).
#include <string>
#include <vector>

#include "ops/pool/max_pool3d.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"

namespace halfgrad {
namespace {

using testing::check_close;
using testing::check_error;
using testing::rtol_for;
using testing::to_cuda;

// N(0, 1) values, or with `ties` small integers 0..3 (most windows then hold equal maxima).
Tensor pool_input(const Shape& s, uint64_t seed, Dtype dt, bool ties) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& e : v) e = ties ? static_cast<float>(g.randint(4)) : static_cast<float>(g.normal());
  return Tensor::from_vector(v, s, dt);
}

void check_pool(const Shape& s, int64_t k, int64_t st, Dtype dt, MemoryFormat f, bool ties, uint64_t seed) {
  INFO("max_pool3d " << std::string(dtype_name(dt)) << std::string(f == MemoryFormat::ChannelsLast3d ? " NDHWC " : " NCDHW ") << shape_str(s)
                     << " kernel " << k << " stride " << st << (ties ? " ties" : ""));
  const Tensor x = pool_input(s, seed, dt, ties);
  Tensor xc = to_cuda(x, f).set_requires_grad(true);
  Tensor yc = ops::max_pool3d(xc, k, st);
  Tensor x64 = x.cast_copy(kFloat64).set_requires_grad(true);
  Tensor y64 = ops::max_pool3d(x64, k, st);
  const Tensor dy = pool_input(y64.shape(), seed + 1, dt, false);
  yc.backward(to_cuda(dy, f));
  y64.backward(dy.cast_copy(kFloat64));
  CHECK(yc.dtype() == dt);
  CHECK(yc.memory_format() == f);
  check_close(yc, y64, 0.0, 0.0, "y");  // a maximum is one of the inputs: exact
  REQUIRE(xc.grad().defined());
  CHECK(xc.grad().memory_format() == f);
  // dx: one dy, or an FP32 sum of a few for overlapping windows, rounded once
  check_close(xc.grad(), x64.grad(), rtol_for(dt), dt == kFloat16 ? 1e-3 : 1e-5, "dx");
}

struct Geometry {
  Shape shape;
  int64_t kernel, stride;
};

}  // namespace

CUDA_TEST_CASE("max_pool3d cuda f32/f16 NCDHW/NDHWC: forward and backward vs CPU f64, any kernel / stride") {
  const std::vector<Geometry> geos = {
      {{2, 3, 5, 7, 6}, 2, 2},   {{2, 3, 5, 7, 6}, 3, 2},  // odd sizes; overlapping windows
      {{3, 17, 4, 5, 3}, 2, 1},  {{2, 3, 5, 7, 6}, 2, 3},  // stride 1; gaps no window covers
      {{2, 8, 6, 6, 6}, 3, 3},   {{2, 4, 3, 3, 3}, 1, 1},  // vector path with k != 2; the identity
      {{2, 16, 16, 16, 16}, 2, 2},
  };
  uint64_t seed = 500;
  for (const Geometry& g : geos)
    for (Dtype dt : {kFloat32, kFloat16})
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d})
        check_pool(g.shape, g.kernel, g.stride, dt, f, /*ties=*/false, seed += 10);
}

CUDA_TEST_CASE("max_pool3d cuda ties: the first maximum of each window, as the CPU op") {
  uint64_t seed = 600;
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      check_pool({2, 8, 6, 8, 4}, 2, 2, dt, f, /*ties=*/true, seed += 10);
      check_pool({2, 3, 5, 7, 6}, 3, 1, dt, f, /*ties=*/true, seed += 10);
    }
}

CUDA_TEST_CASE("max_pool3d cuda errors: float64, window larger than the input") {
  const Tensor x = to_cuda(pool_input({1, 2, 3, 3, 3}, 1, kFloat32, false));
  check_error([&] { ops::max_pool3d(x, 4, 1); }, {"max_pool3d", "larger than", "[1, 2, 3, 3, 3]"});
  check_error([&] { ops::max_pool3d(to_cuda(pool_input({1, 2, 3, 3, 3}, 1, kFloat64, false)), 2, 2); },
              {"max_pool3d", "float64"});
}

}  // namespace halfgrad
