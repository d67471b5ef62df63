// conv_halo_path_test.cpp - which conv3d shapes the halo kernels take (ops/conv/conv_halo_path.h), and
// the ForceImplicitGemm switch the CUDA tests use to compute their oracle. Host logic: runs without a GPU.
#include <doctest/doctest.h>

#include <thread>

#include "ops/conv/conv_halo_path.h"

using namespace halfgrad;
using halfgrad::ops::conv::ConvGeometry;
using halfgrad::ops::conv::ForceImplicitGemm;
using halfgrad::ops::conv::halo_conv_applies;
using halfgrad::ops::conv::make_geometry;

TEST_CASE("conv halo path: the U-Net's level-0 3x3x3 stride-1 padding-1 layers in FP16/BF16, nothing else") {
  // (cin, cout) -> fprop on halo? dgrad on halo? (fprop gathers cin, writes cout; dgrad the other way)
  struct Want {
    int64_t cin, cout;
    bool fprop, dgrad;
  };
  const Want cases[] = {
      {1, 16, true, false},  {16, 16, true, true}, {32, 16, true, true},  {16, 32, true, true},
      {32, 32, true, true},  {1, 32, true, false}, {16, 1, false, true},  {8, 16, false, false},
      {16, 64, false, false}, {64, 32, false, false}, {3, 16, false, false}, {16, 24, false, false},
  };
  for (const Want& c : cases) {
    CAPTURE(c.cin);
    CAPTURE(c.cout);
    const ConvGeometry g = make_geometry(2, c.cin, c.cout, 12, 10, 9, 3, 1, 1);
    for (Dtype dt : {kFloat16, kBFloat16}) {
      CHECK(halo_conv_applies(g, dt, /*dgrad=*/false) == c.fprop);
      CHECK(halo_conv_applies(g, dt, /*dgrad=*/true) == c.dgrad);
    }
    CHECK_FALSE(halo_conv_applies(g, kFloat32, false));  // FP32 runs on the FFMA kernels
    CHECK_FALSE(halo_conv_applies(g, kFloat32, true));
  }
  // Geometry: only kernel 3, stride 1, padding 1, dilation 1 on every axis.
  CHECK_FALSE(halo_conv_applies(make_geometry(2, 16, 16, 12, 10, 9, 3, 2, 1), kFloat16, false));  // stride 2
  CHECK_FALSE(halo_conv_applies(make_geometry(2, 16, 16, 12, 10, 9, 3, 1, 0), kFloat16, false));  // padding 0
  CHECK_FALSE(halo_conv_applies(make_geometry(2, 16, 16, 12, 10, 9, 1, 1, 0), kFloat16, false));  // pointwise
  ConvGeometry dilated = make_geometry(2, 16, 16, 12, 10, 9, 3, 1, 1);
  dilated.dil = {1, 2, 1};
  CHECK_FALSE(halo_conv_applies(dilated, kFloat16, false));
  ConvGeometry anisotropic = make_geometry(2, 16, 16, 12, 10, 9, 3, 1, 1);
  anisotropic.p = {0, 1, 1};
  CHECK_FALSE(halo_conv_applies(anisotropic, kFloat16, false));
}

TEST_CASE("conv halo path: ForceImplicitGemm turns the halo path off on its own thread only, and nests") {
  const ConvGeometry g = make_geometry(1, 16, 16, 8, 8, 8, 3, 1, 1);
  REQUIRE(halo_conv_applies(g, kFloat16, false));
  {
    ForceImplicitGemm outer;
    CHECK_FALSE(halo_conv_applies(g, kFloat16, false));
    CHECK_FALSE(halo_conv_applies(g, kFloat16, true));
    bool other_thread = false;
    std::thread t([&] { other_thread = halo_conv_applies(g, kFloat16, false); });
    t.join();
    CHECK(other_thread);  // thread-local: another thread still takes the halo path
    {
      ForceImplicitGemm inner;
      CHECK_FALSE(halo_conv_applies(g, kFloat16, false));
    }
    CHECK_FALSE(halo_conv_applies(g, kFloat16, false));  // the inner guard restored "forced", not "free"
  }
  CHECK(halo_conv_applies(g, kFloat16, false));
}
