// loss.cpp - cross_entropy, soft_dice_loss and their sum, segmentation_loss, on the CPU (math in
// loss.h). All three are one fused op, L = w_ce * CE + w_dice * Dice, with its own backward:
//
// forward, per position v (n, spatial index) of logits (N, C, S) and target (N, S):
//   m = max_c x_c,  lse = m + log sum_c exp(x_c - m),  p_c = exp(x_c - lse)
//   CE   = mean_v (lse - x_t)
//   Dice = 1 - (1/C) sum_c num_c / den_c,  num_c = 2 I_c + smooth,  den_c = P_c + O_c + smooth,
//          I_c = sum_v p_c [t == c],  P_c = sum_v p_c,  O_c = sum_v [t == c]
// backward (dL the incoming scalar gradient; lse is saved, p is recomputed from it):
//   dCE/dx_c   = (p_c - [t == c]) / (N*S)
//   dDice/dp_c = a_c [t == c] + b_c,   a_c = -2 / (C den_c),  b_c = num_c / (C den_c^2)
//   dDice/dx_c = p_c (dDice/dp_c - sum_k p_k dDice/dp_k)       (the softmax Jacobian)
//
// Parallel mapping: one task = one sample n and a tile of kTile consecutive spatial positions; the C
// channel rows of the tile are contiguous (stride S), so every pass is a sweep of contiguous rows and
// exp/log are Eigen's vectorised ones. Each task writes its partial sums (CE and I, P, O per class) to
// its own slot, summed in task order afterwards: the loss does not depend on the thread count.
// Precision: float (Float32/Float16 logits; FP16 logits are cast to FP32 under autocast, the FP32
// list) or double (Float64); per-tile sums in the compute type, across tiles in double.
// Targets are validated in the same pass; a bad one throws, naming the value and its position.
// CUDA logits (NCDHW or NDHWC) with a CUDA target take the same fused op in loss_cuda.cu, after the
// same checks and autocast cast; it checks the labels on the device and syncs once per forward.
#include "ops/loss/loss.h"
#include "ops/loss/deferred_label_check.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "core/nvtx.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/loss/loss_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

// 512 positions per task: the task's 2C + 3 rows of 2 KiB floats (exp or p, one-hot, max, sum,
// labels) fit a 32 KiB L1 for the class counts of a segmentation head (C <= 6), and a
// (1, 3, 48, 64, 48) volume still splits into ~290 tasks.
constexpr int64_t kTile = 512;

// Also the tasks' scratch rows (m, s, e, p, q, one-hot), never a std::vector: when the destination of
// an Eigen expression is not known to be aligned, Eigen computes the elements before its first
// 32-byte boundary one at a time with the scalar function (std::exp, std::log) and the others with
// its vectorised one (pexp, plog), and the two differ in the last bit. A std::vector's storage is
// only 16-byte aligned, so which elements took which path, and with it the loss and its gradient,
// followed the heap's state (the CPU cache's setting, an instrument's allocations). Eigen's storage
// is 32-byte aligned and every row starts at a multiple of kTile elements: the same path for every
// element of every run. (The destinations in tensors, lse and dx, sit at offsets fixed by the shape
// in 64-byte aligned blocks: core/allocator.h.)
template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using Row = Eigen::Map<Arr<T>>;
template <typename T>
using CRow = Eigen::Map<const Arr<T>>;

struct LossSpec {
  const char* op = "";
  double w_ce = 0, w_dice = 0;  // L = w_ce * CE + w_dice * Dice
  double smooth = 1e-5;
};

struct LossGeometry {
  int64_t N = 0, C = 0, S = 1;
  int64_t tiles() const { return (S + kTile - 1) / kTile; }
  int64_t tasks() const { return N * tiles(); }
};

