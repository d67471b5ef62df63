// NVTX ranges (core/nvtx.h): on when the CUDA toolkit's nvtx3 headers were found at build time;
// every op records a "backward <op>" range name on its tape node.
#include <doctest/doctest.h>

#include "autograd/node.h"
#include "core/nvtx.h"
#include "ops/conv/conv3d.h"
#include "ops/reduce/reduce.h"

using namespace halfgrad;

TEST_CASE("core: NVTX ranges nest around an op's forward and backward; nodes carry 'backward <op>'") {
#if defined(HALFGRAD_NVTX)
  CHECK(nvtx_enabled());
#else
  CHECK_FALSE(nvtx_enabled());
#endif
  Generator gen(0);
  Tensor x = Tensor::randn({1, 2, 4, 4, 4}, gen);
  Tensor w = Tensor::randn({3, 2, 3, 3, 3}, gen).set_requires_grad(true);
  NvtxRange outer("test step");
  Tensor y;
  {
    NvtxRange inner("forward");
    y = ops::conv3d(x, w, Tensor(), ops::Conv3dParams().padding(1));
  }
  REQUIRE(static_cast<bool>(y.grad_fn()));
  CHECK(y.grad_fn()->name == "conv3d");
  CHECK(y.grad_fn()->nvtx_name == (nvtx_enabled() ? "backward conv3d" : ""));
  ops::sum(y).backward();
  CHECK(w.grad().defined());
}
