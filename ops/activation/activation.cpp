// activation.cpp - relu, leaky_relu and cat on the CPU (math and errors in activation.h).
//
// relu / leaky_relu run in the input's dtype (they are on no autocast list): one vectorised loop in
// float (Float32, Float16 via an FP32 copy, the result rounded to half once; relu is exact in half)
// or double (Float64), parallel over elements. relu saves its output (y > 0 exactly where x > 0, and y
// is NaN where x is), as PyTorch's threshold_backward does; leaky_relu saves its input.
// cat moves bytes: the output is the outer-index-major interleave of the inputs' contiguous blocks
// (one memcpy per (outer index, input)), parallel over those copies; its backward slices dy the same
// way. Under autocast it promotes: every input is cast (differentiably) to the widest input dtype.
// CUDA tensors (either memory format) go to activation_cuda.h: flat loops for the activations, and
// for cat the same block geometry taken in the buffers' physical order (parts are first converted,
// differentiably, to the memory format of the first one).
#include "ops/activation/activation.h"

#include <algorithm>
#include <cstring>

#include "core/nvtx.h"
#include "ops/activation/pointwise_cpu.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/activation/activation_cuda.h"
#endif

namespace halfgrad::ops {

Tensor relu(const Tensor& x) {
  NvtxRange nvtx_range("relu");
  check_floating_tensor("relu", "input", x);
  // `v < 0 ? 0 : v` keeps NaN (as torch.relu does). The backward is PyTorch's threshold_backward on
  // the output, dx = y <= 0 ? 0 : dy: 0 at x <= 0 (also for an infinite or NaN dy there), and dy
  // where y is NaN (NaN <= 0 is false), so a NaN input passes its gradient on as in PyTorch.
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) {
    Tensor y = cuda::leaky_relu_forward("relu", x, 0.0);
    return autograd::record("relu", y, {x}, {autograd::Save::output()}, [y = y.detach()](const Tensor& gy) -> std::vector<Tensor> {
      return {cuda::leaky_relu_backward("relu", gy, y, 0.0)};
    });
  }
#endif
  Tensor y = dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return detail::map_in_dtype<T>(x, [](T v) { return v < T(0) ? T(0) : v; });
  });
  return autograd::record("relu", y, {x}, {autograd::Save::output()}, [y = y.detach()](const Tensor& gy) -> std::vector<Tensor> {
    return {dispatch_compute(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return detail::masked_grad<T>(gy, y, [](T g, T v) { return v <= T(0) ? T(0) : g; });
    })};
  });
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  NvtxRange nvtx_range("leaky_relu");
  check_floating_tensor("leaky_relu", "input", x);
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) {
    Tensor y = cuda::leaky_relu_forward("leaky_relu", x, negative_slope);
    return autograd::record("leaky_relu", y, {x}, {autograd::Save::input(0, "input")}, [x = x.detach(), negative_slope](const Tensor& gy) -> std::vector<Tensor> {
      return {cuda::leaky_relu_backward("leaky_relu", gy, x, negative_slope)};
    });
  }
#endif
  Tensor y = dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T s = static_cast<T>(negative_slope);
    // Written as two selects against 0 and one multiply-add (exact: one term is 0) because GCC
    // vectorises that, and not `v > 0 ? v : v * s` (a conditional multiply under -ftrapping-math).
    return detail::map_in_dtype<T>(x, [s](T v) {
      const T pos = v > T(0) ? v : T(0), neg = v > T(0) ? T(0) : v;
      return pos + neg * s;
    });
  });
  return autograd::record("leaky_relu", y, {x}, {autograd::Save::input(0, "input")},
                          [x = x.detach(), negative_slope](const Tensor& gy) -> std::vector<Tensor> {
                            return {dispatch_compute(x.dtype(), [&](auto tag) {
                              using T = decltype(tag);
                              const T s = static_cast<T>(negative_slope);
                              return detail::masked_grad<T>(gy, x, [s](T g, T v) {  // dy * (x > 0 ? 1 : slope), as in the forward
                                const T pos = v > T(0) ? g : T(0), neg = v > T(0) ? T(0) : g;
                                return pos + neg * s;
                              });
                            })};
                          });
}

