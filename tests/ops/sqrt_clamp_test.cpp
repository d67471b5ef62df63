// sqrt and clamp (ops/elementwise/sqrt_clamp.h): PyTorch golden values in float32 and float64
// (tests/golden/shape_ops.json, from `/usr/bin/python3 tools/golden/make_golden.py shape_ops`), float64
// gradchecks, PyTorch's non-finite behaviour (sqrt(-1) = NaN, sqrt(0)'s gradient inf, NaN through
// clamp), float16, the autocast rows, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/elementwise/sqrt_clamp.h"
#include "tests/check_error.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {
Tensor leaf(Tensor t) { return t.set_requires_grad(true); }
std::optional<double> bound(const nlohmann::json& v) {
  return v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
}
}  // namespace

TEST_CASE("ops: sqrt / clamp float32 and float64 match PyTorch (shape_ops.json): y, dx") {
  const GoldenFile file = load_golden("shape_ops.json");
  int checked = 0;
  for (const std::string& name : file.case_names()) {
    const GoldenCase c = file.at(name);
    if (c.op() != "sqrt" && c.op() != "clamp") continue;
    ++checked;
    SUBCASE(name.c_str()) {
      const Dtype dt = golden_dtype(c.params().at("dtype").get<std::string>());
      Tensor x = leaf(c.input("x", dt));
      Tensor y = c.op() == "sqrt" ? ops::sqrt(x) : ops::clamp(x, bound(c.params().at("min")), bound(c.params().at("max")));
      CHECK(y.dtype() == dt);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
      check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
    }
  }
  CHECK(checked == 7);  // sqrt, clamp both / min / max / inverted, and the float64 twins of two
}

TEST_CASE("ops: sqrt / clamp float64 gradcheck (3, 4, 5), away from clamp's kinks") {
  Generator g(9);
  Tensor x = leaf(Tensor::uniform({3, 4, 5}, 0.2, 3.0, g, kFloat64));
  auto r = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::sqrt(in[0]); }, {x});
  CHECK_MESSAGE(r.ok, r.report);
  // Values 0.2..3 against bounds 1.1 and 2.3: the finite differences (eps 1e-6) never cross a bound
  // unless a value lies within 1e-6 of one, which this seed's values do not.
  auto rc = autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::clamp(in[0], 1.1, 2.3); }, {x});
  CHECK_MESSAGE(rc.ok, rc.report);
}

TEST_CASE("ops: sqrt / clamp float32 non-finite values as PyTorch") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = leaf(Tensor::from_vector(std::vector<float>{-1, 0, 4, inf}, {4}));
  Tensor y = ops::sqrt(x);
  const std::vector<float> v = y.to_float_vector();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 0.0f);
  CHECK(v[2] == 2.0f);
  CHECK(v[3] == inf);
  y.backward(Tensor::ones({4}));
  const std::vector<float> d = x.grad().to_float_vector();
  CHECK(std::isnan(d[0]));
  CHECK(d[1] == inf);  // 1 / (2 * 0), as torch.sqrt's backward
  CHECK(d[2] == 0.25f);
  CHECK(d[3] == 0.0f);

  Tensor xc = leaf(Tensor::from_vector(std::vector<float>{nan, -inf, inf, 0.5f}, {4}));
  Tensor yc = ops::clamp(xc, -1.0, 1.0);
  const std::vector<float> vc = yc.to_float_vector();
  CHECK(std::isnan(vc[0]));
  CHECK(vc[1] == -1.0f);
  CHECK(vc[2] == 1.0f);
  CHECK(vc[3] == 0.5f);
  yc.backward(Tensor::ones({4}));
  CHECK(xc.grad().to_float_vector() == std::vector<float>{0, 0, 0, 1});  // NaN: gradient 0, as clamp_backward
}

TEST_CASE("ops: sqrt / clamp float16 in float16 out, equal to float32 rounded once; on no autocast list") {
  Generator g(10);
  const Tensor x32 = Tensor::uniform({2, 3, 4}, 0.0, 4.0, g).cast_copy(kFloat16).cast_copy(kFloat32);
  const Tensor x16 = x32.cast_copy(kFloat16);
  CHECK(ops::sqrt(x16).dtype() == kFloat16);
  check_close(ops::sqrt(x16), ops::sqrt(x32).cast_copy(kFloat16), 0, 0, "sqrt f16");
  check_close(ops::clamp(x16, 1.0, 3.0), ops::clamp(x32, 1.0, 3.0).cast_copy(kFloat16), 0, 0, "clamp f16");
  amp::AutocastGuard guard;
  CHECK(amp::default_policy(amp::OpKind::Sqrt) == amp::CastPolicy::None);
  CHECK(amp::default_policy(amp::OpKind::Clamp) == amp::CastPolicy::None);
  CHECK(ops::sqrt(x16).dtype() == kFloat16);
  CHECK(ops::clamp(x16, std::nullopt, 2.0).dtype() == kFloat16);
}

TEST_CASE("ops: clamp without bounds and sqrt of an integer tensor throw, naming the op") {
  check_error([] { ops::clamp(Tensor::zeros({2}), std::nullopt, std::nullopt); }, {"clamp", "min or max"});
  check_error([] { ops::sqrt(Tensor::from_labels({1, 2}, {2})); }, {"sqrt", "input"});
}
