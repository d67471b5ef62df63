// CUDA sum / mean / argmax against the CPU ops: every reduction pattern (all, per-channel statistics
// over (0,2,3,4), spatial (2,3,4), one inner or outer dim, keepdim), float32 and float16, NCDHW and
// NDHWC, forward and gradients through backward(); a larger sum that spans many splits.
#include "ops/reduce/reduce.h"
#include "tests/check_error.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
const MemoryFormat kFormats[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d};
const Dtype kDtypes[] = {kFloat32, kFloat16};
}  // namespace

CUDA_TEST_CASE("reduce cuda f32/f16 NCDHW/NDHWC sum/mean (2,3,5,7,6) and (1,17,3,4,5) over all, dims, keepdim") {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0, 2, 3, 4}, {2, 3, 4}, {1}, {4}, {0}, {3}, {1, 4}, {-1, -4}};
  for (Dtype dt : kDtypes)
    for (MemoryFormat fmt : kFormats)
      for (const Shape& s : {Shape{2, 3, 5, 7, 6}, Shape{1, 17, 3, 4, 5}})
        for (const auto& dims : dim_sets)
          for (bool keepdim : {false, true}) {
            if (dims.empty() && keepdim) continue;
            std::string ds;
            for (int64_t d : dims) ds += std::to_string(d) + " ";
            const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " " + shape_str(s) +
                                     " dims {" + ds + "}" + (keepdim ? " keepdim" : "");
            SUBCASE(what.c_str()) {
              const Tolerance t = sum_tol(dt);
              compare_with_cpu("sum " + what, {{s, Values::Normal, fmt}}, dt, [&](const std::vector<Tensor>& x) {
                return dims.empty() ? ops::sum(x[0]) : ops::sum(x[0], dims, keepdim);
              }, t, t);
              compare_with_cpu("mean " + what, {{s, Values::Normal, fmt}}, dt, [&](const std::vector<Tensor>& x) {
                return dims.empty() ? ops::mean(x[0]) : ops::mean(x[0], dims, keepdim);
              }, t, t);
            }
          }
}

CUDA_TEST_CASE("reduce cuda f32/f16 sum of (3,70001) over all, dim 1, dim 0 and 2-D/1-D shapes") {
  for (Dtype dt : kDtypes) {
    SUBCASE(dtype_name(dt)) {
      // Magnitudes: 1e5 N(0,1) terms sum to ~300; FP32 accumulation in a different order than the
      // CPU's double one stays well inside 1e-4 relative plus the absolute allowance.
      const Tolerance t{dt == kFloat16 ? 2e-3 : 1e-4, 1e-2};
      compare_with_cpu("sum all (3,70001)", {{{3, 70001}}}, dt, [](const std::vector<Tensor>& x) { return ops::sum(x[0]); }, t, t);
      compare_with_cpu("sum dim 1 (3,70001)", {{{3, 70001}}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::sum(x[0], {1}); }, t, t);
      compare_with_cpu("mean dim 0 (70001,3)", {{{70001, 3}}}, dt,
                       [](const std::vector<Tensor>& x) { return ops::mean(x[0], {0}); }, t, t);
      compare_with_cpu("sum (9)", {{{9}}}, dt, [](const std::vector<Tensor>& x) { return ops::sum(x[0], {0}, true); }, t, t);
    }
  }
}

CUDA_TEST_CASE("reduce cuda f32/f16 NCDHW/NDHWC argmax (2,3,5,7,6) every dim, with ties") {
  const Shape s = {2, 3, 5, 7, 6};
  for (Dtype dt : kDtypes)
    for (MemoryFormat fmt : kFormats)
      for (int64_t dim : {0, 1, 2, 3, 4, -1}) {
        const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " dim " + std::to_string(dim);
        SUBCASE(what.c_str()) {
          // Rounded to 1/4 so that ties occur: the first maximum must win on both devices.
          std::vector<float> v = random_tensor(s, 3).to_float_vector();
          for (float& x : v) x = std::round(x * 4) / 4;
          const Tensor x = Tensor::from_vector(v, s, dt);
          const Tensor want = ops::argmax(x, dim);
          const Tensor got = ops::argmax(to_cuda(x, fmt), dim);
          REQUIRE(got.is_cuda());
          REQUIRE(got.dtype() == kInt64);
          CHECK(got.shape() == want.shape());
          CHECK(got.to_double_vector() == want.to_double_vector());
        }
      }
}

CUDA_TEST_CASE("reduce cuda f32/f16 NDHWC mean(x).backward() without a seed: gradient 1/numel on cuda, x's format") {
  for (Dtype dt : kDtypes) {
    SUBCASE(dtype_name(dt)) {
      Tensor x = to_cuda(random_tensor({2, 3, 5, 7, 6}, 4, dt), MemoryFormat::ChannelsLast3d);
      x.set_requires_grad(true);
      ops::mean(x).backward();
      REQUIRE(x.grad().is_cuda());
      check_close(x.grad(), Tensor::full(x.shape(), 1.0 / 1260, dt), rtol_for(dt), 0, "mean grad");
    }
  }
}

CUDA_TEST_CASE("reduce cuda errors: float64 on cuda, bad dims") {
  const Tensor d = to_cuda(random_tensor({2, 3}, 1, kFloat64));
  check_error([&] { ops::sum(d); }, {"sum", "float64"});
  const Tensor x = to_cuda(random_tensor({2, 3}, 1));
  check_error([&] { ops::sum(x, {2}); }, {"sum", "dim 2"});
  check_error([&] { ops::argmax(x, 5); }, {"argmax", "dim 5"});
}