LossGeometry check_loss_args(const char* op, const Tensor& logits, const Tensor& target) {
  check_floating_tensor(op, "logits", logits);
  check_tensor(op, "target", target);
  check_same_device(op, "logits", logits, "target", target);
  HG_CHECK(logits.dim() >= 2, op << ": logits must be (N, C, *spatial) with at least 2 dims, got shape "
                                 << shape_str(logits.shape()));
  HG_CHECK(target.dtype() == kInt64, op << ": target must be int64 class indices, got " << dtype_name(target.dtype())
                                        << " of shape " << shape_str(target.shape()));
  Shape expect = logits.shape();
  expect.erase(expect.begin() + 1);
  HG_CHECK(target.shape() == expect, op << ": target has shape " << shape_str(target.shape()) << " but logits "
                                        << shape_str(logits.shape()) << " need a target of shape "
                                        << shape_str(expect) << " (logits' shape without the class dim)");
  LossGeometry g;
  g.N = logits.shape()[0];
  g.C = logits.shape()[1];
  for (int64_t d = 2; d < logits.dim(); ++d) g.S *= logits.shape()[d];
  HG_CHECK(g.C > 0, op << ": logits " << shape_str(logits.shape()) << " have no classes");
  HG_CHECK(g.N * g.S > 0, op << ": logits " << shape_str(logits.shape()) << " hold no positions to average over");
  return g;
}

// Per-task partial sums: [CE, I_0..I_{C-1}, P_0.., O_0..].
struct Partials {
  int64_t C;
  std::vector<double> v;
  Partials(int64_t tasks, int64_t c) : C(c), v(tasks * (1 + 3 * c), 0.0) {}
  double* slot(int64_t t) { return v.data() + t * (1 + 3 * C); }
};

// The tile's one-hot rows, oh[c*kTile + i] = [t_i == c]. They are materialised rather than computed
// inside the arithmetic loops because GCC 12 rewrites `p - [t == c]` into a conditional subtract,
// which -ftrapping-math keeps scalar (the whole loop then runs without SIMD).
template <typename T>
void one_hot_rows(const int32_t* t32, int64_t C, int64_t len, T* oh_buf) {
  for (int64_t c = 0; c < C; ++c) {
    T* oh = oh_buf + c * kTile;
    const int32_t cc = static_cast<int32_t>(c);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) oh[i] = t32[i] == cc ? T(1) : T(0);
  }
}

// One forward task: validates labels into t32, writes lse, adds the partial sums into `out`.
// Returns the index (within the tile) of the first invalid label, or -1. exp/log are Eigen's
// vectorised ones; the label-masked sums are plain loops the compiler vectorises with blends.
template <typename T>
int64_t forward_task(const T* x, const int64_t* tg, T* lse_out, int64_t C, int64_t S, int64_t len, bool dice,
                     int32_t* t32, T* m_buf, T* s_buf, T* e_buf, T* oh_buf, double* out) {
  int32_t any_bad = 0;
#pragma omp simd reduction(| : any_bad)
  for (int64_t i = 0; i < len; ++i) {
    any_bad |= static_cast<int32_t>(tg[i] < 0) | static_cast<int32_t>(tg[i] >= C);
    t32[i] = static_cast<int32_t>(tg[i]);  // an invalid label matches no class below; the op throws after
  }
  int64_t bad = -1;
  for (int64_t i = 0; any_bad && i < len; ++i)
    if (tg[i] < 0 || tg[i] >= C) {
      bad = i;
      break;
    }
  Row<T> m(m_buf, len), s(s_buf, len), lse(lse_out, len);
  m = CRow<T>(x, len);
  for (int64_t c = 1; c < C; ++c) m = m.max(CRow<T>(x + c * S, len));
  s.setZero();
  for (int64_t c = 0; c < C; ++c) {
    Row<T> e(e_buf + c * kTile, len);
    e = (CRow<T>(x + c * S, len) - m).exp();
    s += e;
  }
  lse = m + s.log();
  // CE: sum_v lse - x_t, with x_t gathered as sum_c [t == c] x_c.
  T ce = lse.sum();
  for (int64_t c = 0; c < C; ++c) {
    const T* xc = x + c * S;
    const int32_t cc = static_cast<int32_t>(c);
    T picked = 0;
#pragma omp simd reduction(+ : picked)
    for (int64_t i = 0; i < len; ++i) picked += t32[i] == cc ? xc[i] : T(0);
    ce -= picked;
  }
  out[0] += static_cast<double>(ce);
  if (!dice) return bad;
  one_hot_rows(t32, C, len, oh_buf);
  s = s.inverse();
  for (int64_t c = 0; c < C; ++c) {
    const T* e = e_buf + c * kTile;
    const T* oh = oh_buf + c * kTile;
    T inter = 0, psum = 0, cnt = 0;
#pragma omp simd reduction(+ : inter, psum, cnt)
    for (int64_t i = 0; i < len; ++i) {
      const T p = e[i] * s_buf[i];  // s_buf holds 1 / sum now
      inter += oh[i] * p;
      psum += p;
      cnt += oh[i];
    }
    out[1 + c] += static_cast<double>(inter);
    out[1 + C + c] += static_cast<double>(psum);
    out[1 + 2 * C + c] += static_cast<double>(cnt);
  }
  return bad;
}

