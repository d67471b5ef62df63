// CUDA relu / leaky_relu / cat against the CPU ops: float32 and float16, NCDHW and NDHWC, odd sizes
// (a tail shorter than one 16-byte pack), forward and gradients through backward(); cat along every
// dim, parts in mixed formats and dtypes (promotion), and the int64 copy.
#include "ops/activation/activation.h"
#include "ops/elementwise/elementwise.h"
#include "tests/check_error.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
const MemoryFormat kFormats[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d};
const Dtype kDtypes[] = {kFloat32, kFloat16};
}  // namespace

CUDA_TEST_CASE("activation cuda f32/f16 NCDHW/NDHWC relu/leaky_relu (2,3,5,7,6), (1,17,3,4,5), (1,1,1,1,13)") {
  for (Dtype dt : kDtypes)
    for (MemoryFormat fmt : kFormats)
      for (const Shape& s : {Shape{2, 3, 5, 7, 6}, Shape{1, 17, 3, 4, 5}, Shape{1, 1, 1, 1, 13}}) {
        const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " " + shape_str(s);
        SUBCASE(what.c_str()) {
          const Tolerance t = pointwise_tol(dt);
          Tensor y = compare_with_cpu("relu " + what, {{s, Values::Normal, fmt}}, dt,
                                      [](const std::vector<Tensor>& x) { return ops::relu(x[0]); }, t, t);
          CHECK(y.memory_format() == fmt);
          y = compare_with_cpu("leaky_relu " + what, {{s, Values::Normal, fmt}}, dt,
                               [](const std::vector<Tensor>& x) { return ops::leaky_relu(x[0], 0.01); }, t, t);
          CHECK(y.memory_format() == fmt);
          // A gradient arriving in the other format than the saved tensor.
          compare_with_cpu("relu then format change " + what, {{s, Values::Normal, fmt}}, dt, [&](const std::vector<Tensor>& x) {
            return ops::relu(x[0]).to(fmt == MemoryFormat::Contiguous ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous);
          }, t, t);
        }
      }
}

CUDA_TEST_CASE("activation cuda relu of an infinite gradient is 0 where x <= 0 (as the CPU op)") {
  const Tensor x = to_cuda(Tensor::from_vector(std::vector<float>{-1.f, 2.f, -3.f}, {3}));
  Tensor xl = x.detach();
  xl.set_requires_grad(true);
  ops::relu(xl).backward(to_cuda(Tensor::from_vector(std::vector<float>{INFINITY, INFINITY, 1.f}, {3})));
  const std::vector<float> g = xl.grad().to_float_vector();
  CHECK(g[0] == 0.f);
  CHECK(std::isinf(g[1]));
  CHECK(g[2] == 0.f);
}

CUDA_TEST_CASE("activation cuda f32/f16 NCDHW/NDHWC cat along each dim of (2,3,5,7,6)-like parts") {
  for (Dtype dt : kDtypes)
    for (MemoryFormat fmt : kFormats)
      for (int64_t dim : {0, 1, 2, 3, 4, -4}) {
        const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " dim " + std::to_string(dim);
        SUBCASE(what.c_str()) {
          const int64_t d = dim < 0 ? dim + 5 : dim;
          Shape a = {2, 3, 5, 7, 6}, b = a, c = a;
          b[d] = 1;
          c[d] = 4;
          const Tolerance t = pointwise_tol(dt);
          const Tensor y = compare_with_cpu("cat " + what, {{a, Values::Normal, fmt}, {b, Values::Normal, fmt}, {c, Values::Normal, fmt}},
                                            dt, [&](const std::vector<Tensor>& x) { return ops::cat(x, dim); }, t, t);
          CHECK(y.memory_format() == fmt);
          // Only some parts need a gradient; the second in the other format.
          const MemoryFormat other = fmt == MemoryFormat::Contiguous ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous;
          compare_with_cpu("cat mixed " + what, {{a, Values::Normal, fmt, false}, {b, Values::Normal, other}}, dt,
                           [&](const std::vector<Tensor>& x) { return ops::cat(x, dim); }, t, t);
        }
      }
}

CUDA_TEST_CASE("activation cuda cat: U-Net channel concat f16 NDHWC 16+16 channels, promotion f16+f32, 2-D, int64") {
  SUBCASE("U-Net skip concat") {
    const Shape s = {1, 16, 3, 4, 5};
    compare_with_cpu("cat 16+16", {{s, Values::Normal, MemoryFormat::ChannelsLast3d}, {s, Values::Normal, MemoryFormat::ChannelsLast3d}},
                     kFloat16, [](const std::vector<Tensor>& x) { return ops::cat(x, 1); }, pointwise_tol(kFloat16),
                     pointwise_tol(kFloat16));
  }
  SUBCASE("promotion") {
    const Tensor a = random_tensor({2, 3, 4}, 1, kFloat16), b = random_tensor({2, 5, 4}, 2, kFloat32);
    const Tensor want = ops::cat({a, b}, 1);
    const Tensor got = ops::cat({to_cuda(a), to_cuda(b)}, 1);
    CHECK(got.dtype() == want.dtype());
    check_close(got, want, 0, 0, "cat f16 + f32");
  }
  SUBCASE("2-D and int64") {
    compare_with_cpu("cat 2-D", {{{3, 7}}, {{3, 2}}}, kFloat32, [](const std::vector<Tensor>& x) { return ops::cat(x, 1); },
                     pointwise_tol(kFloat32), pointwise_tol(kFloat32));
    const Tensor l1 = Tensor::from_labels({1, 2, 3, 4, 5, 6}, {2, 3}), l2 = Tensor::from_labels({7, 8}, {2, 1});
    const Tensor got = ops::cat({l1.copy_to(Device::CUDA), l2.copy_to(Device::CUDA)}, 1);
    CHECK(got.to_double_vector() == ops::cat({l1, l2}, 1).to_double_vector());
  }
}

CUDA_TEST_CASE("activation cuda errors: cat of mixed devices names the op; float64 relu on cuda") {
  const Tensor a = random_tensor({2, 3}, 1);
  check_error([&] { ops::cat({a, to_cuda(a)}, 0); }, {"cat", "cuda", "cpu"});
  check_error([&] { ops::relu(to_cuda(a.cast_copy(kFloat64))); }, {"relu", "float64"});
}
