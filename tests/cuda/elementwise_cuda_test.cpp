// CUDA elementwise ops against the CPU ops: add/sub/mul/div over the broadcast paths (same shape,
// same shape in mixed formats, 0-d and one-element scalars, per-channel (1,C,1,1,1) and (C,1,1,1),
// general broadcasts), the unary ops, sum_to_shape; float32 and float16, NCDHW and NDHWC, forward and
// gradients through backward(); errors for mixed devices and float64 on CUDA.
#include "autocast/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "tests/check_error.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

const MemoryFormat kFormats[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d};
const Dtype kDtypes[] = {kFloat32, kFloat16};

Tensor apply(const std::string& op, const Tensor& a, const Tensor& b) {
  if (op == "add") return ops::add(a, b);
  if (op == "sub") return ops::sub(a, b);
  if (op == "mul") return ops::mul(a, b);
  return ops::div(a, b);
}

}  // namespace

CUDA_TEST_CASE("elementwise cuda f32/f16 NCDHW/NDHWC add/sub/mul/div (2,3,5,7,6) with every broadcast path") {
  const Shape big = {2, 3, 5, 7, 6};
  // Second-operand shapes: same, per-channel 5-D and 4-D, 0-d, one element, general broadcasts.
  const std::vector<Shape> others = {big, {1, 3, 1, 1, 1}, {3, 1, 1, 1}, {}, {1}, {2, 1, 5, 1, 6}, {6}, {1, 1, 7, 1}};
  for (Dtype dt : kDtypes)
    for (MemoryFormat fmt : kFormats)
      for (const std::string op : {"add", "sub", "mul", "div"})
        for (const Shape& s : others)
          for (bool swap : {false, true}) {
            const std::string what = op + " " + dtype_name(dt) + " " + format_name(fmt) + " " + shape_str(big) +
                                     (swap ? " <- " : " , ") + shape_str(s);
            SUBCASE(what.c_str()) {
              const Values bv = op == "div" && !swap ? Values::Positive : Values::Normal;
              const Values av = op == "div" && swap ? Values::Positive : Values::Normal;
              std::vector<Input> in = {{big, av, fmt}, {s, bv, fmt}};
              if (swap) std::swap(in[0], in[1]);
              const Tensor y = compare_with_cpu(what, in, dt, [&](const std::vector<Tensor>& x) { return apply(op, x[0], x[1]); },
                                                pointwise_tol(dt), sum_tol(dt));
              // The output keeps the format of the operand with the output's shape.
              CHECK(y.memory_format() == fmt);
            }
          }
}

CUDA_TEST_CASE("elementwise cuda f32/f16 add/mul of one shape in mixed formats, and 2-D broadcasts") {
  for (Dtype dt : kDtypes) {
    const std::string tag = dtype_name(dt);
    SUBCASE(("mixed formats " + tag).c_str()) {
      const Shape s = {1, 17, 3, 4, 5};
      const Tensor y = compare_with_cpu(
          "mul NDHWC x NCDHW", {{s, Values::Normal, MemoryFormat::ChannelsLast3d}, {s, Values::Normal, MemoryFormat::Contiguous}},
          dt, [](const std::vector<Tensor>& x) { return x[0] * x[1]; }, pointwise_tol(dt), sum_tol(dt));
      CHECK(y.is_channels_last());
      compare_with_cpu("add NCDHW + NDHWC", {{s, Values::Normal, MemoryFormat::Contiguous}, {s, Values::Normal, MemoryFormat::ChannelsLast3d}},
                       dt, [](const std::vector<Tensor>& x) { return x[0] + x[1]; }, pointwise_tol(dt), sum_tol(dt));
    }
    SUBCASE(("2-D " + tag).c_str()) {
      compare_with_cpu("(7,9) + (9)", {{{7, 9}}, {{9}}}, dt, [](const std::vector<Tensor>& x) { return x[0] + x[1]; },
                       pointwise_tol(dt), sum_tol(dt));
      compare_with_cpu("(7,1) * (1,9)", {{{7, 1}}, {{1, 9}}}, dt, [](const std::vector<Tensor>& x) { return x[0] * x[1]; },
                       pointwise_tol(dt), sum_tol(dt));
      compare_with_cpu("(4097) - (4097) (pack tail)", {{{4097}}, {{4097}}}, dt,
                       [](const std::vector<Tensor>& x) { return x[0] - x[1]; }, pointwise_tol(dt), sum_tol(dt));
    }
  }
}