// One backward task: dx for the tile from the saved lse.
//   dx_c = kce (p_c - [t == c]) + kd p_c (a_c [t == c] + b_c - q),  q = sum_k p_k (a_k [t == k] + b_k)
template <typename T>
void backward_task(const T* x, const int64_t* tg, const T* lse_in, T* dx, int64_t C, int64_t S, int64_t len, T kce,
                   T kd, const std::vector<T>& a, const std::vector<T>& b, int32_t* t32, T* q, T* p_buf, T* oh_buf) {
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) t32[i] = static_cast<int32_t>(tg[i]);
  one_hot_rows(t32, C, len, oh_buf);
  CRow<T> lse(lse_in, len);
  for (int64_t c = 0; c < C; ++c) Row<T>(p_buf + c * kTile, len) = (CRow<T>(x + c * S, len) - lse).exp();
  if (kd != T(0)) {
    std::fill(q, q + len, T(0));
    for (int64_t c = 0; c < C; ++c) {
      const T* p = p_buf + c * kTile;
      const T* oh = oh_buf + c * kTile;
      const T ac = a[c], bc = b[c];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) q[i] += p[i] * (ac * oh[i] + bc);
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    const T* p = p_buf + c * kTile;
    const T* oh = oh_buf + c * kTile;
    T* d = dx + c * S;
    const T ac = a[c], bc = b[c];
    if (kd != T(0)) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) d[i] = kce * (p[i] - oh[i]) + kd * p[i] * (ac * oh[i] + bc - q[i]);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) d[i] = kce * (p[i] - oh[i]);
    }
  }
}

