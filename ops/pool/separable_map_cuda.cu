// separable_map_cuda.cu - the separable linear map of separable_map.h on the GPU (avg_pool3d,
// adaptive_avg_pool3d, upsample nearest / trilinear; forward and backward alike).
//
// Math: dst[n, c, a, b, e] = sum over taps i of row a (axis D), j of row b (H), k of row e (W) of
// (wd_i * wh_j) * ww_k * src[n, c, d_i, h_j, w_k]; the forward uses the maps' forward tables, the
// backward the transposed ones (dx = M^T dy). Same tables, same tap order and the same products as
// the CPU loop in separable_map.cpp.
// Shapes and layouts: src (N, C, Ds, Hs, Ws), dst (N, C, Dd, Hd, Wd), both NCDHW or both NDHWC (dst
// keeps src's format). Tables: per axis begin (dst + 1) and index (taps) int32, weight (taps) float,
// in one device allocation.
// Parallel mapping: one thread per destination element in its physical order (grid-stride), so the
// threads of a warp write neighbouring elements: neighbouring w (NCDHW) or channels (NDHWC, where their
// reads are neighbouring channels of the same taps, coalesced). Gathers only: no atomics,
// deterministic. Work per element = the product of the three rows' tap counts (8 for trilinear, k^3
// for a pool window); the adaptive global pool (output 1) gives one thread a whole plane: fine for
// the small bottleneck volumes it is used on, and the place to add a block reduction if it is not.
// Precision: FP16 widened to FP32, FP32 sums, rounded once. Indices: element counts < 2^31 (checked).
#include "core/cuda/check.cuh"
#include "core/cuda/tensor_access.cuh"
#include "ops/pool/separable_map_cuda.h"

#include <cstring>
#include <vector>

