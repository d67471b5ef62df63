// separable_map.h - the one engine behind avg_pool3d, adaptive_avg_pool3d and upsample (nearest and
// trilinear): each is a linear map of a volume that factors into one sparse matrix per spatial axis,
//
//   y[p, a, b, c] = sum over taps (i, wd) of row a of Md, (j, wh) of row b of Mh, (k, ww) of row c of Mw
//                   of  (wd * wh) * ww * x[p, i, j, k]                              p = (n, c) plane
//
// and its backward is the same sum with the transposed matrices (dx = Md^T Mh^T Mw^T dy). A pooling
// window that is a box, a clipped box (padding, count_include_pad=False: the divisor is the product of
// the per-axis counts), an adaptive bin or a linear-interpolation stencil are all products of per-axis
// weights, so one CPU loop and one CUDA kernel (separable_map_cuda.cu) serve every op, forward and
// backward, and both are gathers: no atomics, deterministic, each output summed in tap order.
// Internal to ops/pool/: the public ops are in avg_pool3d.h and upsample.h.
//
// Tables: built on the host by the op (in float arithmetic for float32 / float16 inputs and in double
// for float64, as PyTorch computes its interpolation coefficients in the input's accumulate type), and
// shared by the CPU loop and the CUDA kernel (uploaded once per forward, kept for backward), so both
// devices read the same indices and weights.
// Precision: sums in FP32 for float32 / float16 (FP16 rounded once), in double for float64.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::ops::detail {

/// One axis' sparse matrix in CSR form: destination index o (0..dst-1) reads the taps
/// [begin[o], begin[o + 1]) of (index, weight), in order.
struct AxisTaps {
  int64_t src = 0, dst = 0;
  std::vector<int32_t> begin{0};  // dst + 1 entries
  std::vector<int32_t> index;     // source index of each tap
  std::vector<double> weight;     // its weight
};

/// One axis' map, both ways: forward (dst = output extent, src = input extent) and its transpose for
/// backward (dst = input, src = output; each input's taps in increasing output order).
struct AxisMap {
  AxisTaps forward, backward;
};

/// Builds an AxisMap row by row: for each output o in order, add() its taps, then end_row().
class AxisMapBuilder {
 public:
  AxisMapBuilder(int64_t in, int64_t out);
  void add(int64_t input_index, double weight);
  void end_row();
  /// The finished map (checks that every output row was ended).
  AxisMap finish() const;

 private:
  AxisTaps fwd_;
};

/// The three spatial axes (D, H, W) of a 5-D map.
using VolumeMap = std::array<AxisMap, 3>;

/// The differentiable op: y (N, C, out_d, out_h, out_w) = map(x), x (N, C, in_d, in_h, in_w) float32 /
/// float16 / bfloat16 / float64 on the CPU (NCDHW), float32 / float16 / bfloat16 on CUDA (NCDHW or NDHWC; y and dx keep x's
/// memory format). y has x's dtype. `name` is the tape node's name. Throws halfgrad::Error naming
/// `name` when x's spatial extents are not the map's input extents.
Tensor apply_volume_map(const char* name, const Tensor& x, std::shared_ptr<const VolumeMap> map);

}  // namespace halfgrad::ops::detail
