// Per-parameter gradient statistics: thresholds checked against core/half.h's rounding, unscaling by
// the loss scale, the "(all)" row and the CSV writer.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "amp/grad_stats.h"
#include "core/error.h"
#include "core/half.h"
#include "nn/conv3d.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

using namespace halfgrad;

TEST_CASE("grad_stats: float32 [N] underflow / subnormal / overflow counts match float_to_half_bits at the edges") {
  // Values at and one float either side of each rounding boundary: 2^-25, 2^-14 - 2^-25, 65520.
  std::vector<float> v;
  for (float edge : {std::ldexp(1.0f, -25), std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), 65520.0f, 65504.0f,
                     std::ldexp(1.0f, -24), std::ldexp(1.0f, -14)}) {
    for (float x : {std::nextafter(edge, 0.0f), edge, std::nextafter(edge, INFINITY)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  int64_t under = 0, sub = 0, over = 0;
  for (float x : v) {
    const uint16_t h = float_to_half_bits(x);
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0 && m == 0) ++under;
    else if (e == 0) ++sub;
    else if (e == 31) ++over;
  }
  REQUIRE(under > 0);
  REQUIRE(sub > 0);
  REQUIRE(over > 0);
  const amp::GradStats s = amp::grad_stats("p", Tensor::from_vector(v, {static_cast<int64_t>(v.size())}), 1.0);
  CHECK(s.fp16_underflow == under);
  CHECK(s.scaled_underflow == under);  // scale 1: the same
  CHECK(s.fp16_subnormal == sub);
  CHECK(s.overflow == over);
  CHECK(s.zeros == 0);
  CHECK(s.nonfinite == 0);
}

TEST_CASE("grad_stats: float32 [7] gradients scaled by S = 1024 are unscaled first") {
  const double S = 1024;
  // true gradients g; stored S * g
  const std::vector<double> g = {0, 1e-9, 1e-11, 1e-6, 1, -2, 100};
  std::vector<float> stored;
  for (double x : g) stored.push_back(static_cast<float>(x * S));
  const amp::GradStats s = amp::grad_stats("w", Tensor::from_vector(stored, {7}), S);
  CHECK(s.numel == 7);
  CHECK(s.loss_scale == S);
  CHECK(s.zeros == 1);
  CHECK(s.fp16_underflow == 2);    // 1e-9 and 1e-11 <= 2^-25 ~ 2.98e-8
  CHECK(s.scaled_underflow == 1);  // 1e-11 * 1024 ~ 1e-8 still rounds to 0; 1e-9 * 1024 ~ 1e-6 does not
  CHECK(s.fp16_subnormal == 1);    // 1e-6 < 2^-14 ~ 6.1e-5
  CHECK(s.overflow == 1);          // 100 * 1024 >= 65520
  CHECK(s.max_abs == doctest::Approx(100));
  CHECK(s.min_nonzero_abs == doctest::Approx(1e-11));
  CHECK(s.fraction(s.zeros) == doctest::Approx(1.0 / 7));
}

TEST_CASE("grad_stats: float16 [4] with inf and NaN counts them as non-finite, inf as overflow") {
  Tensor t = Tensor::empty({4}, kFloat16);
  uint16_t* p = t.data<uint16_t>();
  p[0] = 0x7c00;  // +inf
  p[1] = 0x7e00;  // NaN
  p[2] = float_to_half_bits(0.5f);
  p[3] = 0x0001;  // 2^-24 scaled by 1: subnormal
  const amp::GradStats s = amp::grad_stats("h", t, 1.0);
  CHECK(s.nonfinite == 2);
  CHECK(s.overflow == 1);
  CHECK(s.fp16_subnormal == 1);
  CHECK(s.max_abs == 0.5);
}

TEST_CASE("grad_stats: bad arguments throw naming the parameter") {
  CHECK_THROWS_WITH_AS(amp::grad_stats("enc.w", Tensor(), 1.0), doctest::Contains("'enc.w' is undefined"), Error);
  CHECK_THROWS_WITH_AS(amp::grad_stats("lab", Tensor::from_labels({1}, {1}), 1.0), doctest::Contains("int64"), Error);
  CHECK_THROWS_WITH_AS(amp::grad_stats("w", Tensor::ones({1}), 0.0), doctest::Contains("loss_scale"), Error);
}

TEST_CASE("grad_stats: collect over a Conv3d(1, 2, 3) after backward, with an (all) row, written as CSV") {
  Generator gen(3);
  auto conv = std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 2, 3), gen);
  Tensor x = Tensor::randn({1, 1, 4, 4, 4}, gen);
  ops::sum(conv->forward(x) * 8.0).backward();  // gradients scaled by 8
  const nn::NamedTensors params = conv->named_parameters();
  const std::vector<amp::GradStats> rows = amp::collect_grad_stats(params, 8.0);
  REQUIRE(rows.size() == params.size() + 1);
  CHECK(rows[0].name == params[0].first);
  CHECK(rows.back().name == "(all)");
  int64_t numel = 0;
  double max_abs = 0;
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    numel += rows[i].numel;
    max_abs = std::max(max_abs, rows[i].max_abs);
  }
  CHECK(rows.back().numel == numel);
  CHECK(rows.back().max_abs == max_abs);
  // bias gradient = sum of dy / 8 = number of output positions (8) for each channel
  CHECK(rows[1].max_abs == doctest::Approx(8.0));

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("halfgrad_grad_stats_" + std::to_string(::getpid()) + ".csv")).string();
  {
    amp::GradStatsCsvWriter csv(path);
    csv.write(1, rows);
    csv.write(2, rows);
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  CHECK(line == amp::GradStatsCsvWriter::header());
  int n = 0;
  while (std::getline(in, line)) ++n;
  CHECK(n == 2 * static_cast<int>(rows.size()));
  std::filesystem::remove(path);
  // no gradient anywhere: no rows at all
  conv->zero_grad();
  CHECK(amp::collect_grad_stats(conv->named_parameters(), 1.0).empty());
  CHECK_THROWS_WITH_AS(amp::GradStatsCsvWriter("/nonexistent-dir/x.csv"), doctest::Contains("cannot open"), Error);
}