CUDA_TEST_CASE("elementwise cuda f32/f16 NCDHW/NDHWC affine/neg/exp/log/pow (1,17,3,4,5) and (7,9)") {
  for (Dtype dt : kDtypes)
    for (MemoryFormat fmt : kFormats)
      for (const Shape& s : {Shape{1, 17, 3, 4, 5}, Shape{7, 9}}) {
        if (s.size() != 5 && fmt != MemoryFormat::Contiguous) continue;
        const std::string tag = std::string(dtype_name(dt)) + " " + format_name(fmt) + " " + shape_str(s);
        SUBCASE(tag.c_str()) {
          const Tolerance t = pointwise_tol(dt);
          const Tensor y = compare_with_cpu("affine " + tag, {{s, Values::Normal, fmt}}, dt,
                                            [](const std::vector<Tensor>& x) { return x[0] * 1.5 + 0.25; }, t, t);
          CHECK(y.memory_format() == (s.size() == 5 ? fmt : MemoryFormat::Contiguous));
          compare_with_cpu("neg " + tag, {{s, Values::Normal, fmt}}, dt, [](const std::vector<Tensor>& x) { return -x[0]; }, t, t);
          compare_with_cpu("exp " + tag, {{s, Values::Normal, fmt}}, dt,
                           [](const std::vector<Tensor>& x) { return ops::exp(x[0]); }, t, t);
          compare_with_cpu("log " + tag, {{s, Values::Positive, fmt}}, dt,
                           [](const std::vector<Tensor>& x) { return ops::log(x[0]); }, t, t);
          compare_with_cpu("pow 2 " + tag, {{s, Values::Normal, fmt}}, dt,
                           [](const std::vector<Tensor>& x) { return ops::pow(x[0], 2.0); }, t, t);
          compare_with_cpu("pow -1.5 " + tag, {{s, Values::Positive, fmt}}, dt,
                           [](const std::vector<Tensor>& x) { return ops::pow(x[0], -1.5); }, t, t);
        }
      }
}

CUDA_TEST_CASE("elementwise cuda f16 exp/add under autocast: FP32 list gives float32 on cuda") {
  const Shape s = {2, 3, 5, 7, 6};
  for (MemoryFormat fmt : kFormats) {
    SUBCASE(format_name(fmt)) {
      amp::AutocastGuard guard;
      const Tensor y = compare_with_cpu("autocast exp", {{s, Values::Normal, fmt}}, kFloat16,
                                        [](const std::vector<Tensor>& x) { return ops::exp(x[0]); }, pointwise_tol(kFloat16),
                                        pointwise_tol(kFloat16));
      CHECK(y.dtype() == amp::autocast_dtype(amp::OpKind::Exp, {kFloat16}));
    }
  }
}

CUDA_TEST_CASE("elementwise cuda f32/f16 NCDHW/NDHWC sum_to_shape (2,3,5,7,6) -> bias, 0-d, last dim, general") {
  const Shape s = {2, 3, 5, 7, 6};
  for (Dtype dt : kDtypes)
    for (MemoryFormat fmt : kFormats)
      for (const Shape& target : {Shape{1, 3, 1, 1, 1}, Shape{3, 1, 1, 1}, Shape{}, Shape{6}, Shape{2, 1, 5, 1, 6}, s}) {
        const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " -> " + shape_str(target);
        SUBCASE(what.c_str()) {
          const Tensor g = random_tensor(s, 5, dt);
          const Tensor want = ops::sum_to_shape(g, target);
          const Tensor got = ops::sum_to_shape(to_cuda(g, fmt), target);
          REQUIRE(got.is_cuda());
          CHECK(got.dtype() == dt);
          check_close(got, want, sum_tol(dt).rtol, sum_tol(dt).atol, what);
        }
      }
}

CUDA_TEST_CASE("elementwise cuda errors: mixed devices name the op, float64 on cuda is refused") {
  const Tensor a = random_tensor({2, 3}, 1), b = random_tensor({2, 3}, 2);
  const Tensor ac = to_cuda(a);
  check_error([&] { ops::add(a, ac); }, {"add", "cuda", "cpu"});
  check_error([&] { ops::mul(ac, b); }, {"mul", "cuda", "cpu"});
  const Tensor d = to_cuda(a.cast_copy(kFloat64));
  check_error([&] { ops::add(d, d); }, {"add", "float64"});
  check_error([&] { ops::exp(d); }, {"exp", "float64"});
}
