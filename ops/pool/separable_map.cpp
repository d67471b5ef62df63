// separable_map.cpp - the CPU loop of separable_map.h, the table builder, and the op's autograd and
// CUDA dispatch. Parallel mapping (CPU): one (n, c) plane per loop iteration; every destination
// element is one gather over its taps, so the order of the sum is fixed by the tables alone.
#include "ops/pool/separable_map.h"

#include <limits>

#include "core/nvtx.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/pool/separable_map_cuda.h"
#endif

namespace halfgrad::ops::detail {

AxisMapBuilder::AxisMapBuilder(int64_t in, int64_t out) {
  HG_CHECK(in >= 1 && out >= 1 && in <= std::numeric_limits<int32_t>::max() &&
               out <= std::numeric_limits<int32_t>::max(),
           "separable map: axis extents must be in [1, 2^31), got input " << in << ", output " << out);
  fwd_.src = in;
  fwd_.dst = out;
}

void AxisMapBuilder::add(int64_t input_index, double weight) {
  HG_CHECK(input_index >= 0 && input_index < fwd_.src,
           "separable map: tap index " << input_index << " outside [0, " << fwd_.src << ")");
  fwd_.index.push_back(static_cast<int32_t>(input_index));
  fwd_.weight.push_back(weight);
}

void AxisMapBuilder::end_row() {
  HG_CHECK(static_cast<int64_t>(fwd_.begin.size()) <= fwd_.dst, "separable map: more rows than outputs");
  fwd_.begin.push_back(static_cast<int32_t>(fwd_.index.size()));
}

AxisMap AxisMapBuilder::finish() const {
  HG_CHECK(static_cast<int64_t>(fwd_.begin.size()) == fwd_.dst + 1,
           "separable map: " << fwd_.begin.size() - 1 << " rows ended for " << fwd_.dst << " outputs");
  AxisMap m;
  m.forward = fwd_;
  // The transpose by a counting sort over the forward taps in output order, so each input's taps
  // come out in increasing output order (the backward then sums in that order).
  AxisTaps& b = m.backward;
  b.src = fwd_.dst;
  b.dst = fwd_.src;
  const size_t taps = fwd_.index.size();
  std::vector<int32_t> count(static_cast<size_t>(b.dst) + 1, 0);
  for (int32_t i : fwd_.index) ++count[static_cast<size_t>(i) + 1];
  b.begin.assign(static_cast<size_t>(b.dst) + 1, 0);
  for (int64_t i = 0; i < b.dst; ++i) b.begin[i + 1] = b.begin[i] + count[i + 1];
  b.index.resize(taps);
  b.weight.resize(taps);
  std::vector<int32_t> fill(b.begin.begin(), b.begin.end() - 1);
  for (int64_t o = 0; o < fwd_.dst; ++o)
    for (int32_t t = fwd_.begin[o]; t < fwd_.begin[o + 1]; ++t) {
      const int32_t slot = fill[fwd_.index[t]]++;
      b.index[slot] = static_cast<int32_t>(o);
      b.weight[slot] = fwd_.weight[t];
    }
  return m;
}

namespace {

// dst (N, C, taps[*].dst) = the map of src (N, C, taps[*].src), both contiguous in compute dtype T.
template <typename T>
void apply_taps_cpu(const T* src, T* dst, int64_t planes, const std::array<const AxisTaps*, 3>& t) {
  const AxisTaps &td = *t[0], &th = *t[1], &tw = *t[2];
  const int64_t sh = th.src, sw = tw.src, src_vol = td.src * sh * sw;
  const int64_t dd = td.dst, dh = th.dst, dw = tw.dst, dst_vol = dd * dh * dw;
#pragma omp parallel for schedule(static) if (parallel_worth(planes * (src_vol + dst_vol)))
  for (int64_t p = 0; p < planes; ++p) {
    const T* s = src + p * src_vol;
    T* o = dst + p * dst_vol;
    for (int64_t a = 0; a < dd; ++a)
      for (int64_t b = 0; b < dh; ++b)
        for (int64_t c = 0; c < dw; ++c) {
          T acc = 0;
          for (int32_t i = td.begin[a]; i < td.begin[a + 1]; ++i)
            for (int32_t j = th.begin[b]; j < th.begin[b + 1]; ++j) {
              const T wij = static_cast<T>(td.weight[i]) * static_cast<T>(th.weight[j]);
              const T* row = s + (int64_t(td.index[i]) * sh + th.index[j]) * sw;
              for (int32_t k = tw.begin[c]; k < tw.begin[c + 1]; ++k)
                acc += wij * static_cast<T>(tw.weight[k]) * row[tw.index[k]];
            }
          o[(a * dh + b) * dw + c] = acc;
        }
  }
}

Tensor apply_cpu(const Tensor& src, const std::array<const AxisTaps*, 3>& t, Dtype out_dtype) {
  const Shape& s = src.shape();
  const Tensor cs = to_compute(src);
  Tensor dst = Tensor::empty({s[0], s[1], t[0]->dst, t[1]->dst, t[2]->dst}, cs.dtype());
  dispatch_compute(cs.dtype(), [&](auto tag) {
    using T = decltype(tag);
    apply_taps_cpu<T>(cs.data<T>(), dst.data<T>(), s[0] * s[1], t);
  });
  return from_compute(dst, out_dtype);
}

std::array<const AxisTaps*, 3> forward_taps(const VolumeMap& m) { return {&m[0].forward, &m[1].forward, &m[2].forward}; }
std::array<const AxisTaps*, 3> backward_taps(const VolumeMap& m) {
  return {&m[0].backward, &m[1].backward, &m[2].backward};
}

}  // namespace

Tensor apply_volume_map(const char* name, const Tensor& x, std::shared_ptr<const VolumeMap> map) {
  NvtxRange nvtx_range(name);
  check_floating_tensor(name, "input", x);
  check_dim(name, "input", x, 5, "(N, C, D, H, W)");
  const Shape& xs = x.shape();
  const VolumeMap& m = *map;
  HG_CHECK(xs[2] == m[0].forward.src && xs[3] == m[1].forward.src && xs[4] == m[2].forward.src,
           name << ": input " << shape_str(xs) << " does not have the spatial extents (" << m[0].forward.src << ", "
                << m[1].forward.src << ", " << m[2].forward.src << ") its index tables were built for");
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) {
    std::shared_ptr<const cuda::DeviceVolumeMap> dev = cuda::upload_volume_map(name, m);
    Tensor y = cuda::apply_volume_taps(name, x, dev->forward);
    return autograd::record(name, y, {x}, {},
                            [name, dev, dtype = x.dtype(), format = x.memory_format()](const Tensor& gy) {
                              Tensor g = gy.copy_to(Device::CUDA);
                              if (g.dtype() != dtype) g = g.cast_copy(dtype);
                              return std::vector<Tensor>{cuda::apply_volume_taps(name, g.format_copy(format), dev->backward)};
                            });
  }
#endif
  Tensor y = apply_cpu(x, forward_taps(m), x.dtype());
  return autograd::record(name, y, {x}, {}, [name, map, dtype = x.dtype()](const Tensor& gy) {
    HG_CHECK(gy.dim() == 5 && gy.shape()[2] == (*map)[0].forward.dst && gy.shape()[3] == (*map)[1].forward.dst &&
                 gy.shape()[4] == (*map)[2].forward.dst,
             name << ": backward got a gradient of shape " << shape_str(gy.shape()));
    return std::vector<Tensor>{apply_cpu(gy, backward_taps(*map), dtype)};
  });
}

}  // namespace halfgrad::ops::detail