namespace halfgrad::cuda {
namespace {

constexpr int kThreads = 256;

struct Geometry {
  DeviceAxisTaps ax[3];
  int64_t C;
  bool channels_last;
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    separable_map_kernel(const T* __restrict__ src, T* __restrict__ dst, Geometry g, int64_t total) {
  const DeviceAxisTaps &td = g.ax[0], &th = g.ax[1], &tw = g.ax[2];
  const int64_t Dd = td.dst, Hd = th.dst, Wd = tw.dst;
  const int64_t Ds = td.src, Hs = th.src, Ws = tw.src;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = o, c = 0;
    if (g.channels_last) {
      c = t % g.C;
      t /= g.C;
    }
    const int64_t e = t % Wd;
    t /= Wd;
    const int64_t b = t % Hd;
    t /= Hd;
    const int64_t a = t % Dd;
    const int64_t q = t / Dd;  // NCDHW: the (n, c) plane; NDHWC: n
    // src offset of (d, h, w): NCDHW q*S + s; NDHWC (q*S + s)*C + c, with s = (d*Hs + h)*Ws + w.
    const int64_t S = Ds * Hs * Ws;
    const T* base = g.channels_last ? src + q * S * g.C + c : src + q * S;
    const int64_t step = g.channels_last ? g.C : 1;
    float acc = 0.f;
    for (int32_t i = td.begin[a]; i < td.begin[a + 1]; ++i)
      for (int32_t j = th.begin[b]; j < th.begin[b + 1]; ++j) {
        const float wij = td.weight[i] * th.weight[j];
        const int64_t row = (int64_t(td.index[i]) * Hs + th.index[j]) * Ws;
        for (int32_t k = tw.begin[e]; k < tw.begin[e + 1]; ++k)
          acc += wij * tw.weight[k] * to_float(base[(row + tw.index[k]) * step]);
      }
    dst[o] = from_float<T>(acc);
  }
}

}  // namespace

std::shared_ptr<const DeviceVolumeMap> upload_volume_map(const char* name, const ops::detail::VolumeMap& map) {
  // Layout of the one buffer: all int32 tables first (forward then backward, axis by axis: begin,
  // index), then all float weights in the same order.
  std::vector<int32_t> ints;
  std::vector<float> weights;
  struct Offsets {
    size_t begin, index, weight;
  };
  std::array<Offsets, 6> off{};
  for (int dir = 0; dir < 2; ++dir)
    for (int a = 0; a < 3; ++a) {
      const ops::detail::AxisTaps& t = dir == 0 ? map[a].forward : map[a].backward;
      Offsets& o = off[dir * 3 + a];
      o.begin = ints.size();
      ints.insert(ints.end(), t.begin.begin(), t.begin.end());
      o.index = ints.size();
      ints.insert(ints.end(), t.index.begin(), t.index.end());
      o.weight = weights.size();
      for (double w : t.weight) weights.push_back(static_cast<float>(w));
    }
  const size_t int_bytes = (ints.size() * sizeof(int32_t) + 15) / 16 * 16;  // weights start 16-byte aligned
  const size_t nbytes = int_bytes + weights.size() * sizeof(float);
  std::vector<char> host(nbytes, 0);
  std::memcpy(host.data(), ints.data(), ints.size() * sizeof(int32_t));
  if (!weights.empty()) std::memcpy(host.data() + int_bytes, weights.data(), weights.size() * sizeof(float));
  auto dev = std::make_shared<DeviceVolumeMap>();
  char* mem = static_cast<char*>(allocate(nbytes, name));
  dev->memory = std::shared_ptr<void>(mem, [nbytes](void* p) { release(p, nbytes); });
  copy_h2d(mem, host.data(), nbytes);
  const int32_t* dint = reinterpret_cast<const int32_t*>(mem);
  const float* dw = reinterpret_cast<const float*>(mem + int_bytes);
  for (int dir = 0; dir < 2; ++dir)
    for (int a = 0; a < 3; ++a) {
      const ops::detail::AxisTaps& t = dir == 0 ? map[a].forward : map[a].backward;
      const Offsets& o = off[dir * 3 + a];
      DeviceAxisTaps& d = dir == 0 ? dev->forward[a] : dev->backward[a];
      d.begin = dint + o.begin;
      d.index = dint + o.index;
      d.weight = dw + o.weight;
      d.src = t.src;
      d.dst = t.dst;
    }
  return dev;
}

Tensor apply_volume_taps(const char* name, const Tensor& src, const std::array<DeviceAxisTaps, 3>& taps) {
  HG_CHECK(src.defined() && src.is_cuda() && src.dim() == 5, name << ": CUDA path needs a 5-D CUDA tensor");
  const Shape& s = src.shape();
  HG_CHECK(s[2] == taps[0].src && s[3] == taps[1].src && s[4] == taps[2].src,
           name << ": tensor " << shape_str(s) << " does not match the index tables' extents (" << taps[0].src << ", "
                << taps[1].src << ", " << taps[2].src << ")");
  const Shape ds = {s[0], s[1], taps[0].dst, taps[1].dst, taps[2].dst};
  HG_CHECK(shape_numel(s) < (int64_t{1} << 31) && shape_numel(ds) < (int64_t{1} << 31),
           name << ": the CUDA kernel indexes with 32-bit tables; " << shape_str(s) << " -> " << shape_str(ds)
                << " has >= 2^31 elements: split the batch");
  Tensor dst = Tensor::empty(ds, src.dtype(), Device::CUDA, src.memory_format());
  if (dst.numel() == 0) return dst;
  Geometry g{{taps[0], taps[1], taps[2]}, s[1], src.is_channels_last()};
  dispatch_float(name, "volumes", src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    separable_map_kernel<T><<<grid_for(dst.numel(), kThreads), kThreads, 0, stream()>>>(dev<T>(src), dev<T>(dst), g,
                                                                                        dst.numel());
    HG_CUDA_LAUNCH_CHECK(name);
  });
  return dst;
}

}  // namespace halfgrad::cuda
