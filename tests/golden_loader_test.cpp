// The golden files (tests/golden/*.json, from tools/golden/make_golden.py and
// make_grad_scaler_golden.py) parse, every tensor's data
// matches its shape, every case follows the conventions of tests/golden.h, and half.json's float16
// bits from numpy agree with halfgrad's float_to_half_bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

namespace {

const char* const kGoldenFiles[] = {"elementwise.json", "reduce.json", "matmul.json", "conv.json",
                                    "pool.json",        "norm.json",   "activation.json", "shape.json",
                                    "loss.json",        "optim.json",  "half.json",
                                    "layers.json",      "shape_ops.json", "conv_axes.json",
                                    "grad_scaler.json"};  // the last from make_grad_scaler_golden.py

float float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t bits_of_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("golden: every file parses; shapes match data, grads match inputs, gy matches y") {
  for (const char* file : kGoldenFiles) {
    SUBCASE(file) {
      const GoldenFile g = load_golden(file);
      CHECK(g.torch_version().size() > 0);
      CHECK(g.generator().find("tools/golden/make_") != std::string::npos);
      REQUIRE(g.case_names().size() > 0);
      for (const std::string& name : g.case_names()) {
        const GoldenCase c = g.at(name);
        INFO(c.where());
        CHECK(c.op().size() > 0);
        CHECK(c.params().is_object());
        for (const char* sec : {"inputs", "outputs", "grads"}) {
          for (auto it = c.json().at(sec).begin(); it != c.json().at(sec).end(); ++it) {
            INFO(sec << "." << it.key());
            const Tensor t = golden_tensor(it.value());  // throws if data and shape disagree
            CHECK(t.numel() == static_cast<int64_t>(it.value().at("data").size()));
            CHECK(t.shape() == golden_shape(it.value()));
          }
        }
        for (const std::string& gname : c.grad_names()) {
          INFO("grad " << gname);
          REQUIRE(c.has_input(gname));
          CHECK(c.grad(gname).shape() == c.input(gname).shape());
        }
        if (!c.grad_names().empty()) {
          REQUIRE(c.has_input("gy"));
          REQUIRE(c.has_output("y"));
          CHECK(c.input("gy").shape() == c.output("y").shape());
        }
      }
    }
  }
}

TEST_CASE("golden: float32 decimals load as the exact float32 bit patterns") {
  const GoldenCase c = load_golden("half.json").at("float_to_half_finite");
  const Tensor x = c.input("x");
  const Tensor bits = c.input("x_bits");
  REQUIRE(x.dtype() == kFloat32);
  REQUIRE(x.numel() == bits.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    INFO(i << ": " << c.params().at("labels").at(i).get<std::string>());
    CHECK(bits_of_float(x.data<float>()[i]) == static_cast<uint32_t>(bits.data<int64_t>()[i]));
  }
  // Read as float64 the values stay the float32 ones.
  const Tensor x64 = c.input("x", kFloat64);
  for (int64_t i = 0; i < x.numel(); ++i) CHECK(x64.data<double>()[i] == static_cast<double>(x.data<float>()[i]));
}

TEST_CASE("golden: float32 -> float16 bits match numpy.float16 for every value in half.json") {
  const GoldenFile g = load_golden("half.json");
  SUBCASE("finite inputs: exact bits") {
    const GoldenCase c = g.at("float_to_half_finite");
    const Tensor x = c.input("x");
    const Tensor want = c.output("half_bits");
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float f = x.data<float>()[i];
      const uint16_t got = float_to_half_bits(f);
      INFO(i << ": " << c.params().at("labels").at(i).get<std::string>() << " = " << f);
      CHECK(got == static_cast<uint16_t>(want.data<int64_t>()[i]));
    }
  }
  SUBCASE("inf and NaN inputs") {
    const GoldenCase c = g.at("float_to_half_nonfinite");
    const Tensor xb = c.input("x_bits");
    const Tensor want = c.output("half_bits");
    for (int64_t i = 0; i < xb.numel(); ++i) {
      const float f = float_of_bits(static_cast<uint32_t>(xb.data<int64_t>()[i]));
      const uint16_t got = float_to_half_bits(f);
      const uint16_t w = static_cast<uint16_t>(want.data<int64_t>()[i]);
      INFO(i << ": " << c.params().at("labels").at(i).get<std::string>());
      if (std::isnan(f)) {
        CHECK((got & 0x7c00u) == 0x7c00u);  // NaN stays NaN; payload bits are not specified
        CHECK((got & 0x03ffu) != 0);
      } else {
        CHECK(got == w);
      }
    }
  }
  SUBCASE("half -> float is exact") {
    const GoldenCase c = g.at("half_to_float");
    const Tensor hb = c.input("half_bits");
    const Tensor want = c.output("x");
    for (int64_t i = 0; i < hb.numel(); ++i) {
      const uint16_t h = static_cast<uint16_t>(hb.data<int64_t>()[i]);
      INFO("half bits " << h);
      CHECK(bits_of_float(half_bits_to_float(h)) == bits_of_float(want.data<float>()[i]));
    }
  }
}

TEST_CASE("golden: check_close passes a tensor against itself and its float64 copy") {
  const GoldenCase c = load_golden("conv.json").at("conv3d_k3_s1_p1_bias");
  const Tensor y = c.output("y");
  check_close(y, y, tolerance_for(kFloat32), "y vs itself");
  check_close(c.output("y", kFloat64), y, tolerance_for(kFloat64), "y as float64 vs y");
  // The float64 case starts from the same float32-exact inputs.
  const GoldenCase c64 = load_golden("conv.json").at("conv3d_k3_s1_p1_bias_f64");
  check_close(c64.input("x", kFloat64), c.input("x"), 0, 0, "f64 case input x");
  check_close(c64.output("y"), y, tolerance_for(kFloat32), "conv3d y: float64 vs float32 torch");
  CHECK(tolerance_for(kFloat16).rtol > tolerance_for(kFloat32).rtol);
}