std::string position_str(const Shape& s, int64_t flat) {
  Shape idx(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return shape_str(idx);
}

// "<op>: target value 7 at position [0, 1, 2, 3] of target [...] is outside [0, C) (...)".
Error bad_label_error(const LossSpec& spec, const Tensor& logits, const Tensor& target, int64_t flat, int64_t value) {
  const int64_t C = logits.shape()[1];
  std::ostringstream os;
  os << spec.op << ": target value " << value << " at position " << position_str(target.shape(), flat) << " of target "
     << shape_str(target.shape()) << " is outside [0, " << C << ") (logits " << shape_str(logits.shape()) << " have "
     << C << " classes)";
  return Error(os.str());
}

Tensor fused_loss(const LossSpec& spec, amp::OpKind kind, const Tensor& logits, const Tensor& target) {
  NvtxRange nvtx_range(amp::op_kind_name(kind));
  const LossGeometry g = check_loss_args(spec.op, logits, target);
  const Dtype dt = amp::autocast_dtype(kind, {logits.dtype()});
  const Tensor xx = logits.to(dt);
#ifdef HALFGRAD_CUDA
  if (logits.is_cuda()) {
    cuda::LossCudaArgs args;
    args.op = spec.op;
    args.w_ce = spec.w_ce;
    args.w_dice = spec.w_dice;
    args.smooth = spec.smooth;
    if (DeferredLabelCheck* d = DeferredLabelCheck::current())
      args.deferred_bad = static_cast<unsigned long long*>(d->device_flag());
    cuda::LossCudaForward f = cuda::loss_forward(args, xx, target);
    if (f.bad_position >= 0)
      throw bad_label_error(spec, logits, target, f.bad_position, static_cast<int64_t>(target.item_at(f.bad_position)));
    return autograd::record(spec.op, f.loss, {xx},
                            {autograd::Save::input(0, "logits"), autograd::Save::tensor(target, "target"),
                             autograd::Save::tensor(f.lse, "lse"), autograd::Save::tensor(f.coef, "coef")},
                            [args, x = xx.detach(), target = target.detach(), lse = f.lse,
                             coef = f.coef](const Tensor& gy) -> std::vector<Tensor> {
                              return {cuda::loss_backward(args, x, target, lse, coef, gy)};
                            });
  }
#endif
  const bool dice = spec.w_dice != 0;
  const int64_t C = g.C, S = g.S, T_ = g.tasks();
  Tensor cx = to_compute(xx);
  Tensor lse = Tensor::empty({g.N * S}, compute_dtype(dt));
  Partials part(T_, C);
  std::vector<int64_t> bad(T_, -1);
  const int64_t* ptg = target.data<int64_t>();
  dispatch_compute(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* px = cx.data<T>();
    T* pl = lse.data<T>();
#pragma omp parallel if (T_ > 1 && parallel_worth(g.N * C * S))
    {
      std::vector<int32_t> t32(kTile);
      Arr<T> m = Arr<T>::Zero(kTile), s = Arr<T>::Zero(kTile), e = Arr<T>::Zero(C * kTile),
             oh = Arr<T>::Zero(C * kTile);  // aligned scratch rows: see Arr
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T_; ++t) {
        const int64_t n = t / g.tiles(), i0 = (t % g.tiles()) * kTile, len = std::min(kTile, S - i0);
        const int64_t b = forward_task(px + n * C * S + i0, ptg + n * S + i0, pl + n * S + i0, C, S, len, dice,
                                       t32.data(), m.data(), s.data(), e.data(), oh.data(), part.slot(t));
        if (b >= 0) bad[t] = n * S + i0 + b;
      }
    }
  });
  for (int64_t t = 0; t < T_; ++t)
    if (bad[t] >= 0) throw bad_label_error(spec, logits, target, bad[t], ptg[bad[t]]);
  // Combine the task partials in order.
  std::vector<double> tot(1 + 3 * C, 0.0);
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t k = 0; k < 1 + 3 * C; ++k) tot[k] += part.slot(t)[k];
  const double M = static_cast<double>(g.N * S);
  // The CE term only when it is asked for: 0 * CE would turn a +inf CE (a -inf logit at the target
  // class, which Dice alone takes as probability 0) into a NaN Dice loss.
  double L = spec.w_ce != 0 ? spec.w_ce * tot[0] / M : 0.0;
  std::vector<double> a(C, 0.0), b(C, 0.0);
  if (dice) {
    double ratio = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double num = 2 * tot[1 + c] + spec.smooth, den = tot[1 + C + c] + tot[1 + 2 * C + c] + spec.smooth;
      ratio += num / den;
      a[c] = -2.0 / (static_cast<double>(C) * den);
      b[c] = num / (static_cast<double>(C) * den * den);
    }
    L += spec.w_dice * (1.0 - ratio / static_cast<double>(C));
  }
  Tensor y = Tensor::full({}, L, dt);
  return autograd::record(
      spec.op, y, {xx},
      {autograd::Save::input(0, "logits"), autograd::Save::tensor(target, "target"), autograd::Save::tensor(lse, "lse")},
      [g, spec, dt, a, b, x = xx.detach(), target = target.detach(), lse](const Tensor& gy) -> std::vector<Tensor> {
        const double dL = gy.item();
        Tensor cx = to_compute(x);
        Tensor dx = Tensor::empty(x.shape(), compute_dtype(dt));
        const int64_t C = g.C, S = g.S, T_ = g.tasks();
        const int64_t* ptg = target.data<int64_t>();
        dispatch_compute(dt, [&](auto tag) {
          using T = decltype(tag);
          const T kce = static_cast<T>(dL * spec.w_ce / static_cast<double>(g.N * S));
          const T kd = static_cast<T>(dL * spec.w_dice);
          const std::vector<T> ta(a.begin(), a.end()), tb(b.begin(), b.end());
          const T* px = cx.data<T>();
          const T* pl = lse.data<T>();
          T* pd = dx.data<T>();
#pragma omp parallel if (T_ > 1 && parallel_worth(g.N * C * S))
          {
            std::vector<int32_t> t32(kTile);
            Arr<T> q = Arr<T>::Zero(kTile), p = Arr<T>::Zero(C * kTile), oh = Arr<T>::Zero(C * kTile);
#pragma omp for schedule(static)
            for (int64_t t = 0; t < T_; ++t) {
              const int64_t n = t / g.tiles(), i0 = (t % g.tiles()) * kTile, len = std::min(kTile, S - i0);
              const int64_t off = n * C * S + i0;
              backward_task(px + off, ptg + n * S + i0, pl + n * S + i0, pd + off, C, S, len, kce, kd, ta, tb,
                            t32.data(), q.data(), p.data(), oh.data());
            }
          }
        });
        return {from_compute(dx, dt)};
      });
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target) {
  LossSpec spec;
  spec.op = "cross_entropy";
  spec.w_ce = 1;
  return fused_loss(spec, amp::OpKind::CrossEntropy, logits, target);
}

