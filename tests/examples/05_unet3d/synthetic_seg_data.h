// synthetic_seg_data.h - three 12x10x14 volumes with foreground blobs (labels 1 and 2) for the tests
// of make_training_batch (distributed_test.cpp, augment_batch_test.cpp, gpu_batch_test.cpp), with
// the recipe and the byte rows those tests compare.
#pragma once
#include <cstdint>
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

// 8x8x8 patches, foreground two times out of three, flips along every axis; or whole volumes.
inline unet3d_app::Recipe recipe(int64_t batch, bool patches, unet3d_app::Augmentation augment) {
  unet3d_app::Recipe r;
  r.batch = batch;
  if (patches) r.patch = {8, 8, 8};
  r.foreground_prob = 2.0 / 3.0;
  r.flip_axes = {0, 1, 2};
  r.augment = augment;
  return r;
}

// The bytes of rows [begin, end) of t's first dimension.
inline std::vector<uint8_t> rows(const Tensor& t, int64_t begin, int64_t end) {
  const size_t row = t.nbytes() / static_cast<size_t>(t.size(0));
  const uint8_t* p = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(p + begin * row, p + end * row);
}

}  // namespace halfgrad::testing
