// add/sub/mul/div (broadcasting bias and scalars) and sum/mean against PyTorch's values
// (tests/golden/elementwise.json and reduce.json, from `/usr/bin/python3 tools/golden/make_golden.py`),
// float32 and float64; float16 operands against the float32 result.
#include <doctest/doctest.h>

#include "autocast/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

static Dtype case_dtype(const GoldenCase& c) {
  return c.param<std::string>("dtype") == "float64" ? kFloat64 : kFloat32;
}

static Tensor binary(const std::string& op, const Tensor& a, const Tensor& b) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  return a / b;
}

TEST_CASE("ops: add/sub/mul/div float32/float64 same shape, bias (1,3,1,1,1), 0-d scalar, outer match PyTorch") {
  const GoldenFile f = load_golden("elementwise.json");
  for (const std::string& name : f.case_names()) {
    SUBCASE(name.c_str()) {
      const GoldenCase c = f.at(name);
      const Dtype dt = case_dtype(c);
      Tensor a = c.input("a", dt).set_requires_grad(true);
      Tensor b = c.input("b", dt).set_requires_grad(true);
      Tensor y = binary(c.op(), a, b);
      CHECK(y.dtype() == dt);
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
      check_close(a.grad(), c.grad("a"), tolerance_for(dt), c.where() + " da");
      check_close(b.grad(), c.grad("b"), tolerance_for(dt), c.where() + " db");
    }
  }
}

TEST_CASE("ops: sum/mean float32/float64 over all, dims (0,2,3,4), dim 1, keepdim match PyTorch") {
  const GoldenFile f = load_golden("reduce.json");
  for (const std::string& name : f.case_names()) {
    SUBCASE(name.c_str()) {
      const GoldenCase c = f.at(name);
      const Dtype dt = case_dtype(c);
      Tensor x = c.input("x", dt).set_requires_grad(true);
      const bool all = c.param<bool>("all");
      const bool is_sum = c.op() == "sum";
      Tensor y;
      if (all) {
        y = is_sum ? ops::sum(x) : ops::mean(x);
      } else {
        const auto dims = c.param<std::vector<int64_t>>("dims");
        const bool keep = c.param<bool>("keepdim");
        y = is_sum ? ops::sum(x, dims, keep) : ops::mean(x, dims, keep);
      }
      CHECK(y.shape() == c.output("y").shape());
      y.backward(c.input("gy", dt));
      check_close(y, c.output("y"), tolerance_for(dt), c.where() + " y");
      check_close(x.grad(), c.grad("x"), tolerance_for(dt), c.where() + " dx");
    }
  }
}

TEST_CASE("ops: mul float16 (2,3,3,4,5) x bias: output float16, grads in each operand's dtype, close to float32") {
  const GoldenCase c = load_golden("elementwise.json").at("mul_bias5d");
  Tensor a = c.input("a", kFloat16).set_requires_grad(true);
  Tensor b = c.input("b", kFloat32).set_requires_grad(true);
  Tensor y = a * b.to(kFloat16);
  CHECK(y.dtype() == kFloat16);
  y.backward(c.input("gy", kFloat16));
  CHECK(a.grad().dtype() == kFloat16);
  CHECK(b.grad().dtype() == kFloat32);
  check_close(y.to(kFloat32), c.output("y"), tolerance_for(kFloat16), "mul f16 y");
  check_close(b.grad(), c.grad("b"), {1e-2, 1e-2}, "mul f16 db (sum of f16 products)");
  amp::AutocastGuard autocast;
  CHECK((a * b).dtype() == kFloat32);  // promote list: the widest input
}
