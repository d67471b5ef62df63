// FP16 inspection: field decoding, the dump, log2 histograms and checkpoint comparison.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "amp/fp16_inspect.h"
#include "core/error.h"
#include "core/half.h"

using namespace halfgrad;
using amp::HalfClass;

TEST_CASE("fp16_inspect: decode_half fields and class of the landmark patterns") {
  struct Case { uint16_t bits; int s, e, m; HalfClass c; float v; int ue; };
  const Case cases[] = {
      {0x0000, 0, 0, 0, HalfClass::Zero, 0.0f, -14},
      {0x8000, 1, 0, 0, HalfClass::Zero, -0.0f, -14},
      {0x0001, 0, 0, 1, HalfClass::Subnormal, kHalfMinSubnormal, -14},
      {0x03ff, 0, 0, 1023, HalfClass::Subnormal, 1023 * kHalfMinSubnormal, -14},
      {0x0400, 0, 1, 0, HalfClass::Normal, kHalfMinNormal, -14},
      {0x3c00, 0, 15, 0, HalfClass::Normal, 1.0f, 0},
      {0xc000, 1, 16, 0, HalfClass::Normal, -2.0f, 1},
      {0x7bff, 0, 30, 1023, HalfClass::Normal, kHalfMax, 15},
      {0x7c00, 0, 31, 0, HalfClass::Inf, INFINITY, 16},
      {0xfc00, 1, 31, 0, HalfClass::Inf, -INFINITY, 16},
  };
  for (const Case& c : cases) {
    CAPTURE(c.bits);
    const amp::HalfFields f = amp::decode_half(c.bits);
    CHECK(f.sign == c.s);
    CHECK(f.exponent == c.e);
    CHECK(f.mantissa == c.m);
    CHECK(f.cls == c.c);
    CHECK(f.value == c.v);
    CHECK(f.unbiased_exponent() == c.ue);
  }
  CHECK(amp::decode_half(0x7e00).cls == HalfClass::NaN);
  CHECK(std::string(amp::half_class_name(HalfClass::Subnormal)) == "subnormal");
}

TEST_CASE("fp16_inspect: half_dump of float32 [4] shows the value, the rounded pattern and its fields") {
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f, 1e-6f, 70000.0f, 1e-9f}, {4});
  const std::string d = amp::half_dump(t, 0, 10);
  CHECK(d.find("float32 [4], elements [0, 4), each rounded to float16") != std::string::npos);
  CHECK(d.find("0x3c00  0 | 01111 | 0000000000  = +2^0 * 1.0000 = 1   normal") != std::string::npos);
  CHECK(d.find("0x0011  0 | 00000 | 0000010001  = +2^-14 * 0.0166") != std::string::npos);  // 1e-6 = 17 * 2^-24
  CHECK(d.find("0x7c00  0 | 11111 | 0000000000  = +inf   inf") != std::string::npos);
  CHECK(d.find("0x0000  0 | 00000 | 0000000000  = +0   zero") != std::string::npos);
}

TEST_CASE("fp16_inspect: half_dump of a float16 [3] range, and its errors") {
  Tensor t = Tensor::from_vector(std::vector<float>{0.5f, -3.0f, 0.1f}, {3}, kFloat16);
  const std::string d = amp::half_dump(t, 1, 1);
  CHECK(d.find("float16 [3], elements [1, 2)") != std::string::npos);
  CHECK(d.find("[     1]  0xc200  1 | 10000 | 1000000000  = -2^1 * 1.5000 = -3   normal") != std::string::npos);
  CHECK(d.find("[     2]") == std::string::npos);
  CHECK_THROWS_WITH_AS(amp::half_dump(t, 4, 1), doctest::Contains("begin 4 is outside [0, 3]"), Error);
  CHECK_THROWS_WITH_AS(amp::half_dump(Tensor::from_labels({1}, {1})), doctest::Contains("int64"), Error);
}

TEST_CASE("fp16_inspect: log2_abs_histogram float32 [9] bins floor(log2|x|) exactly") {
  Tensor t = Tensor::from_vector(std::vector<float>{0, 1, 1.5f, -2, 0.25f, 1e-9f, 1e6f, INFINITY, 0.99999994f}, {9});
  const amp::Log2Histogram h = amp::log2_abs_histogram(t, -30, 16);
  CHECK(h.bins.size() == 47);
  auto bin = [&](int e) { return h.bins[static_cast<size_t>(e + 30)]; };
  CHECK(h.total == 9);
  CHECK(h.zeros == 1);
  CHECK(h.nonfinite == 1);
  CHECK(h.above == 1);   // 1e6 ~ 2^19.9
  CHECK(h.below == 0);
  CHECK(bin(0) == 2);    // 1, 1.5
  CHECK(bin(1) == 1);    // 2
  CHECK(bin(-1) == 1);   // just below 1
  CHECK(bin(-2) == 1);   // 0.25
  CHECK(bin(-30) == 1);  // 1e-9 ~ 2^-29.9
  CHECK(std::string(amp::fp16_bin_region(16)) == "overflow");
  CHECK(std::string(amp::fp16_bin_region(-14)) == "normal");
  CHECK(std::string(amp::fp16_bin_region(-24)) == "subnormal");
  CHECK(std::string(amp::fp16_bin_region(-25)) == "tie");
  CHECK(std::string(amp::fp16_bin_region(-26)) == "zero");
  CHECK_THROWS_AS(amp::log2_abs_histogram(t, 3, 2), Error);
}

