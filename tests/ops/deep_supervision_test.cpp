// deep_supervision_loss (ops/loss/deep_supervision.h): nnU-Net v2's weights as numbers, the nearest
// target downsampling on a hand-made label map (which voxel of each block), the weighted sum against
// segmentation_loss term by term, the lowest output skipped (no gradient), a float64 gradcheck, and
// shape errors.
#include <doctest/doctest.h>

#include "autograd/gradcheck.h"
#include "core/error.h"
#include "ops/loss/deep_supervision.h"
#include "ops/loss/loss.h"

using namespace halfgrad;

namespace {

Tensor random_labels(const Shape& s, int64_t C, Generator& g) {
  std::vector<int64_t> v(shape_numel(s));
  for (auto& t : v) t = g.randint(C);
  return Tensor::from_labels(v, s);
}

std::vector<int64_t> labels_of(const Tensor& t) {
  std::vector<int64_t> v;
  for (double d : t.to_double_vector()) v.push_back(static_cast<int64_t>(d));
  return v;
}

// Logits (N, C, D/2^i, H/2^i, W/2^i) for i = 0 .. n-1, float64 leaves.
std::vector<Tensor> pyramid(int64_t N, int64_t C, const Shape& spatial, size_t n, Generator& g) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = int64_t{1} << i;
    out.push_back(Tensor::randn({N, C, spatial[0] / s, spatial[1] / s, spatial[2] / s}, g, kFloat64, 2.0).set_requires_grad(true));
  }
  return out;
}

}  // namespace

TEST_CASE("ops: deep_supervision_weights for 3, 4, 5 outputs are nnU-Net v2's (1/2^i, last 0, normalised)") {
  // nnUNetTrainer._build_loss: w = [1/2^i], w[-1] = 0, w /= w.sum()
  auto close = [](const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-15));
  };
  close(ops::deep_supervision_weights(2), {1.0, 0.0});
  close(ops::deep_supervision_weights(3), {2.0 / 3, 1.0 / 3, 0.0});
  close(ops::deep_supervision_weights(4), {4.0 / 7, 2.0 / 7, 1.0 / 7, 0.0});
  close(ops::deep_supervision_weights(5), {8.0 / 15, 4.0 / 15, 2.0 / 15, 1.0 / 15, 0.0});
  CHECK(ops::deep_supervision_weights(5)[4] == 0.0);
  CHECK_THROWS_WITH_AS(ops::deep_supervision_weights(1), doctest::Contains("at least 2 outputs"), Error);
}

TEST_CASE("ops: downsample_labels_nearest int64 (1, 4, 4, 4) by 2 and 4 takes voxel s*o + s/2 of each block") {
  // label = 16 z + 4 y + x, so each output names the voxel it took.
  std::vector<int64_t> v(64);
  for (int64_t i = 0; i < 64; ++i) v[i] = i;
  const Tensor t = Tensor::from_labels(v, {1, 4, 4, 4});
  // s = 2: voxels (1 or 3) on each axis, as torch interpolate(mode='nearest-exact') and
  // nnU-Net's order-0 resize: floor((o + 0.5) * 2) = 2 o + 1.
  const Tensor d2 = ops::downsample_labels_nearest(t, 2);
  CHECK(d2.shape() == Shape{1, 2, 2, 2});
  CHECK(d2.dtype() == kInt64);
  CHECK(labels_of(d2) == std::vector<int64_t>{16 * 1 + 4 * 1 + 1, 16 * 1 + 4 * 1 + 3, 16 * 1 + 4 * 3 + 1, 16 * 1 + 4 * 3 + 3,
                                              16 * 3 + 4 * 1 + 1, 16 * 3 + 4 * 1 + 3, 16 * 3 + 4 * 3 + 1, 16 * 3 + 4 * 3 + 3});
  // s = 4: floor(0.5 * 4) = 2 on each axis. Both checked against scipy 1.10 (skimage's order-0 resize):
  //   /usr/bin/python3 -c "import numpy as np, scipy.ndimage as nd; a = np.arange(64.).reshape(4, 4, 4);
  //     print(nd.zoom(a, 0.5, order=0, grid_mode=True, mode='nearest').ravel(), nd.zoom(a, 0.25, order=0, grid_mode=True, mode='nearest'))"
  //   -> [21 23 29 31 53 55 61 63] [[[42]]]
  const Tensor d4 = ops::downsample_labels_nearest(t, 4);
  CHECK(d4.shape() == Shape{1, 1, 1, 1});
  CHECK(labels_of(d4) == std::vector<int64_t>{16 * 2 + 4 * 2 + 2});
  CHECK(labels_of(ops::downsample_labels_nearest(t, 1)) == v);
  // A non-cubic batch of 2: (2, 2, 4, 6) by 2 takes z 1, y {1, 3}, x {1, 3, 5}, per sample.
  std::vector<int64_t> u(96);
  for (int64_t i = 0; i < 96; ++i) u[i] = i;
  const Tensor d = ops::downsample_labels_nearest(Tensor::from_labels(u, {2, 2, 4, 6}), 2);
  CHECK(d.shape() == Shape{2, 1, 2, 3});
  CHECK(labels_of(d) == std::vector<int64_t>{31, 33, 35, 43, 45, 47, 79, 81, 83, 91, 93, 95});
  CHECK_THROWS_WITH_AS(ops::downsample_labels_nearest(t, 3), doctest::Contains("not divisible by the scale 3"), Error);
  CHECK_THROWS_WITH_AS(ops::downsample_labels_nearest(Tensor::zeros({1, 4, 4, 4}), 2), doctest::Contains("int64"), Error);
}

