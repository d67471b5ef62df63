// sphere_data.h - the synthetic data of examples 04 and 07-10: bright spheres in Gaussian noise, and
// the Dice score of a prediction. Needs no download, so every demonstration runs as it stands.
//
//   x (B, 1, S, S, S) float32: 1 inside the sphere, 0 outside, plus N(0, 0.5^2) noise
//   y (B, S, S, S) int64: 1 inside the sphere, 0 outside
#pragma once
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace halfgrad::examples {

/// A batch of B volumes of side S with one sphere each (centre in the middle half, radius S/6..S/3).
inline void sphere_batch(Generator& gen, int64_t B, int64_t S, Tensor& x, Tensor& y) {
  std::vector<float> img(B * S * S * S);
  std::vector<int64_t> lab(img.size());
  for (int64_t b = 0; b < B; ++b) {
    const double cz = S / 4.0 + S / 2.0 * gen.uniform(), cy = S / 4.0 + S / 2.0 * gen.uniform(),
                 cx = S / 4.0 + S / 2.0 * gen.uniform();
    const double r = S / 6.0 + S / 6.0 * gen.uniform();
    for (int64_t z = 0; z < S; ++z)
      for (int64_t yy = 0; yy < S; ++yy)
        for (int64_t xx = 0; xx < S; ++xx) {
          const int64_t i = ((b * S + z) * S + yy) * S + xx;
          const bool in = (z - cz) * (z - cz) + (yy - cy) * (yy - cy) + (xx - cx) * (xx - cx) < r * r;
          lab[i] = in;
          img[i] = static_cast<float>((in ? 1.0 : 0.0) + 0.5 * gen.normal());
        }
  }
  x = Tensor::from_vector(img, {B, 1, S, S, S});
  y = Tensor::from_labels(lab, {B, S, S, S});
}

/// Dice of the foreground class (label 1) between argmax(logits, channels) and `y`, over the batch.
inline double foreground_dice(const Tensor& logits, const Tensor& y) {
  const Tensor pred = ops::argmax(logits.to(kFloat32).detach(), 1);
  const int64_t* p = pred.data<int64_t>();
  const int64_t* t = y.data<int64_t>();
  double inter = 0, sum = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    inter += (p[i] == 1 && t[i] == 1);
    sum += (p[i] == 1) + (t[i] == 1);
  }
  return sum == 0 ? 1.0 : 2 * inter / sum;
}

}  // namespace halfgrad::examples
