// synthetic_seg_data.h - three 12x10x14 volumes with foreground blobs (labels 1 and 2) for the tests
// of make_training_batch (distributed_test.cpp, augment_batch_test.cpp).
#pragma once
#include <string>
#include <vector>

#include "examples/05_unet3d/data.h"

namespace halfgrad::testing {

inline unet3d_app::SegData synthetic_seg_data() {
  unet3d_app::SegData d;
  Generator g(7);
  for (int v = 0; v < 3; ++v) {
    unet3d_app::SegVolume s;
    s.name = "vol" + std::to_string(v);
    s.image = Tensor::randn({12, 10, 14}, g);
    std::vector<int64_t> lab(12 * 10 * 14, 0);
    for (int64_t i = 0; i < static_cast<int64_t>(lab.size()); ++i)
      if ((i / 140 + v) % 5 == 0 && i % 14 > 6) lab[i] = 1 + (i % 2);
    s.label = Tensor::from_labels(lab, {12, 10, 14});
    d.train.push_back(s);
  }
  d.num_classes = 3;
  return d;
}

}  // namespace halfgrad::testing
