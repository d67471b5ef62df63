// Tests of io/preprocess.h: the reference's prep() semantics exactly (z-score, pad at the end, crop
// from the start), and seeded, aligned patches and flips.
#include "io/preprocess.h"

#include <cmath>
#include <numeric>

#include "tests/io/io_test_util.h"

using namespace halfgrad;
using namespace halfgrad::io;
using halfgrad::io::test::check_mentions;
using halfgrad::io::test::error_message;

namespace {

// Image and label whose voxel i both hold i: any misalignment between the two shows as image != label.
Sample indexed_sample(const Shape& s) {
  const int64_t n = shape_numel(s);
  std::vector<float> img(n);
  std::vector<int64_t> lab(n);
  std::iota(img.begin(), img.end(), 0.0f);
  std::iota(lab.begin(), lab.end(), int64_t{0});
  return Sample{Tensor::from_vector(img, s), Tensor::from_labels(lab, s)};
}

void check_aligned(const Sample& s) {
  const std::vector<double> img = s.image.to_double_vector(), lab = s.label.to_double_vector();
  CHECK(img == lab);
}

}  // namespace

TEST_CASE("io preprocess: zscore float32 matches (x - mean) / (std + 1e-8), population std") {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 6, 8}, {1, 2, 3});
  const double mean = 4.0, std = std::sqrt((9 + 4 + 1 + 0 + 4 + 16) / 6.0);
  const std::vector<float> got = zscore(x).to_float_vector();
  const std::vector<float> in = x.to_float_vector();
  for (size_t i = 0; i < in.size(); ++i) CHECK(got[i] == doctest::Approx((in[i] - mean) / (std + 1e-8)).epsilon(1e-6));
  CHECK(zscore(Tensor::full({2, 2, 2}, 5.0)).to_float_vector() == std::vector<float>(8, 0.0f));
  check_mentions(error_message([] { zscore(Tensor::zeros({2, 2, 2}, kInt64)); }), {"zscore", "int64", "expected float32"});
}

