// norm.cpp - batch_norm, instance_norm and group_norm on the CPU (math and errors in norm.h).
//
// Geometry: x (N, C, *spatial) is viewed as (N, C, S), S = prod(spatial); the (n, c) "chunk" is the
// contiguous run of S values at (n*C + c)*S. A "group" shares one mean and variance:
//   batch_norm     group = channel c, its N chunks,                            M = N*S values
//   group_norm     group = (n, g), the cpg = C/G consecutive chunks of sample n, M = cpg*S values
//   instance_norm  group = chunk (n, c): group_norm with G = C, cpg = 1,       M = S values
// All are the same three passes, which differ only in how chunks map to groups:
//   forward   1. per piece: sum (x - K) and sum (x - K)^2 in FP64, K = the group's first value (a
//                shift that keeps the one-pass variance free of cancellation when |mean| >> std), or
//                0 when that value is inf or NaN (x - inf would turn a +inf among finite values into
//                a NaN mean, where PyTorch's sum / M gives +inf)
//             2. per group: mean, var, invstd = 1/sqrt(var + eps)       (a few hundred numbers)
// Non-finite values propagate as in PyTorch (its CPU kernel: mean = sum / M, then the two-pass
// var = sum (x - mean)^2 / M): a NaN in a group makes its mean, var, y and running stats NaN; a +inf
// (-inf) among finite values makes the mean +inf (-inf) and the var NaN (here s2/M - m^2 = inf - inf),
// so y is NaN for the whole group and running_mean becomes +-inf, running_var NaN. The clamp of the
// one-pass variance at 0 (rounding can leave it slightly negative) is written so that it keeps a NaN.
//             3. per piece: y = (x - mean) * (w*invstd) + b
//   backward  1. per piece: sum dy and sum dy*(x - mean) in FP64
//             2. per chunk (n, c): dbias_c += sum dy, dweight_c += invstd * sum dy*(x - mean);
//                per group: SA = sum_c w_c sum dy, SB = sum_c w_c sum dy*(x - mean) (the sums of
//                dxhat = w_c dy and dxhat*(x - mean) over the group's chunks)
//             3. per piece: dx = A*dy + B*(x - mean) + C0 with A = w_c*invstd per chunk and, per group,
//                B = -invstd^3*SB/M, C0 = -invstd*SA/M                         (training)
//                dx = A*dy                                                     (evaluation: x's
//                values, even NaN ones, and the running mean do not reach dx, as in PyTorch)
//                With one channel per group (batch_norm, instance_norm) B = -A*invstd*mean(dy*xhat)
//                and C0 = -A*mean(dy).
// Parallel mapping: every pass runs over "pieces" (at most kPiece values of one chunk), split among
// the OpenMP threads; the per-piece FP64 partial sums are combined serially in piece order, so the
// result does not depend on the thread count. Saved for backward: x itself and mean/invstd per group
// (no xhat copy). Precision: FP64 accumulation always; the elementwise passes run in float for
// Float32/Float16 (a Float16 output is rounded once) and in double for Float64.
// CUDA tensors (NCDHW or NDHWC) take the same three passes in norm_cuda.cu, after the same checks and
// autocast cast; the running statistics are then updated on the device, without a host sync.
#include "ops/norm/norm.h"

#include <algorithm>
#include <cmath>

#include "core/nvtx.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/norm/norm_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

// A piece is at most 16384 values (64 KiB of float, within L2): small enough that N*C pieces of a
// small volume still give every thread work, large enough to hide the per-piece bookkeeping.
constexpr int64_t kPiece = 16384;

struct NormGeometry {
  int64_t N = 0, C = 0, S = 0;
  bool per_sample = false;  // group_norm / instance_norm: groups of cpg channels within each sample
  int64_t cpg = 1;          // channels per group (per_sample): C / G; 1 for instance_norm

  int64_t groups() const { return per_sample ? N * C / cpg : C; }
  // Chunk k = n*C + c belongs to group n*G + c/cpg = k / cpg (cpg divides C).
  int64_t group_of_chunk(int64_t k) const { return per_sample ? k / cpg : k % C; }
  int64_t group_size() const { return per_sample ? cpg * S : N * S; }
  int64_t pieces_per_chunk() const { return (S + kPiece - 1) / kPiece; }
  int64_t num_pieces() const { return N * C * pieces_per_chunk(); }
  // Piece j -> chunk, and the [begin, end) flat range it covers.
  int64_t chunk_of(int64_t j) const { return j / pieces_per_chunk(); }
  int64_t begin_of(int64_t j) const { return chunk_of(j) * S + (j % pieces_per_chunk()) * kPiece; }
  int64_t len_of(int64_t j) const { return std::min(kPiece, S - (j % pieces_per_chunk()) * kPiece); }
  // Flat index of the first value of group g (the shift K): its first chunk g*cpg (group_norm), or
  // chunk (0, c=g) (batch_norm).
  int64_t first_of_group(int64_t g) const { return (per_sample ? g * cpg : g) * S; }
};