namespace {

// Copy blocks between a concatenated tensor and its parts: for each outer index o and part i, the
// part's contiguous block of part_inner[i] elements sits at offset o*total_inner + part_offset[i].
struct CatLayout {
  int64_t outer = 1;
  int64_t total_inner = 0;
  std::vector<int64_t> part_inner, part_offset;  // in elements
};

CatLayout cat_layout(const std::vector<Shape>& shapes, int64_t dim) {
  CatLayout L;
  for (int64_t d = 0; d < dim; ++d) L.outer *= shapes[0][d];
  for (const Shape& s : shapes) {
    int64_t inner = 1;
    for (size_t d = dim; d < s.size(); ++d) inner *= s[d];
    L.part_offset.push_back(L.total_inner);
    L.part_inner.push_back(inner);
    L.total_inner += inner;
  }
  return L;
}

// to_parts = false: parts -> whole (forward); true: whole -> parts (backward), skipping null parts.
void cat_copy(const CatLayout& L, size_t elem, char* whole, const std::vector<char*>& parts, bool to_parts) {
  const int64_t k = static_cast<int64_t>(parts.size());
  const int64_t jobs = L.outer * k;
#pragma omp parallel for schedule(static) if (jobs > 1 && parallel_worth(L.outer * L.total_inner))
  for (int64_t j = 0; j < jobs; ++j) {
    const int64_t o = j / k, i = j % k;
    if (parts[i] == nullptr) continue;  // a part that needs no gradient
    char* w = whole + (o * L.total_inner + L.part_offset[i]) * elem;
    char* p = parts[i] + o * L.part_inner[i] * elem;
    const size_t bytes = static_cast<size_t>(L.part_inner[i]) * elem;
    if (to_parts) std::memcpy(p, w, bytes);
    else std::memcpy(w, p, bytes);
  }
}

#ifdef HALFGRAD_CUDA
// cat on CUDA: the parts in the first one's memory format (a differentiable conversion where one
// differs), and the CPU's block geometry computed on the physical shapes: NDHWC stores (N, D, H, W, C),
// so the logical dim `dim` sits at physical position phys[dim].
Tensor cat_cuda(const std::vector<Tensor>& xs, int64_t dim, Dtype dt, const Shape& out_shape) {
  const MemoryFormat fmt = xs[0].memory_format();
  const bool cl = fmt == MemoryFormat::ChannelsLast3d;
  const std::vector<int64_t> order = cl ? std::vector<int64_t>{0, 2, 3, 4, 1} : std::vector<int64_t>{};
  auto physical = [&](const Shape& s) {
    if (!cl) return s;
    Shape p(5);
    for (int j = 0; j < 5; ++j) p[j] = s[order[j]];
    return p;
  };
  int64_t pdim = dim;
  if (cl) pdim = std::find(order.begin(), order.end(), dim) - order.begin();
  std::vector<Tensor> parts;
  std::vector<Shape> shapes, phys;
  for (const Tensor& x : xs) {
    parts.push_back(x.to(dt).to(fmt));
    shapes.push_back(x.shape());
    phys.push_back(physical(x.shape()));
  }
  const CatLayout L = cat_layout(phys, pdim);
  const cuda::CatGeometry geo{L.outer, L.total_inner, L.part_inner, L.part_offset};
  const size_t elem = dtype_size(dt);
  Tensor y = Tensor::empty(out_shape, dt, Device::CUDA, fmt);
  std::vector<void*> ptrs;
  for (const Tensor& p : parts) ptrs.push_back(p.raw_data());
  cuda::cat_copy(geo, elem, y.raw_data(), ptrs, /*to_parts=*/false);
  std::vector<bool> need;
  for (const Tensor& p : parts) need.push_back(p.requires_grad());
  return autograd::record("cat", y, parts, {}, [geo, shapes, need, dt, fmt](const Tensor& gy) -> std::vector<Tensor> {
    std::vector<Tensor> grads(shapes.size());
    std::vector<void*> ptrs(shapes.size(), nullptr);
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (!need[i]) continue;
      grads[i] = Tensor::empty(shapes[i], dt, Device::CUDA, fmt);
      ptrs[i] = grads[i].raw_data();
    }
    const Tensor g = (gy.dtype() == dt ? gy : gy.cast_copy(dt)).format_copy(fmt);
    cuda::cat_copy(geo, dtype_size(dt), g.raw_data(), ptrs, /*to_parts=*/true);
    return grads;
  });
}
#endif

}  // namespace

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  NvtxRange nvtx_range("cat");
  HG_CHECK(!xs.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string what = "tensor " + std::to_string(i);
    check_tensor("cat", what.c_str(), xs[i]);
    check_same_device("cat", "tensor 0", xs[0], what.c_str(), xs[i]);
  }
  const Shape& s0 = xs[0].shape();
  const int64_t nd = static_cast<int64_t>(s0.size());
  HG_CHECK(nd > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  HG_CHECK(dim >= -nd && dim < nd, "cat: dim " << dim << " out of range for tensors of shape " << shape_str(s0)
                                               << " (expected in [" << -nd << ", " << nd - 1 << "])");
  if (dim < 0) dim += nd;
  Shape out_shape = s0;
  out_shape[dim] = 0;
  bool any_int = false;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& s = xs[i].shape();
    HG_CHECK(static_cast<int64_t>(s.size()) == nd, "cat: tensor " << i << " has shape " << shape_str(s)
                                                                  << " but tensor 0 has shape " << shape_str(s0)
                                                                  << "; all must have the same number of dims");
    for (int64_t d = 0; d < nd; ++d)
      HG_CHECK(d == dim || s[d] == s0[d], "cat: sizes of tensors must match except in dimension "
                                              << dim << ": tensor 0 has shape " << shape_str(s0) << ", tensor " << i
                                              << " has shape " << shape_str(s) << " (dimension " << d << ")");
    out_shape[dim] += s[dim];
    any_int = any_int || !is_floating(xs[i].dtype());
  }
  // Output dtype: the promote list (the widest floating input). Integer tensors concatenate only
  // with integer tensors of the same dtype, untouched.
  Dtype dt = xs[0].dtype();
  if (any_int) {
    for (size_t i = 0; i < xs.size(); ++i)
      HG_CHECK(xs[i].dtype() == dt, "cat: tensor " << i << " is " << dtype_name(xs[i].dtype()) << " but tensor 0 is "
                                                   << dtype_name(dt) << "; integer tensors concatenate only with "
                                                                        "tensors of the same dtype");
  } else {
    for (const Tensor& x : xs) dt = amp::autocast_dtype(amp::OpKind::Cat, {dt, x.dtype()});
  }
  std::vector<Tensor> parts;
  std::vector<Shape> shapes;