TEST_CASE("fp16_inspect: two histograms compared as text and CSV") {
  const amp::Log2Histogram a = amp::log2_abs_histogram(Tensor::from_vector(std::vector<float>{1, 1, 0.001f}, {3}));
  const amp::Log2Histogram b = amp::log2_abs_histogram(Tensor::from_vector(std::vector<float>{1, 1e-6f, 0}, {3}));
  const std::string text = amp::compare_histograms_text("w", "fp32", a, "amp", b);
  CHECK(text.find("'#' = fp32 (3 values), '=' = amp (3 values)") != std::string::npos);
  CHECK(text.find("2^0") != std::string::npos);
  CHECK(text.find("subnormal") != std::string::npos);  // 1e-6 ~ 2^-19.9: bin -20
  CHECK(text.find("exact 0") != std::string::npos);
  CHECK(text.find("2^5 ") == std::string::npos);        // empty bins are not printed
  const std::string path =
      (std::filesystem::temp_directory_path() / ("halfgrad_hist_" + std::to_string(::getpid()) + ".csv")).string();
  amp::write_histograms_csv(path, a, b);
  std::ifstream in(path);
  std::string line;
  int n = 0;
  std::getline(in, line);
  CHECK(line == "bin,log2_lo,value_lo,fp16_region,count_a,frac_a,count_b,frac_b");
  while (std::getline(in, line)) ++n;
  CHECK(n == static_cast<int>(a.bins.size()) + 4);
  std::filesystem::remove(path);
  const amp::Log2Histogram c = amp::log2_abs_histogram(Tensor::ones({1}), -5, 5);
  CHECK_THROWS_WITH_AS(amp::compare_histograms_text("w", "a", a, "c", c), doctest::Contains("different bins"), Error);
}

TEST_CASE("fp16_inspect: compare two checkpoints, float32 vs float16 parameters") {
  nn::CheckpointState a, b;
  a.parameters = {{"w", Tensor::from_vector(std::vector<float>{1, 2, 1e-6f, 0}, {2, 2})},
                  {"only_a", Tensor::ones({1})},
                  {"shape", Tensor::ones({2})}};
  b.parameters = {{"w", Tensor::from_vector(std::vector<float>{1, 2.5f, 1e-6f, 0}, {2, 2}, kFloat16)},
                  {"shape", Tensor::ones({3})}};
  const std::string dir = (std::filesystem::temp_directory_path() / ("halfgrad_cmp_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  nn::write_checkpoint(dir + "/a.bin", a);
  nn::write_checkpoint(dir + "/b.bin", b);
  std::vector<std::string> skipped;
  const auto rows = amp::compare_checkpoints(nn::read_checkpoint(dir + "/a.bin"), nn::read_checkpoint(dir + "/b.bin"),
                                             &skipped);
  std::filesystem::remove_all(dir);
  REQUIRE(rows.size() == 1);
  const amp::TensorComparison& r = rows[0];
  CHECK(r.name == "w");
  CHECK(r.dtype_a == kFloat32);
  CHECK(r.dtype_b == kFloat16);
  CHECK(r.max_abs_a == 2);
  CHECK(r.max_abs_b == 2.5);
  CHECK(r.max_abs_diff == doctest::Approx(0.5).epsilon(1e-3));
  CHECK(r.rel_l2_diff == doctest::Approx(0.5 / std::sqrt(5.0)).epsilon(1e-3));
  CHECK(r.fp16_subnormal_frac_a == doctest::Approx(1.0 / 3));  // 1e-6 of the 3 nonzero values
  CHECK(skipped.size() == 2);
  CHECK(amp::comparison_table(rows).find("w ") != std::string::npos);
  CHECK(amp::find_checkpoint_tensor(a, "shape").numel() == 2);
  CHECK_THROWS_WITH_AS(amp::find_checkpoint_tensor(a, "nope"), doctest::Contains("its parameters are: w, only_a, shape"),
                       Error);
}