NormGeometry geometry_of(const Tensor& x, bool per_sample, int64_t cpg = 1) {
  NormGeometry g;
  g.N = x.shape()[0];
  g.C = x.shape()[1];
  g.S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) g.S *= x.shape()[d];
  g.per_sample = per_sample;
  g.cpg = cpg;
  return g;
}

// Per-channel parameter (weight, bias, running stat) as doubles; `fill` when undefined.
std::vector<double> channel_values(const Tensor& t, int64_t C, double fill) {
  if (!t.defined()) return std::vector<double>(C, fill);
  return t.to_double_vector();
}

void check_channel_param(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  check_floating_tensor(op, what, t);
  check_same_device(op, "input", x, what, t);
  HG_CHECK(t.dim() == 1 && t.shape()[0] == x.shape()[1],
           op << ": " << what << " has shape " << shape_str(t.shape()) << " but input " << shape_str(x.shape())
              << " has " << x.shape()[1] << " channels; expected [" << x.shape()[1] << "]");
}

// The shift K of a group whose first value is v: v itself, or 0 when v is inf or NaN (so that an inf
// yields an inf mean, not inf - inf = NaN; a NaN propagates through the sums either way).
inline double norm_shift(double v) { return std::isfinite(v) ? v : 0.0; }

// The one-pass biased variance s2/M - m^2, clamped at 0 against rounding; a NaN stays NaN
// (std::max(0.0, NaN) would return 0 and hide it).
inline double clamp_variance(double v) { return v < 0.0 ? 0.0 : v; }

// Pass 1 of the forward: per-group mean and biased variance, FP64.
template <typename T>
void group_moments(const T* x, const NormGeometry& geo, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t P = geo.num_pieces(), G = geo.groups();
  std::vector<double> s1(P), s2(P);
#pragma omp parallel for schedule(static) if (P > 1 && parallel_worth(geo.N * geo.C * geo.S))
  for (int64_t j = 0; j < P; ++j) {
    const double K = norm_shift(static_cast<double>(x[geo.first_of_group(geo.group_of_chunk(geo.chunk_of(j)))]));
    const T* p = x + geo.begin_of(j);
    const int64_t n = geo.len_of(j);
    double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(p[i]) - K;
      a += d;
      b += d * d;
    }
    s1[j] = a;
    s2[j] = b;
  }
  std::vector<double> t1(G, 0.0), t2(G, 0.0);
  for (int64_t j = 0; j < P; ++j) {
    const int64_t g = geo.group_of_chunk(geo.chunk_of(j));
    t1[g] += s1[j];
    t2[g] += s2[j];
  }
  const double M = static_cast<double>(geo.group_size());
  mean.assign(G, 0.0);
  var.assign(G, 0.0);
  for (int64_t g = 0; g < G; ++g) {
    const double K = norm_shift(static_cast<double>(x[geo.first_of_group(g)]));
    const double m = t1[g] / M;  // mean of (x - K)
    mean[g] = K + m;
    var[g] = clamp_variance(t2[g] / M - m * m);
  }
}

// Pass 3 of the forward: y = (x - mean_g) * a_k + b_k per chunk k.
template <typename T>
void normalize_apply(const T* x, T* y, const NormGeometry& geo, const std::vector<double>& mean,
                     const std::vector<double>& invstd, const std::vector<double>& w, const std::vector<double>& b) {
  const int64_t P = geo.num_pieces();
#pragma omp parallel for schedule(static) if (P > 1 && parallel_worth(geo.N * geo.C * geo.S))
  for (int64_t j = 0; j < P; ++j) {
    const int64_t k = geo.chunk_of(j), g = geo.group_of_chunk(k), c = k % geo.C;
    const T m = static_cast<T>(mean[g]);
    const T a = static_cast<T>(w[c] * invstd[g]);
    const T bb = static_cast<T>(b[c]);
    const int64_t off = geo.begin_of(j), n = geo.len_of(j);
    const T* p = x + off;
    T* q = y + off;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) q[i] = (p[i] - m) * a + bb;
  }
}

