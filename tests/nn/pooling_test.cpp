// The pooling and upsampling layers (nn/pooling.h, nn/upsample.h): libtorch-style options (one
// integer fills all axes, per-axis lists, stride defaulting to the kernel), that forward is the op,
// F.interpolate's output size for scale factors, extra_repr, and the constructor's errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "nn/pooling.h"
#include "nn/upsample.h"
#include "ops/pool/avg_pool3d.h"
#include "ops/pool/max_pool3d.h"
#include "ops/pool/upsample.h"
#include "tests/check_error.h"
#include "tests/golden.h"

using namespace halfgrad;
using namespace halfgrad::testing;

TEST_CASE("nn: MaxPool3dOptions(2) is (2, 2, 2); ({1, 2, 2}) pools in-plane; padding as torch.nn.MaxPool3d") {
  nn::MaxPool3d cubic(nn::MaxPool3dOptions(2));
  CHECK(cubic.options.kernel_size() == ExpandingArray<3>({2, 2, 2}));
  CHECK(cubic.options.stride() == ExpandingArray<3>(2));
  CHECK(cubic.extra_repr() == "kernel_size=2, stride=2, padding=0");
  nn::MaxPool3d plane(nn::MaxPool3dOptions({1, 2, 2}));
  CHECK(plane.options.stride() == ExpandingArray<3>({1, 2, 2}));
  CHECK(plane.extra_repr() == "kernel_size=(1, 2, 2), stride=(1, 2, 2), padding=0");
  Generator g(3);
  const Tensor x = Tensor::randn({1, 2, 3, 6, 8}, g);
  CHECK(plane.forward(x).shape() == Shape{1, 2, 3, 3, 4});
  nn::MaxPool3d padded(nn::MaxPool3dOptions(3).stride(2).padding(1));
  check_close(padded.forward(x), ops::max_pool3d(x, 3, 2, 1), 0, 0, "MaxPool3d == op");
  CHECK_THROWS_AS(nn::MaxPool3d(nn::MaxPool3dOptions(0)), Error);
  check_error([] { nn::MaxPool3d(nn::MaxPool3dOptions(2).stride({1, 0, 1})); }, {"MaxPool3d", "stride", "(1, 0, 1)"});
  check_error([] { nn::MaxPool3d(nn::MaxPool3dOptions(2).padding(2)); }, {"MaxPool3d", "padding", "kernel_size / 2"});
}

TEST_CASE("nn: AvgPool3d and AdaptiveAvgPool3d forward the op with their options") {
  Generator g(4);
  const Tensor x = Tensor::randn({2, 2, 5, 6, 7}, g);
  nn::AvgPool3d avg(nn::AvgPool3dOptions({1, 3, 3}).stride({1, 2, 2}).padding({0, 1, 1}).count_include_pad(false));
  CHECK(avg.options.ceil_mode() == false);
  check_close(avg.forward(x), ops::avg_pool3d(x, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, false, false), 0, 0, "AvgPool3d");
  CHECK(avg.extra_repr() == "kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), count_include_pad=False");
  nn::AvgPool3d by_default(nn::AvgPool3dOptions(2));
  CHECK(by_default.options.stride() == ExpandingArray<3>(2));
  CHECK(by_default.forward(x).shape() == Shape{2, 2, 2, 3, 3});
  nn::AdaptiveAvgPool3d global(nn::AdaptiveAvgPool3dOptions(1));
  CHECK(global.forward(x).shape() == Shape{2, 2, 1, 1, 1});
  check_close(global.forward(x), ops::adaptive_avg_pool3d(x, 1), 0, 0, "AdaptiveAvgPool3d");
  CHECK(nn::AdaptiveAvgPool3d(nn::AdaptiveAvgPool3dOptions({2, 3, 4})).extra_repr() == "output_size=(2, 3, 4)");
  check_error([] { nn::AvgPool3d(nn::AvgPool3dOptions(2).divisor_override(0)); }, {"AvgPool3d", "divisor_override"});
  check_error([] { nn::AdaptiveAvgPool3d(nn::AdaptiveAvgPool3dOptions({1, 0, 1})); }, {"AdaptiveAvgPool3d", "(1, 0, 1)"});
}

TEST_CASE("nn: Upsample by scale_factor or size, nearest or trilinear, as torch.nn.Upsample") {
  Generator g(5);
  const Tensor x = Tensor::randn({1, 2, 3, 4, 5}, g);
  nn::Upsample up(nn::UpsampleOptions().scale_factor({2, 2, 2}).mode(nn::kTrilinear).align_corners(false));
  CHECK(up.extra_repr() == "scale_factor=(2, 2, 2), mode='trilinear', align_corners=False");
  check_close(up.forward(x), ops::upsample_trilinear3d(x, {6, 8, 10}, false, {2, 2, 2}), 0, 0, "trilinear x2");
  nn::Upsample near(nn::UpsampleOptions().scale_factor({1.5, 1, 2}));
  // F.interpolate's size floor(in * scale): (4, 4, 10); the coordinates use the scale itself.
  check_close(near.forward(x), ops::upsample_nearest3d(x, {4, 4, 10}, {1.5, 1, 2}), 0, 0, "nearest x(1.5, 1, 2)");
  nn::Upsample sized(nn::UpsampleOptions().size({7, 4, 3}).mode(nn::kTrilinear).align_corners(true));
  check_close(sized.forward(x), ops::upsample_trilinear3d(x, {7, 4, 3}, true), 0, 0, "trilinear size");
  CHECK(sized.extra_repr() == "size=(7, 4, 3), mode='trilinear', align_corners=True");

  check_error([] { nn::Upsample(nn::UpsampleOptions()); }, {"Upsample", "exactly one of size and scale_factor", "neither"});
  check_error([] { nn::Upsample(nn::UpsampleOptions().size({2, 2, 2}).scale_factor({2, 2, 2})); },
              {"Upsample", "both"});
  check_error([] { nn::Upsample(nn::UpsampleOptions().scale_factor({2, 2, 2}).align_corners(true)); },
              {"Upsample", "align_corners", "interpolating modes"});
  check_error([] { nn::Upsample(nn::UpsampleOptions().scale_factor({2, 2})); }, {"Upsample", "3 values"});
  check_error([] { nn::Upsample(nn::UpsampleOptions().scale_factor({0.1, 1, 1})).forward(Tensor::zeros({1, 1, 4, 4, 4})); },
              {"upsample_nearest3d", "output extent 0"});
}