#ifdef HALFGRAD_CUDA
  if (xs[0].is_cuda()) return cat_cuda(xs, dim, dt, out_shape);
#endif
  for (const Tensor& x : xs) {
    parts.push_back(x.to(dt));
    shapes.push_back(x.shape());
  }
  const CatLayout L = cat_layout(shapes, dim);
  const size_t elem = dtype_size(dt);
  Tensor y = Tensor::empty(out_shape, dt);
  std::vector<char*> ptrs;
  for (const Tensor& p : parts) ptrs.push_back(static_cast<char*>(p.raw_data()));
  cat_copy(L, elem, static_cast<char*>(y.raw_data()), ptrs, /*to_parts=*/false);

  std::vector<bool> need;
  for (const Tensor& p : parts) need.push_back(p.requires_grad());
  return autograd::record("cat", y, parts, {}, [L, shapes, need, dt](const Tensor& gy) -> std::vector<Tensor> {
    std::vector<Tensor> grads(shapes.size());
    std::vector<char*> ptrs(shapes.size(), nullptr);
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (!need[i]) continue;
      grads[i] = Tensor::empty(shapes[i], dt);
      ptrs[i] = static_cast<char*>(grads[i].raw_data());
    }
    Tensor g = gy.dtype() == dt ? gy : gy.cast_copy(dt);
    cat_copy(L, dtype_size(dt), static_cast<char*>(g.raw_data()), ptrs, /*to_parts=*/true);
    return grads;
  });
}

}  // namespace halfgrad::ops