struct NormBackward {
  NormGeometry geo;
  bool training = true;            // batch statistics (dx has the mean terms) or running ones
  std::vector<double> mean, invstd;  // per group
  bool need_x = false, need_w = false, need_b = false;
  Dtype x_dtype = kFloat32;        // dtype of the (autocast) input, and of dy and dx
  Dtype w_dtype = kFloat32, b_dtype = kFloat32;
};

// dx, dweight, dbias from dy (three passes, see the file comment).
std::vector<Tensor> norm_backward(const NormBackward& nb, const Tensor& x, const Tensor& weight, const Tensor& gy) {
  const NormGeometry& geo = nb.geo;
  const int64_t P = geo.num_pieces(), G = geo.groups(), C = geo.C;
  const std::vector<double> w = channel_values(weight, C, 1.0);
  Tensor cx = to_compute(x), cg = to_compute(gy);
  Tensor dx;
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  dispatch_compute(nb.x_dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = cx.data<T>();
    const T* pg = cg.data<T>();
    // 1. per-piece sums of dy and dy*(x - mean); evaluation mode needs them only for dweight/dbias
    std::vector<double> s1(P, 0.0), s2(P, 0.0);
    if (nb.training || nb.need_w || nb.need_b) {
#pragma omp parallel for schedule(static) if (P > 1 && parallel_worth(geo.N * geo.C * geo.S))
      for (int64_t j = 0; j < P; ++j) {
        const int64_t off = geo.begin_of(j), n = geo.len_of(j);
        const double m = nb.mean[geo.group_of_chunk(geo.chunk_of(j))];
        const T* p = px + off;
        const T* d = pg + off;
        double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
        for (int64_t i = 0; i < n; ++i) {
          const double dyv = static_cast<double>(d[i]);
          a += dyv;
          b += dyv * (static_cast<double>(p[i]) - m);
        }
        s1[j] = a;
        s2[j] = b;
      }
    }
    // 2. per chunk (dweight, dbias) and per group (SA, SB), in piece order
    const int64_t K = geo.N * C;
    std::vector<double> cdy(K, 0.0), cdyx(K, 0.0);
    for (int64_t j = 0; j < P; ++j) {
      cdy[geo.chunk_of(j)] += s1[j];
      cdyx[geo.chunk_of(j)] += s2[j];
    }
    std::vector<double> SA(G, 0.0), SB(G, 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t g = geo.group_of_chunk(k), c = k % C;
      db[c] += cdy[k];
      dw[c] += nb.invstd[g] * cdyx[k];
      SA[g] += w[c] * cdy[k];
      SB[g] += w[c] * cdyx[k];
    }
    const double M = static_cast<double>(geo.group_size());
    std::vector<double> B(G), C0(G);
    for (int64_t g = 0; g < G; ++g) {
      const double is = nb.invstd[g];
      B[g] = nb.training ? -is * is * is * SB[g] / M : 0.0;
      C0[g] = nb.training ? -is * SA[g] / M : 0.0;
    }
    if (!nb.need_x) return;
    // 3. dx = A*dy + B*(x - mean) + C0 (training), A*dy (evaluation)
    dx = Tensor::empty(x.shape(), compute_dtype(nb.x_dtype));
    T* pd = dx.data<T>();
#pragma omp parallel for schedule(static) if (P > 1 && parallel_worth(geo.N * geo.C * geo.S))
    for (int64_t j = 0; j < P; ++j) {
      const int64_t k = geo.chunk_of(j), g = geo.group_of_chunk(k);
      const int64_t off = geo.begin_of(j), n = geo.len_of(j);
      const T a = static_cast<T>(w[k % C] * nb.invstd[g]), b = static_cast<T>(B[g]), c0 = static_cast<T>(C0[g]);
      const T m = static_cast<T>(nb.mean[g]);
      const T* p = px + off;
      const T* d = pg + off;
      T* q = pd + off;
      if (nb.training) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) q[i] = a * d[i] + b * (p[i] - m) + c0;
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) q[i] = a * d[i];
      }
    }
  });
  std::vector<Tensor> grads(3);
  if (nb.need_x) grads[0] = from_compute(dx, nb.x_dtype);
  if (nb.need_w) grads[1] = Tensor::from_vector(dw, {C}, nb.w_dtype);
  if (nb.need_b) grads[2] = Tensor::from_vector(db, {C}, nb.b_dtype);
  return grads;
}

