// conv_halo_path.cpp - the predicate and the test switch of conv_halo_path.h (plain C++, so the tests
// compile and link without CUDA too).
#include "ops/conv/conv_halo_path.h"

namespace halfgrad::ops::conv {
namespace {

thread_local bool force_implicit_gemm = false;

// The channel counts conv3d_fprop_halo_cuda.cu instantiates: gathered (1 = direct kernel) and output.
bool halo_gathered_channels(int64_t c) { return c == 1 || c == 16 || c == 32; }
bool halo_output_channels(int64_t c) { return c == 16 || c == 32; }

}  // namespace

bool halo_conv_applies(const ConvGeometry& g, Dtype dt, bool dgrad) {
  if (force_implicit_gemm) return false;
  if (dt != kFloat16 && dt != kBFloat16) return false;
  if (!g.cubic(3, 1) || g.p != Axes{1, 1, 1}) return false;
  if (g.od != g.d || g.oh != g.h || g.ow != g.w) return false;  // implied by the above; checked, not assumed
  const int64_t gathered = dgrad ? g.cout : g.cin, out = dgrad ? g.cin : g.cout;
  return halo_gathered_channels(gathered) && halo_output_channels(out);
}

ForceImplicitGemm::ForceImplicitGemm() : previous_(force_implicit_gemm) { force_implicit_gemm = true; }
ForceImplicitGemm::~ForceImplicitGemm() { force_implicit_gemm = previous_; }

}  // namespace halfgrad::ops::conv
