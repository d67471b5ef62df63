// deep_supervision.cpp - nnU-Net v2's deep-supervision weights, target downsampling and weighted loss
// (math and conventions in deep_supervision.h). Composed of segmentation_loss and affine/add, so its
// backward is theirs: dL/dL_i = w_i * dsegmentation_loss(L_i).
#include "ops/loss/deep_supervision.h"

#include "core/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"

namespace halfgrad::ops {

std::vector<double> deep_supervision_weights(size_t n) {
  HG_CHECK(n >= 2, "deep_supervision_weights: needs at least 2 outputs (the lowest resolution gets weight 0), got " << n);
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = 1.0 / static_cast<double>(uint64_t{1} << i);
  w[n - 1] = 0;
  double sum = 0;
  for (double v : w) sum += v;
  for (double& v : w) v /= sum;
  return w;
}

Tensor downsample_labels_nearest(const Tensor& target, int64_t s) {
  HG_CHECK(target.defined(), "downsample_labels_nearest: target is undefined");
  HG_CHECK(target.dim() == 4 && target.dtype() == kInt64,
           "downsample_labels_nearest: target must be (N, D, H, W) int64, got " << dtype_name(target.dtype()) << " "
                                                                                << shape_str(target.shape()));
  HG_CHECK(s >= 1, "downsample_labels_nearest: scale must be >= 1, got " << s);
  for (int a = 1; a < 4; ++a)
    HG_CHECK(target.size(a) % s == 0, "downsample_labels_nearest: target " << shape_str(target.shape()) << ": extent "
                                                                            << target.size(a) << " is not divisible by the scale " << s);
  if (s == 1) return target;
  if (target.is_cuda()) return downsample_labels_nearest(target.to(Device::CPU), s).to(Device::CUDA);

  const Tensor t = target.contiguous();
  const int64_t N = t.size(0), D = t.size(1), H = t.size(2), W = t.size(3);
  const int64_t d = D / s, h = H / s, w = W / s, o = s / 2;
  Tensor out = Tensor::empty({N, d, h, w}, kInt64);
  const int64_t* src = t.data<int64_t>();
  int64_t* dst = out.data<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t z = 0; z < d; ++z)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          *dst++ = src[((n * D + s * z + o) * H + s * y + o) * W + s * x + o];
  return out;
}

Tensor deep_supervision_loss(const std::vector<Tensor>& logits, const Tensor& target) {
  const std::vector<double> w = deep_supervision_weights(logits.size());
  HG_CHECK(target.defined() && target.dim() == 4 && target.dtype() == kInt64,
           "deep_supervision_loss: target must be (N, D, H, W) int64, got "
               << (target.defined() ? dtype_name(target.dtype()) + std::string(" ") + shape_str(target.shape()) : "undefined"));
  Tensor loss;
  for (size_t i = 0; i < logits.size(); ++i) {
    const Tensor& li = logits[i];
    HG_CHECK(li.defined() && li.dim() == 5, "deep_supervision_loss: logits[" << i << "] must be 5-D (N, C, D, H, W), got "
                                                                             << (li.defined() ? shape_str(li.shape()) : "undefined"));
    const int64_t s = int64_t{1} << i;
    bool ok = li.size(0) == target.size(0);
    for (int a = 1; a < 4; ++a) ok = ok && target.size(a) % s == 0 && li.size(1 + a) == target.size(a) / s;
    HG_CHECK(ok, "deep_supervision_loss: logits[" << i << "] " << shape_str(li.shape()) << " for target "
                                                  << shape_str(target.shape()) << "; expected (N, C, D/" << s << ", H/" << s
                                                  << ", W/" << s << ") with N = " << target.size(0));
    if (w[i] == 0) continue;  // nnU-Net's DeepSupervisionWrapper: not evaluated
    Tensor term = affine(segmentation_loss(li, downsample_labels_nearest(target, s)), w[i], 0);
    loss = loss.defined() ? add(loss, term) : term;
  }
  return loss;
}

}  // namespace halfgrad::ops
