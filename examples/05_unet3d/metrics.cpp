#include "examples/05_unet3d/metrics.h"

#include "core/error.h"

namespace unet3d_app {

std::vector<double> dice_per_class(const halfgrad::Tensor& pred, const halfgrad::Tensor& target, int64_t num_classes) {
  HG_CHECK(pred.shape() == target.shape(), "dice: prediction " << halfgrad::shape_str(pred.shape())
                                                               << " and target " << halfgrad::shape_str(target.shape())
                                                               << " differ");
  std::vector<int64_t> inter(num_classes, 0), np(num_classes, 0), nt(num_classes, 0);
  const int64_t* p = pred.data<int64_t>();
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < pred.numel(); ++i) {
    ++np[p[i]];
    ++nt[t[i]];
    if (p[i] == t[i]) ++inter[p[i]];
  }
  std::vector<double> d;
  for (int64_t c = 1; c < num_classes; ++c) {
    const int64_t den = np[c] + nt[c];
    d.push_back(den == 0 ? 1.0 : 2.0 * static_cast<double>(inter[c]) / static_cast<double>(den));
  }
  return d;
}

}  // namespace unet3d_app