// The shared forward: normalise with batch statistics (computing mean/var) or the given ones, record
// the backward. `stats_out` receives the batch mean and biased variance when computed.
Tensor norm_forward(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, const NormGeometry& geo,
                    bool use_batch_stats, std::vector<double> mean, std::vector<double> var, double eps,
                    std::vector<double>* batch_mean, std::vector<double>* batch_var) {
  const int64_t G = geo.groups(), C = geo.C;
  const std::vector<double> w = channel_values(weight, C, 1.0), b = channel_values(bias, C, 0.0);
  Tensor cx = to_compute(x);
  Tensor y = Tensor::empty(x.shape(), compute_dtype(x.dtype()));
  std::vector<double> invstd(G);
  dispatch_compute(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = cx.data<T>();
    if (use_batch_stats) group_moments(px, geo, mean, var);
    for (int64_t g = 0; g < G; ++g) invstd[g] = 1.0 / std::sqrt(var[g] + eps);
    normalize_apply(px, y.data<T>(), geo, mean, invstd, w, b);
  });
  if (batch_mean) *batch_mean = mean;
  if (batch_var) *batch_var = var;
  NormBackward nb;
  nb.geo = geo;
  nb.training = use_batch_stats;
  nb.mean = std::move(mean);
  nb.invstd = std::move(invstd);
  nb.need_x = x.requires_grad();
  nb.need_w = weight.defined() && weight.requires_grad();
  nb.need_b = bias.defined() && bias.requires_grad();
  nb.x_dtype = x.dtype();
  if (weight.defined()) nb.w_dtype = weight.dtype();
  if (bias.defined()) nb.b_dtype = bias.dtype();
  Tensor out = from_compute(y, x.dtype());
  return autograd::record(op, out, {x, weight, bias},
                          {autograd::Save::input(0, "input"), autograd::Save::input(1, "weight")},
                          [nb = std::move(nb), x = x.detach(), w = weight.defined() ? weight.detach() : Tensor()](
                              const Tensor& gy) -> std::vector<Tensor> { return norm_backward(nb, x, w, gy); });
}

#ifdef HALFGRAD_CUDA
// A per-channel parameter as the float32 tensor the kernels read (undefined stays undefined).
Tensor as_float32(const Tensor& t) {
  if (!t.defined()) return Tensor();
  return t.dtype() == kFloat32 ? t.detach() : t.cast_copy(kFloat32);
}

// The CUDA forward (norm_cuda.cu computes; the running stats are updated there, on the device) and
// its backward record: the same inputs, gradients and dtypes as norm_forward's.
Tensor norm_forward_cuda(const cuda::NormCudaArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var) {
  const Tensor w32 = as_float32(weight);
  cuda::NormCudaForward f = cuda::norm_forward(args, x, w32, as_float32(bias), running_mean, running_var);
  const bool need_x = x.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  const Dtype w_dtype = weight.defined() ? weight.dtype() : kFloat32;
  const Dtype b_dtype = bias.defined() ? bias.dtype() : kFloat32;
  return autograd::record(args.op, f.y, {x, weight, bias},
                          {autograd::Save::input(0, "input"), autograd::Save::input(1, "weight"),
                           autograd::Save::tensor(w32, "weight as float32"), autograd::Save::tensor(f.saved, "mean and invstd")},
                          [args, x = x.detach(), w32, saved = f.saved, need_x, need_w, need_b, w_dtype,
                           b_dtype](const Tensor& gy) -> std::vector<Tensor> {
                            cuda::NormCudaGrads g = cuda::norm_backward(args, x, w32, saved, gy, need_x, need_w, need_b);
                            std::vector<Tensor> grads(3);
                            grads[0] = g.dx;
                            if (need_w) grads[1] = w_dtype == kFloat32 ? g.dweight : g.dweight.cast_copy(w_dtype);
                            if (need_b) grads[2] = b_dtype == kFloat32 ? g.dbias : g.dbias.cast_copy(b_dtype);
                            return grads;
                          });
}
#endif

