// bfloat16 conversion: every one of the 65,536 patterns round-trips through float; float -> bf16
// round-to-nearest-even checked against an independent formulation (nearest of the two neighbours,
// computed in double, ties to the even mantissa) around every pattern; ties, overflow to inf,
// subnormals, NaN; and the BFloat16 dtype through Tensor (fill, from_vector, item, cast_copy) and
// promote_types.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <vector>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/tensor.h"

using namespace halfgrad;

namespace {

uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
bool is_bf16_nan(uint32_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu); }

// The reference rounding, written without the bias trick: a finite float x lies between the bf16
// value `lo` obtained by truncating its low 16 bits and the next bf16 of larger magnitude `hi`
// (lo's pattern + 1; above the largest finite bf16 that is 2^128, i.e. inf). Pick the nearer in
// exact double arithmetic; on a tie pick the one whose pattern is even.
uint16_t reference_round(float x) {
  if (std::isnan(x)) return 0x7fc0u;
  const uint32_t u = bits_of(x);
  const uint16_t lo_bits = static_cast<uint16_t>(u >> 16);
  if ((u & 0xffffu) == 0) return lo_bits;  // exactly representable (also +-0 and +-inf)
  const uint16_t hi_bits = static_cast<uint16_t>(lo_bits + 1);
  const double ax = std::fabs(static_cast<double>(x));
  const double lo = std::fabs(static_cast<double>(float_of(static_cast<uint32_t>(lo_bits) << 16)));
  const double hi = (hi_bits & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128)
                                                   : std::fabs(static_cast<double>(float_of(static_cast<uint32_t>(hi_bits) << 16)));
  const double dlo = ax - lo, dhi = hi - ax;
  if (dlo < dhi) return lo_bits;
  if (dhi < dlo) return hi_bits;
  return (lo_bits & 1u) ? hi_bits : lo_bits;
}

}  // namespace

TEST_CASE("core: bfloat16 all 65536 bit patterns round-trip through float") {
  int64_t nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bfloat16_bits_to_float(static_cast<uint16_t>(b));
    REQUIRE(bits_of(f) == b << 16);  // bf16 -> float appends 16 zero bits: exact
    const uint16_t back = float_to_bfloat16_bits(f);
    if (is_bf16_nan(b)) {
      ++nans;
      CHECK(std::isnan(f));
      REQUIRE(back == 0x7fc0u);  // every NaN becomes the quiet NaN, as c10::BFloat16
    } else {
      REQUIRE_MESSAGE(back == b, "pattern " << b << " -> " << f << " -> " << back);
    }
  }
  CHECK(nans == 2 * 127);  // exponent 255 with a nonzero 7-bit mantissa, both signs
}

TEST_CASE("core: bfloat16 float -> bf16 rounding matches the reference around every pattern") {
  // For each bf16 pattern p, floats whose upper half is p and whose lower half is below, at and above
  // the halfway point 0x8000 (a tie), plus the extremes: every rounding decision of the format.
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x4000u, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu};
  for (uint32_t p = 0; p < 65536; ++p) {
    if (is_bf16_nan(p) || (p & 0x7fffu) == 0x7f80u) continue;  // NaN and inf have no neighbours below
    for (uint32_t low : lows) {
      const float x = float_of((p << 16) | low);
      REQUIRE_MESSAGE(float_to_bfloat16_bits(x) == reference_round(x), "float bits 0x" << std::hex << bits_of(x));
    }
  }
  std::mt19937 rng(20261201);
  for (int i = 0; i < 200000; ++i) {
    const float x = float_of(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    REQUIRE(float_to_bfloat16_bits(x) == reference_round(x));
  }
}

TEST_CASE("core: bfloat16 known values, ties, overflow, subnormals and NaN") {
  CHECK(float_to_bfloat16_bits(0.0f) == 0x0000u);
  CHECK(float_to_bfloat16_bits(-0.0f) == 0x8000u);
  CHECK(float_to_bfloat16_bits(1.0f) == 0x3f80u);
  CHECK(float_to_bfloat16_bits(-2.0f) == 0xc000u);
  // Ties: 1 + 2^-8 is halfway between 1 (mantissa even) and 1 + 2^-7: to 1. 1 + 3 * 2^-8 is halfway
  // between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(float_to_bfloat16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80u);
  CHECK(float_to_bfloat16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82u);
  CHECK(float_to_bfloat16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3f81u);
  // The largest finite bf16 and the overflow threshold: the midpoint to 2^128 ties to even = inf.
  CHECK(bfloat16_bits_to_float(0x7f7fu) == kBFloat16Max);
  CHECK(float_to_bfloat16_bits(kBFloat16Max) == 0x7f7fu);
  CHECK(float_to_bfloat16_bits(float_of(0x7f7f7fffu)) == 0x7f7fu);  // just below the midpoint
  CHECK(float_to_bfloat16_bits(float_of(0x7f7f8000u)) == 0x7f80u);  // the midpoint: inf
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::max()) == 0x7f80u);
  CHECK(float_to_bfloat16_bits(-std::numeric_limits<float>::max()) == 0xff80u);
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::infinity()) == 0x7f80u);
  // Subnormals keep FP32's: the smallest bf16 subnormal is 2^-133; half of it ties to even 0.
  CHECK(bfloat16_bits_to_float(0x0001u) == std::ldexp(1.0f, -133));
  CHECK(float_to_bfloat16_bits(std::ldexp(1.0f, -133)) == 0x0001u);
  CHECK(float_to_bfloat16_bits(std::ldexp(1.0f, -134)) == 0x0000u);
  CHECK(float_to_bfloat16_bits(std::ldexp(3.0f, -134)) == 0x0002u);  // 1.5 ulp: tie to even 2
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000u);
  // FP16's range is no limit: 1e-10 and 1e10 are normal in bf16.
  CHECK(std::fabs(round_to_bfloat16(1e-10f) - 1e-10f) <= 1e-10f * kBFloat16Eps);
  CHECK(std::fabs(round_to_bfloat16(1e10f) - 1e10f) <= 1e10f * kBFloat16Eps);
  // NaN: quiet, positive, whatever the sign or payload (c10's round_to_nearest_even).
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7fc0u);
  CHECK(float_to_bfloat16_bits(float_of(0xff800001u)) == 0x7fc0u);  // negative signalling NaN
  CHECK(float_to_bfloat16_bits(float_of(0x7f800001u)) == 0x7fc0u);  // a payload only in the low bits
}

