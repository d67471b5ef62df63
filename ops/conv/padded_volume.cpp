// padded_volume.cpp - zero-padded copies of input samples (see padded_volume.h).
#include "ops/conv/padded_volume.h"

#include <algorithm>
#include <cstring>

namespace halfgrad::ops::conv {

PaddedGroup padded_group(const ConvGeometry& g, const Padded& P) {
  thread_local std::vector<float> buf;
  const int64_t per_sample = P.sample(g.cin);
  const int64_t nb = std::clamp<int64_t>(kPaddedGroupFloats / per_sample, 1, std::max<int64_t>(1, g.n));
  return {grow(buf, nb * per_sample), nb};
}

void pad_samples(const ConvGeometry& g, const Padded& P, const float* x, int64_t n0, int64_t nb, float* xp) {
#pragma omp for schedule(static)
  for (int64_t cz = 0; cz < nb * g.cin * P.dp; ++cz) {
    const int64_t nc = cz / P.dp, zi = cz % P.dp - g.p[0];  // nc = local sample * Cin + channel
    float* dst = xp + cz * P.plane();
    if (zi < 0 || zi >= g.d) {
      std::fill(dst, dst + P.plane(), 0.0f);
      continue;
    }
    const float* src = x + ((n0 * g.cin + nc) * g.d + zi) * g.h * g.w;
    for (int64_t yp = 0; yp < P.hp; ++yp) {
      float* row = dst + yp * P.wp;
      const int64_t yi = yp - g.p[1];
      if (yi < 0 || yi >= g.h) {
        std::fill(row, row + P.wp, 0.0f);
        continue;
      }
      const int64_t pw = g.p[2];
      std::fill(row, row + pw, 0.0f);
      std::memcpy(row + pw, src + yi * g.w, sizeof(float) * g.w);
      std::fill(row + pw + g.w, row + P.wp, 0.0f);
    }
  }
}

}  // namespace halfgrad::ops::conv