void check_norm_input(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating_tensor(op, "input", x);
  HG_CHECK(x.dim() >= 2, op << ": input must be (N, C, *spatial) with at least 2 dims, got shape "
                            << shape_str(x.shape()));
  check_channel_param(op, "weight", weight, x);
  check_channel_param(op, "bias", bias, x);
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, const BatchNormParams& p) {
  NvtxRange nvtx_range("batch_norm");
  check_norm_input("batch_norm", x, weight, bias);
  check_channel_param("batch_norm", "running_mean", running_mean, x);
  check_channel_param("batch_norm", "running_var", running_var, x);
  const NormGeometry geo = geometry_of(x, /*per_sample=*/false);
  const int64_t C = geo.C;
  if (p.training_) {
    HG_CHECK(geo.group_size() > 1, "batch_norm: expected more than 1 value per channel when training, got input "
                                       "of shape " << shape_str(x.shape()));
  } else {
    HG_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: evaluation mode needs running_mean and running_var, got "
                 << (running_mean.defined() ? "" : "an undefined running_mean ")
                 << (running_var.defined() ? "" : "an undefined running_var ") << "for input "
                 << shape_str(x.shape()));
  }
  const Dtype dt = amp::autocast_dtype(amp::OpKind::BatchNorm, {x.dtype()});
  const Tensor xx = x.to(dt);
#ifdef HALFGRAD_CUDA
  if (x.is_cuda()) {
    cuda::NormCudaArgs args;
    args.op = "batch_norm";
    args.per_sample = false;
    args.batch_stats = p.training_;
    args.momentum = p.momentum_;
    args.eps = p.eps_;
    return norm_forward_cuda(args, xx, weight, bias, running_mean, running_var);
  }
#endif
  if (!p.training_) {
    return norm_forward("batch_norm", xx, weight, bias, geo, false, running_mean.to_double_vector(),
                        running_var.to_double_vector(), p.eps_, nullptr, nullptr);
  }
  std::vector<double> mean, var;
  Tensor y = norm_forward("batch_norm", xx, weight, bias, geo, true, {}, {}, p.eps_, &mean, &var);
  // Running statistics: updated in place, off the tape (as PyTorch), with the unbiased variance.
  if (running_mean.defined() || running_var.defined()) {
    const double m = p.momentum_;
    const double M = static_cast<double>(geo.group_size());
    if (running_mean.defined()) {
      std::vector<double> rm = running_mean.to_double_vector();
      for (int64_t c = 0; c < C; ++c) rm[c] = (1 - m) * rm[c] + m * mean[c];
      Tensor(running_mean).copy_from(Tensor::from_vector(rm, {C}));
    }
    if (running_var.defined()) {
      std::vector<double> rv = running_var.to_double_vector();
      for (int64_t c = 0; c < C; ++c) rv[c] = (1 - m) * rv[c] + m * var[c] * M / (M - 1);
      Tensor(running_var).copy_from(Tensor::from_vector(rv, {C}));
    }
  }
  return y;
}

namespace {
// instance_norm and group_norm: statistics per (n, group of geo.cpg channels), in the dtype autocast
// gives `kind` (their rows differ: instance_norm none, group_norm the FP32 list).
Tensor per_sample_norm(const char* op, amp::OpKind kind, const Tensor& x, const NormGeometry& geo,
                       const Tensor& weight, const Tensor& bias, double eps) {
  const Tensor xx = x.to(amp::autocast_dtype(kind, {x.dtype()}));
#ifdef HALFGRAD_CUDA
  if (xx.is_cuda()) {
    cuda::NormCudaArgs args;
    args.op = op;
    args.per_sample = true;
    args.channels_per_group = geo.cpg;
    args.batch_stats = true;
    args.eps = eps;
    return norm_forward_cuda(args, xx, weight, bias, Tensor(), Tensor());
  }
#endif
  return norm_forward(op, xx, weight, bias, geo, true, {}, {}, eps, nullptr, nullptr);
}
}  // namespace

Tensor instance_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  NvtxRange nvtx_range("instance_norm");
  check_norm_input("instance_norm", x, weight, bias);
  const NormGeometry geo = geometry_of(x, /*per_sample=*/true);
  HG_CHECK(geo.group_size() > 1, "instance_norm: expected more than 1 spatial element per (sample, channel), got "
                                 "input of shape " << shape_str(x.shape()));
  return per_sample_norm("instance_norm", amp::OpKind::InstanceNorm, x, geo, weight, bias, eps);
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  NvtxRange nvtx_range("group_norm");
  check_norm_input("group_norm", x, weight, bias);
  const int64_t C = x.shape()[1];
  HG_CHECK(num_groups >= 1 && C % num_groups == 0,
           "group_norm: expected the number of channels of input " << shape_str(x.shape())
                                                                   << " to be divisible by num_groups, but got num_groups="
                                                                   << num_groups);
  // The FP32 list: the input is cast (the affine parameters are read in FP32 inside either way).
  return per_sample_norm("group_norm", amp::OpKind::GroupNorm, x, geometry_of(x, /*per_sample=*/true, C / num_groups),
                         weight, bias, eps);
}

}  // namespace halfgrad::ops