TEST_CASE("core: bfloat16 bulk arrays agree with the scalar conversion") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  std::vector<float> src(1003);
  for (float& x : src) x = nd(rng);
  std::vector<bfloat16_bits> dst(src.size());
  float_to_bfloat16_array(src.data(), dst.data(), src.size());
  std::vector<float> back(src.size());
  bfloat16_to_float_array(dst.data(), back.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    REQUIRE(dst[i].bits == float_to_bfloat16_bits(src[i]));
    REQUIRE(back[i] == round_to_bfloat16(src[i]));
  }
  CHECK_THROWS_AS(float_to_reduced_array(kFloat32, src.data(), dst.data(), 1), Error);
}

TEST_CASE("core: dtype bfloat16 size, name and promotion (as torch.promote_types)") {
  CHECK(dtype_size(kBFloat16) == 2);
  CHECK(std::string(dtype_name(kBFloat16)) == "bfloat16");
  CHECK(is_floating(kBFloat16));
  CHECK(is_reduced_float(kBFloat16));
  CHECK(is_reduced_float(kFloat16));
  CHECK_FALSE(is_reduced_float(kFloat32));
  CHECK(promote_types(kBFloat16, kFloat16) == kFloat32);
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kBFloat16, kBFloat16) == kBFloat16);
  CHECK(promote_types(kBFloat16, kFloat32) == kFloat32);
  CHECK(promote_types(kFloat64, kBFloat16) == kFloat64);
  CHECK(promote_types(kBFloat16, kInt64) == kBFloat16);
  CHECK(promote_types(kInt64, kBFloat16) == kBFloat16);
}

TEST_CASE("core: bfloat16 Tensor fill, from_vector, item and cast_copy") {
  const Tensor f = Tensor::full({2, 3}, 1.0 + 1.0 / 256, kBFloat16);  // a tie: rounds to 1
  CHECK(f.dtype() == kBFloat16);
  CHECK(f.nbytes() == 12);
  for (int64_t i = 0; i < f.numel(); ++i) CHECK(f.item_at(i) == 1.0);
  CHECK(f.data<bfloat16_bits>()[0].bits == 0x3f80u);
  CHECK_THROWS_AS(f.data<uint16_t>(), Error);  // a bf16 buffer is never read as half

  const std::vector<float> v = {0.1f, -3.0f, 1e30f, 1e-30f, 65536.0f * 4, 3.14159f};
  const Tensor t = Tensor::from_vector(v, {6}, kBFloat16);
  const std::vector<float> back = t.to_float_vector();
  for (size_t i = 0; i < v.size(); ++i) CHECK(back[i] == round_to_bfloat16(v[i]));
  CHECK(t.to_double_vector()[2] == static_cast<double>(round_to_bfloat16(1e30f)));  // beyond FP16's range

  // cast_copy in every direction agrees with the scalar rounding.
  const Tensor x32 = Tensor::from_vector(v, {6}, kFloat32);
  const Tensor x16 = x32.cast_copy(kFloat16);
  const Tensor b_from32 = x32.cast_copy(kBFloat16);
  const Tensor b_from64 = x32.cast_copy(kFloat64).cast_copy(kBFloat16);
  const Tensor b_from16 = x16.cast_copy(kBFloat16);
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(b_from32.item_at(i) == round_to_bfloat16(v[i]));
    CHECK(b_from64.item_at(i) == round_to_bfloat16(v[i]));
    CHECK(b_from16.item_at(i) == round_to_bfloat16(static_cast<float>(x16.item_at(i))));
  }
  const Tensor h = b_from32.cast_copy(kFloat16);
  CHECK(std::isinf(h.item_at(2)));  // 1e30 overflows FP16
  CHECK(b_from32.cast_copy(kFloat64).item_at(1) == -3.0);
  CHECK(Tensor::from_vector(std::vector<double>{2.5, -7.0}, {2}, kBFloat16).cast_copy(kInt64).item_at(1) == -7.0);
  CHECK(Tensor::from_labels({3, 4}, {2}).cast_copy(kBFloat16).item_at(1) == 4.0);
}