TEST_CASE("io preprocess: pad_or_crop float32/int64 equals numpy X[:s0,:s1,:s2] = img[:s0,:s1,:s2]") {
  // (from, to): pad every axis (hippocampus size -> 48x64x48), crop every axis, and mixed.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{35, 51, 35}, {48, 64, 48}}, {{50, 70, 52}, {48, 64, 48}}, {{3, 5, 2}, {4, 3, 3}}, {{1, 1, 1}, {2, 1, 3}}};
  for (const auto& [from, to] : cases) {
    CAPTURE(shape_str(from));
    CAPTURE(shape_str(to));
    const Sample in = indexed_sample(from);
    const Tensor img = pad_or_crop(in.image, to), lab = pad_or_crop(in.label, to);
    REQUIRE(img.shape() == to);
    REQUIRE(lab.shape() == to);
    CHECK(lab.dtype() == kInt64);
    const float* got = img.data<float>();
    const int64_t* got_lab = lab.data<int64_t>();
    int64_t mismatches = 0;
    for (int64_t z = 0; z < to[0]; ++z)
      for (int64_t y = 0; y < to[1]; ++y)
        for (int64_t x = 0; x < to[2]; ++x) {
          const bool inside = z < from[0] && y < from[1] && x < from[2];
          const double want = inside ? static_cast<double>((z * from[1] + y) * from[2] + x) : 0.0;
          const int64_t o = (z * to[1] + y) * to[2] + x;
          mismatches += got[o] != want || static_cast<double>(got_lab[o]) != want;
        }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("io preprocess: prepare_fixed_shape z-scores before padding, so the padding is 0") {
  Generator gen(1);
  const Tensor img = Tensor::uniform({3, 4, 5}, 10.0, 20.0, gen);
  const Tensor lab = Tensor::full({3, 4, 5}, 2.0, kInt64);
  const Sample s = prepare_fixed_shape(img, lab, {4, 4, 6});
  const Tensor z = zscore(img);
  for (int64_t d = 0; d < 4; ++d)
    for (int64_t x = 0; x < 6; ++x) {
      const bool inside = d < 3 && x < 5;
      const int64_t o = (d * 4 + 1) * 6 + x;  // row y = 1
      CHECK(s.image.item_at(o) == (inside ? z.item_at((d * 4 + 1) * 5 + x) : 0.0));
      CHECK(s.label.item_at(o) == (inside ? 2.0 : 0.0));
    }
  check_mentions(error_message([&] { prepare_fixed_shape(img, Tensor::zeros({3, 4, 4}, kInt64), {4, 4, 4}); }),
                 {"prepare_fixed_shape", "[3, 4, 5]", "[3, 4, 4]", "expected equal shapes"});
}

TEST_CASE("io preprocess: extract_region zero-fills outside the volume, any start") {
  const Sample s = indexed_sample({2, 3, 4});
  const Tensor r = extract_region(s.image, {-1, 1, 2}, {3, 3, 3});
  for (int64_t z = 0; z < 3; ++z)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t x = 0; x < 3; ++x) {
        const int64_t sz = z - 1, sy = y + 1, sx = x + 2;
        const bool inside = sz >= 0 && sz < 2 && sy < 3 && sx < 4;
        CHECK(r.item_at((z * 3 + y) * 3 + x) == (inside ? static_cast<double>((sz * 3 + sy) * 4 + sx) : 0.0));
      }
  check_mentions(error_message([&] { extract_region(s.image, {0, 0, 0}, {2, 2}); }),
                 {"extract_region", "[2, 2]", "expected 3 positive extents"});
  check_mentions(error_message([&] { extract_region(Tensor::zeros({2, 2, 2}, kFloat64), {0, 0, 0}, {1, 1, 1}); }),
                 {"extract_region", "float64", "expected float32 (image) or int64 (labels)"});
}

TEST_CASE("io preprocess: random_patch float32/int64 is seeded, aligned, inside the volume") {
  const Sample s = indexed_sample({10, 12, 14});
  const PatchOptions opts = PatchOptions().with_size({4, 5, 6});
  Generator a(42), b(42);
  for (int draw = 0; draw < 20; ++draw) {
    const Sample p = random_patch(s, opts, a), q = random_patch(s, opts, b);
    CHECK(p.image.to_float_vector() == q.image.to_float_vector());
    check_aligned(p);
    REQUIRE(p.image.shape() == Shape{4, 5, 6});
    // Voxel 0 of the patch names its start; the rest follow from it (no zero padding needed here).
    const auto start = static_cast<int64_t>(p.image.item_at(0));
    const int64_t z0 = start / (12 * 14), y0 = (start / 14) % 12, x0 = start % 14;
    CHECK((z0 <= 6 && y0 <= 7 && x0 <= 8));
    CHECK(p.image.to_float_vector() == extract_region(s.image, {z0, y0, x0}, {4, 5, 6}).to_float_vector());
  }
}

TEST_CASE("io preprocess: random_patch with foreground_prob 1 always holds the foreground voxel") {
  Tensor label = Tensor::zeros({20, 20, 20}, kInt64);
  for (const int64_t corner : std::vector<int64_t>{0, (19 * 20 + 19) * 20 + 19, (10 * 20 + 3) * 20 + 17}) {
    label.zero_();
    label.data<int64_t>()[corner] = 2;  // one foreground voxel, at a corner or off-centre
    const Sample s{Tensor::zeros({20, 20, 20}), label};
    Generator gen(5);
    for (int draw = 0; draw < 10; ++draw) {
      const Sample p = random_patch(s, PatchOptions().with_size({8, 8, 8}).with_foreground_prob(1.0), gen);
      double sum = 0;
      for (double v : p.label.to_double_vector()) sum += v;
      CHECK(sum == 2.0);
    }
  }
  check_mentions(error_message([&] {
                   Generator gen(0);
                   random_patch(indexed_sample({4, 4, 4}), PatchOptions().with_size({2, 2, 2}).with_foreground_prob(1.5), gen);
                 }),
                 {"random_patch", "1.5", "expected a probability in [0, 1]"});
}

TEST_CASE("io preprocess: random_patch larger than the volume starts at 0 and pads with zeros") {
  const Sample s = indexed_sample({3, 4, 5});
  Generator gen(9);
  for (const double fg : {0.0, 1.0}) {
    const Sample p = random_patch(s, PatchOptions().with_size({4, 4, 8}).with_foreground_prob(fg), gen);
    CHECK(p.image.to_float_vector() == pad_or_crop(s.image, {4, 4, 8}).to_float_vector());
    check_aligned(p);
  }
}

TEST_CASE("io preprocess: flip reverses one axis; random_flip is seeded and keeps image and label aligned") {
  const Sample s = indexed_sample({2, 3, 4});
  CHECK(flip(s.image, 0).item_at(0) == 12.0);  // (1, 0, 0)
  CHECK(flip(s.image, 1).item_at(0) == 8.0);   // (0, 2, 0)
  CHECK(flip(s.image, 2).item_at(0) == 3.0);   // (0, 0, 3)
  CHECK(flip(flip(s.label, 1), 1).to_double_vector() == s.label.to_double_vector());
  check_mentions(error_message([&] { flip(s.image, 3); }), {"flip", "axis 3", "expected 0 (z), 1 (y) or 2 (x)"});

  Generator a(11), b(11);
  for (int draw = 0; draw < 16; ++draw) {
    const Sample p = random_flip(s, a), q = random_flip(s, b);
    CHECK(p.image.to_float_vector() == q.image.to_float_vector());
    check_aligned(p);
  }
  Generator g(0);
  const Sample all = random_flip(s, g, 1.0);
  CHECK(all.image.to_float_vector() == flip(flip(flip(s.image, 0), 1), 2).to_float_vector());
  CHECK(random_flip(s, g, 0.0).image.to_float_vector() == s.image.to_float_vector());
}

TEST_CASE("io preprocess: downsample by stride, mean and majority, extents ceil(n / f)") {
  const Sample s = indexed_sample({3, 4, 5});
  const Tensor st = downsample_stride(s.label, 2);
  REQUIRE(st.shape() == Shape{2, 2, 3});
  CHECK(st.item_at(0) == 0.0);
  CHECK(st.item_at(5) == static_cast<double>((0 * 4 + 2) * 5 + 4));   // (0, 1, 2) <- (0, 2, 4)
  CHECK(st.item_at(11) == static_cast<double>((2 * 4 + 2) * 5 + 4));  // (1, 1, 2) <- (2, 2, 4)

  const Tensor mean = downsample_mean(s.image, 2);
  REQUIRE(mean.shape() == Shape{2, 2, 3});
  // Block (0, 0, 0): z, y, x in {0, 1}: mean of (z*20 + y*5 + x) = 10 + 2.5 + 0.5.
  CHECK(mean.item_at(0) == doctest::Approx(13.0));
  // Block (1, 1, 2): only z = 2, y in {2, 3}, x = 4: mean of 54 and 59.
  CHECK(mean.item_at(11) == doctest::Approx(56.5));

  // Majority: 5 of 8 voxels are 3; a 4-4 tie goes to the smaller label.
  const int64_t block0[8] = {3, 3, 1, 3, 3, 1, 1, 3}, block1[8] = {7, 2, 7, 2, 2, 7, 2, 7};
  Tensor lab = Tensor::zeros({2, 2, 4}, kInt64);
  for (int64_t z = 0; z < 2; ++z)
    for (int64_t y = 0; y < 2; ++y)
      for (int64_t x = 0; x < 4; ++x) {
        const int64_t j = (z * 2 + y) * 2 + x % 2;  // voxel number within its 2x2x2 block
        lab.data<int64_t>()[(z * 2 + y) * 4 + x] = x < 2 ? block0[j] : block1[j];
      }
  const Tensor maj = downsample_majority(lab, 2);
  REQUIRE(maj.shape() == Shape{1, 1, 2});
  CHECK(maj.to_double_vector() == std::vector<double>{3, 2});
  check_mentions(error_message([&] { downsample_mean(s.image, 0); }), {"downsample_mean", "factor 0", "expected an integer >= 1"});
}

TEST_CASE("io preprocess: make_batch stacks to (B,1,D,H,W) float32 and (B,D,H,W) int64") {
  const Sample a = indexed_sample({2, 3, 4});
  Sample b{zscore(a.image), Tensor::zeros({2, 3, 4}, kInt64)};
  const Batch batch = make_batch({a, b});
  CHECK(batch.image.shape() == Shape{2, 1, 2, 3, 4});
  CHECK(batch.label.shape() == Shape{2, 2, 3, 4});
  CHECK(batch.image.item_at(24 + 5) == b.image.item_at(5));
  CHECK(batch.label.item_at(7) == 7.0);
  CHECK(batch.label.item_at(24 + 7) == 0.0);
  const Sample c = indexed_sample({2, 3, 5});
  check_mentions(error_message([&] { make_batch({a, c}); }),
                 {"make_batch: sample 1", "[2, 3, 5]", "[2, 3, 4]", "expected equal shapes"});
  check_mentions(error_message([&] { make_batch({a, Sample{a.image, a.image}}); }),
                 {"make_batch: sample 1", "expected float32 image and int64 label"});
}