Tensor soft_dice_loss(const Tensor& logits, const Tensor& target, double smooth) {
  LossSpec spec;
  spec.op = "soft_dice_loss";
  spec.w_dice = 1;
  spec.smooth = smooth;
  return fused_loss(spec, amp::OpKind::DiceLoss, logits, target);
}

Tensor segmentation_loss(const Tensor& logits, const Tensor& target) {
  LossSpec spec;
  spec.op = "segmentation_loss";
  spec.w_ce = 1;
  spec.w_dice = 1;
  return fused_loss(spec, amp::OpKind::CrossEntropy, logits, target);
}

// ---- DeferredLabelCheck ----------------------------------------------------------------------

namespace {
thread_local DeferredLabelCheck* current_label_check = nullptr;
}  // namespace

// The flag holds all ones ("no bad label", the largest position, which atomicMin keeps until a real
// one arrives): -1 as an Int64.
DeferredLabelCheck::DeferredLabelCheck()
    : flag_(Tensor::full({1}, -1.0, kInt64, Device::CUDA)), enclosing_(current_label_check) {
  current_label_check = this;
}

DeferredLabelCheck::~DeferredLabelCheck() { current_label_check = enclosing_; }

DeferredLabelCheck* DeferredLabelCheck::current() { return current_label_check; }

void DeferredLabelCheck::check(const std::string& where) {
  const auto position = static_cast<int64_t>(flag_.item());  // the host waits for the stream here
  if (position == -1) return;
  flag_.fill_(-1.0);
  HG_FAIL(where << ": a target label outside [0, C) at flat index " << position
                << " of a batch since the last check (segmentation_loss on CUDA, checked on the device and read "
                   "back late: the batch's step is not identified); the labels must be class indices");
}

}  // namespace halfgrad::ops