TEST_CASE("ops: deep_supervision_loss float64 4 outputs (2, 3, 8, 8, 8) = sum of weighted segmentation_loss; the last gets no gradient") {
  Generator g(5);
  const Tensor t = random_labels({2, 8, 8, 8}, 3, g);
  std::vector<Tensor> logits = pyramid(2, 3, {8, 8, 8}, 4, g);
  Tensor L = ops::deep_supervision_loss(logits, t);
  CHECK(L.dim() == 0);
  const std::vector<double> w = ops::deep_supervision_weights(4);
  double expect = 0;
  for (size_t i = 0; i < 3; ++i)
    expect += w[i] * ops::segmentation_loss(logits[i], ops::downsample_labels_nearest(t, int64_t{1} << i)).item();
  CHECK(L.item() == doctest::Approx(expect).epsilon(1e-14));
  L.backward();
  for (size_t i = 0; i < 3; ++i) CHECK(logits[i].grad().defined());
  CHECK_FALSE(logits[3].grad().defined());  // weight 0: not evaluated
}

TEST_CASE("ops: deep_supervision_loss float64 gradcheck, 3 outputs (1, 2, 4, 4, 8)") {
  Generator g(6);
  const Tensor t = random_labels({1, 4, 4, 8}, 2, g);
  std::vector<Tensor> logits = pyramid(1, 2, {4, 4, 8}, 3, g);
  logits[2].set_requires_grad(false);  // weight 0: it has no gradient to check
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return ops::deep_supervision_loss(in, t); }, logits);
  CHECK_MESSAGE(r.ok, r.report);
}

TEST_CASE("ops: deep_supervision_loss rejects one output, a wrong pyramid shape and a float target") {
  Generator g(7);
  const Tensor t = random_labels({1, 8, 8, 8}, 3, g);
  std::vector<Tensor> logits = pyramid(1, 3, {8, 8, 8}, 3, g);
  CHECK_THROWS_WITH_AS(ops::deep_supervision_loss({logits[0]}, t), doctest::Contains("at least 2 outputs"), Error);
  CHECK_THROWS_WITH_AS(ops::deep_supervision_loss({logits[0], logits[2]}, t),
                       doctest::Contains("logits[1] [1, 3, 2, 2, 2] for target [1, 8, 8, 8]; expected (N, C, D/2, H/2, W/2)"), Error);
  CHECK_THROWS_WITH_AS(ops::deep_supervision_loss(logits, Tensor::zeros({1, 8, 8, 8})), doctest::Contains("int64"), Error);
}
