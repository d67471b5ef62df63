// 01_half_precision - what an FP16 number is, bit by bit, and what rounding to it does.
//
//   build/examples/01_half_precision
//
// Prints a few floats with the binary16 pattern they round to (sign | exponent | mantissa), the
// value that pattern holds, and the relative error; then the three places FP16 bites in training:
// overflow (>= 65520 -> inf), underflow (< 2^-25 -> 0) and the coarse spacing near 1 (2^-10).
#include <cmath>
#include <cstdio>

#include "core/half.h"

using namespace halfgrad;

static void show(const char* what, float f) {
  const uint16_t h = float_to_half_bits(f);
  const float back = half_bits_to_float(h);
  std::printf("%-34s %14.8g -> 0x%04x  %d | %2d%d%d%d%d | ", what, f, h, h >> 15, 0, (h >> 13) & 1, (h >> 12) & 1,
              (h >> 11) & 1, (h >> 10) & 1);
  for (int b = 9; b >= 0; --b) std::printf("%d", (h >> b) & 1);
  std::printf("  = %-14.8g", back);
  if (f != 0 && std::isfinite(back)) std::printf(" rel. error %.2e", std::fabs(back - f) / std::fabs(f));
  std::printf("\n");
  (void)((h >> 14) & 1);
}

int main() {
  std::printf("binary16: 1 sign bit | 5 exponent bits (bias 15) | 10 mantissa bits\n\n");
  show("one", 1.0f);
  show("one third", 1.0f / 3);
  show("0.1", 0.1f);
  show("largest half", 65504.0f);
  show("65519.99 (rounds down)", 65519.99f);
  show("65520 (midpoint: ties to even = inf)", 65520.0f);
  show("smallest normal 2^-14", std::ldexp(1.0f, -14));
  show("smallest subnormal 2^-24", std::ldexp(1.0f, -24));
  show("2^-25 (tie: rounds to even = 0)", std::ldexp(1.0f, -25));
  show("a typical small gradient, 1e-8", 1e-8f);
  show("1 + 2^-11 (tie: rounds to 1)", 1.0f + std::ldexp(1.0f, -11));
  show("1 + 3*2^-11 (tie: rounds up, even)", 1.0f + 3 * std::ldexp(1.0f, -11));
  std::printf("\nA gradient of 1e-8 is lost in FP16; multiplied by a loss scale of 65536 it becomes %.6g,\n"
              "which FP16 holds to %.2e relative error. That is why GradScaler exists (examples 03, 05).\n",
              half_bits_to_float(float_to_half_bits(1e-8f * 65536)),
              std::fabs(half_bits_to_float(float_to_half_bits(1e-8f * 65536)) - 1e-8f * 65536) / (1e-8f * 65536));
  return 0;
}
