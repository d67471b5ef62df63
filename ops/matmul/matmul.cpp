// matmul.cpp - matmul and linear on the CPU with Eigen's GEMM (math and shapes in matmul.h).
// FP16 operands are widened to FP32, multiplied with FP32 accumulation, and the product is rounded to
// FP16 once; Float64 multiplies in double. Large products are cut into 4 fixed blocks that the OpenMP
// threads share (gemm): the same bits whatever the thread count.
//
// CUDA tensors: float16 operands run on the Tensor Core GEMM (gemm_cuda.h: FP16 operands, FP32
// accumulation, the output written once in the op's dtype); float32 operands on the FP32 SIMT GEMM
// (matmul_simt_cuda.h, CUDA cores, no TF32). The backward products are the same GEMMs with
// transposed layouts, no transposed copies; linear's bias is put into C first and added by the
// GEMM's epilogue (beta = 1), so an FP16 output is rounded once; its gradient is a column sum with
// FP32 accumulation (reduce_cuda.h).
#include "ops/matmul/matmul.h"

#include <omp.h>

#include <Eigen/Core>
#include <vector>

#include "core/nvtx.h"
#include "ops/common.h"
#ifdef HALFGRAD_CUDA
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/matmul/matmul_simt_cuda.h"
#include "ops/reduce/reduce_cuda.h"
#endif

namespace halfgrad::ops {

namespace {

template <typename T>
using MatR = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapR = Eigen::Map<MatR<T>>;
template <typename T>
using ConstMapR = Eigen::Map<const MatR<T>>;

enum class Trans { N, T };

// About 10 us of work on one core: below it an OpenMP region costs more than it saves.
constexpr int64_t kMinParallelMacs = int64_t{1} << 20;
// Blocks of a parallel product: a static schedule gives 1, 2 or 4 threads the same work.
constexpr int64_t kGemmBlocks = 4;

// C (m, n) = op(A) * op(B) in compute precision, op = identity or transpose; A and B are 2-D of one dtype.
// Products of at least kMinParallelMacs multiply-adds have the longer side of C cut into kGemmBlocks
// blocks, each a single-threaded Eigen GEMM inside our parallel loop; smaller ones run on the calling
// thread. The blocks follow from the shapes alone, never from the thread count: Eigen sums the last
// rows of a product with split accumulators, so an element's bits depend on where its block ends. Eigen's own GEMM threading is kept off (its workers spin-wait on each other, and stall for
// whole scheduler time slices when another process takes a core; see ops/conv/conv_gemm.cpp).
#ifdef HALFGRAD_CUDA
// C (m, n) = op(a) * op(b) (+ bias broadcast over the rows) on CUDA, in dtype `out`. a and b are 2-D,
// contiguous (row-major), of one dtype: float16 / bfloat16 -> Tensor Cores, float32 -> SIMT FP32.
Tensor gemm_cuda(const char* op, const Tensor& a, Trans ta, const Tensor& b, Trans tb, Dtype out,
                 const Tensor& bias = Tensor()) {
  HG_CHECK(a.dtype() == b.dtype(), op << ": operands " << dtype_name(a.dtype()) << " and " << dtype_name(b.dtype())
                                      << " differ on cuda");
  const int64_t m = ta == Trans::N ? a.size(0) : a.size(1);
  const int64_t k = ta == Trans::N ? a.size(1) : a.size(0);
  const int64_t n = tb == Trans::N ? b.size(1) : b.size(0);
  HG_CHECK((tb == Trans::N ? b.size(0) : b.size(1)) == k,
           op << ": inner extents differ: " << shape_str(a.shape()) << " x " << shape_str(b.shape()));
  Tensor c = bias.defined() ? cuda::broadcast_scaled(op, bias, {m, n}, MemoryFormat::Contiguous, 1.0, out)
                            : Tensor::empty({m, n}, out, Device::CUDA);
  if (m == 0 || n == 0) return c;
  if (k == 0) {  // an empty product: C = bias, or 0
    if (!bias.defined()) c.zero_();
    return c;
  }
  const auto layout = [](Trans t) { return t == Trans::N ? cuda::GemmLayout::N : cuda::GemmLayout::T; };
  const float beta = bias.defined() ? 1.f : 0.f;
  if (is_reduced_float(a.dtype())) {
    HG_CHECK(out == a.dtype() || out == kFloat32, op << ": output dtype " << dtype_name(out) << " for "
                                                     << dtype_name(a.dtype()) << " operands on cuda");
    cuda::GemmArgs g{m, n, k, static_cast<const uint16_t*>(a.raw_data()), a.size(1), layout(ta),
                     static_cast<const uint16_t*>(b.raw_data()), b.size(1), layout(tb), c.raw_data(), n,
                     out != kFloat32};
    g.bf16 = a.dtype() == kBFloat16;
    g.beta = beta;
    g.op = op;
    cuda::gemm_f16(g);
  } else {
    HG_CHECK(a.dtype() == kFloat32 && out == kFloat32,
             op << ": CUDA matmul takes float32, float16 or bfloat16 operands, got " << dtype_name(a.dtype()) << " -> "
                << dtype_name(out));
    cuda::GemmF32Args g{m, n, k, a.data<float>(), a.size(1), layout(ta), b.data<float>(), b.size(1), layout(tb),
                        c.data<float>(), n};
    g.beta = beta;
    g.op = op;
    cuda::gemm_f32_simt(g);
  }
  return c;
}

// The gradient dy of an op whose output dtype is dt, in dt.
Tensor in_dtype(const Tensor& gy, Dtype dt) { return gy.dtype() == dt ? gy : gy.cast_copy(dt); }
#endif

Tensor gemm(const Tensor& a, Trans ta, const Tensor& b, Trans tb) {
  const Tensor ca = to_compute(a), cb = to_compute(b);
  const int64_t m = ta == Trans::N ? a.size(0) : a.size(1);
  const int64_t k = ta == Trans::N ? a.size(1) : a.size(0);
  const int64_t n = tb == Trans::N ? b.size(1) : b.size(0);
  Tensor c = Tensor::empty({m, n}, ca.dtype());
  const bool split_rows = m >= n;
  const int64_t side = split_rows ? m : n;
  const int64_t blocks = m * n * k >= kMinParallelMacs ? std::min(kGemmBlocks, side) : 1;
  const SerialEigen serial(blocks == 1);
  const int64_t step = (side + blocks - 1) / std::max<int64_t>(blocks, 1);
  dispatch_compute(ca.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const ConstMapR<T> A(ca.data<T>(), a.size(0), a.size(1));
    const ConstMapR<T> B(cb.data<T>(), b.size(0), b.size(1));
    MapR<T> C(c.data<T>(), m, n);
    auto product = [&](const auto& opA, const auto& opB) {
#pragma omp parallel for schedule(static) if (blocks > 1)
      for (int64_t i = 0; i < blocks; ++i) {
        const int64_t s0 = i * step, len = std::min(step, side - s0);
        if (len <= 0) continue;
        if (split_rows) C.middleRows(s0, len).noalias() = opA.middleRows(s0, len) * opB;
        else C.middleCols(s0, len).noalias() = opA * opB.middleCols(s0, len);
      }
    };
    if (ta == Trans::N && tb == Trans::N) product(A, B);
    else if (ta == Trans::N) product(A, B.transpose());
    else if (tb == Trans::N) product(A.transpose(), B);
    else product(A.transpose(), B.transpose());
  });
  if (m * n == 0 || k == 0) c.zero_();
  return c;
}

// Column sums of g (rows, cols) -> (cols), accumulated in double.
Tensor column_sums(const Tensor& g) {
  const Tensor cg = to_compute(g);
  const int64_t rows = g.size(0), cols = g.size(1);
  std::vector<double> acc(cols, 0.0);
  dispatch_compute(cg.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = cg.data<T>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) acc[j] += p[i * cols + j];
  });
  return Tensor::from_vector(acc, {cols}, cg.dtype());
}

Tensor out_dtype(const Tensor& t, Dtype dt) { return t.defined() ? from_compute(t, dt) : t; }

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  NvtxRange nvtx_range("matmul");
  check_floating_tensor("matmul", "first operand", a);
  check_floating_tensor("matmul", "second operand", b);
  check_same_device("matmul", "first operand", a, "second operand", b);
  check_dim("matmul", "first operand", a, 2, "(M, K)");
  check_dim("matmul", "second operand", b, 2, "(K, N)");
  HG_CHECK(a.size(1) == b.size(0), "matmul: inner extents differ: " << shape_str(a.shape()) << " x "
                                                                    << shape_str(b.shape()) << " (" << a.size(1)
                                                                    << " vs " << b.size(0) << ")");
  const Dtype dt = amp::autocast_dtype(amp::OpKind::Matmul, {a.dtype(), b.dtype()});
  const Tensor ac = autocast_cast(a, dt), bc = autocast_cast(b, dt);
  const bool ga = ac.requires_grad(), gb = bc.requires_grad();
#ifdef HALFGRAD_CUDA
  if (ac.is_cuda()) {
    Tensor y = gemm_cuda("matmul", ac, Trans::N, bc, Trans::N, dt);
    return autograd::record("matmul", y, {ac, bc}, {autograd::Save::input(0, "a", gb), autograd::Save::input(1, "b", ga)},
                            [ga, gb, dt, as = gb ? ac.detach() : Tensor(), bs = ga ? bc.detach() : Tensor()](
                                const Tensor& gy) -> std::vector<Tensor> {
                              const Tensor g = in_dtype(gy, dt);
                              Tensor da, db;
                              if (ga) da = gemm_cuda("matmul backward", g, Trans::N, bs, Trans::T, dt);  // dy b^T
                              if (gb) db = gemm_cuda("matmul backward", as, Trans::T, g, Trans::N, dt);  // a^T dy
                              return {da, db};
                            });
  }
#endif
  Tensor y = from_compute(gemm(ac, Trans::N, bc, Trans::N), dt);
  return autograd::record("matmul", y, {ac, bc}, {autograd::Save::input(0, "a", gb), autograd::Save::input(1, "b", ga)},
                          [ga, gb, dt, as = gb ? ac.detach() : Tensor(), bs = ga ? bc.detach() : Tensor()](
                              const Tensor& gy) -> std::vector<Tensor> {
                            Tensor da, db;
                            if (ga) da = gemm(gy, Trans::N, bs, Trans::T);  // dy b^T
                            if (gb) db = gemm(as, Trans::T, gy, Trans::N);  // a^T dy
                            return {out_dtype(da, dt), out_dtype(db, dt)};
                          });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  NvtxRange nvtx_range("linear");
  check_floating_tensor("linear", "input", x);
  check_floating_tensor("linear", "weight", w);
  check_same_device("linear", "input", x, "weight", w);
  if (b.defined()) {
    check_floating_tensor("linear", "bias", b);
    check_same_device("linear", "input", x, "bias", b);
  }
  check_dim("linear", "input", x, 2, "(B, in)");
  check_dim("linear", "weight", w, 2, "(out, in)");
  HG_CHECK(x.size(1) == w.size(1), "linear: input " << shape_str(x.shape()) << " has " << x.size(1)
                                                    << " features but weight " << shape_str(w.shape()) << " expects "
                                                    << w.size(1));
  if (b.defined())
    HG_CHECK(b.dim() == 1 && b.size(0) == w.size(0), "linear: bias " << shape_str(b.shape()) << " must be 1-D with "
                                                                     << w.size(0) << " elements (the rows of weight "
                                                                     << shape_str(w.shape()) << ")");
  const Dtype dt = b.defined() ? amp::autocast_dtype(amp::OpKind::Linear, {x.dtype(), w.dtype(), b.dtype()})
                               : amp::autocast_dtype(amp::OpKind::Linear, {x.dtype(), w.dtype()});
  const Tensor xc = autocast_cast(x, dt), wc = autocast_cast(w, dt), bc = b.defined() ? autocast_cast(b, dt) : Tensor();
#ifdef HALFGRAD_CUDA
  if (xc.is_cuda()) {
    Tensor y = gemm_cuda("linear", xc, Trans::N, wc, Trans::T, dt, bc);  // x w^T + b
    const bool gx = xc.requires_grad(), gw = wc.requires_grad(), gb = bc.defined() && bc.requires_grad();
    return autograd::record("linear", y, {xc, wc, bc},
                            {autograd::Save::input(0, "input", gw), autograd::Save::input(1, "weight", gx)},
                            [gx, gw, gb, dt, xs = gw ? xc.detach() : Tensor(), ws = gx ? wc.detach() : Tensor()](
                                const Tensor& gy) -> std::vector<Tensor> {
                              const Tensor g = in_dtype(gy, dt);
                              Tensor dx, dw, db;
                              if (gx) dx = gemm_cuda("linear backward", g, Trans::N, ws, Trans::N, dt);  // dy w
                              if (gw) dw = gemm_cuda("linear backward", g, Trans::T, xs, Trans::N, dt);  // dy^T x
                              if (gb) db = cuda::sum_dims("linear backward", g, {true, false}, 1.0, dt).view_as_shape({g.size(1)});
                              return {dx, dw, db};
                            });
  }
#endif
  Tensor yc = gemm(xc, Trans::N, wc, Trans::T);  // x w^T
  if (bc.defined()) {
    const Tensor cb = to_compute(bc);
    dispatch_compute(yc.dtype(), [&](auto tag) {
      using T = decltype(tag);
      MapR<T>(yc.data<T>(), yc.size(0), yc.size(1)).rowwise() +=
          Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(cb.data<T>(), cb.numel());
    });
  }
  Tensor y = from_compute(yc, dt);
  const bool gx = xc.requires_grad(), gw = wc.requires_grad(), gb = bc.requires_grad();
  return autograd::record("linear", y, {xc, wc, bc},
                          {autograd::Save::input(0, "input", gw), autograd::Save::input(1, "weight", gx)},
                          [gx, gw, gb, dt, xs = gw ? xc.detach() : Tensor(), ws = gx ? wc.detach() : Tensor()](
                              const Tensor& gy) -> std::vector<Tensor> {
                            Tensor dx, dw, db;
                            if (gx) dx = gemm(gy, Trans::N, ws, Trans::N);  // dy w
                            if (gw) dw = gemm(gy, Trans::T, xs, Trans::N);  // dy^T x
                            if (gb) db = column_sums(gy);
                            return {out_dtype(dx, dt), out_dtype(dw, dt), out_dtype(db, dt)};
                          });
}

}  // namespace halfgrad::ops
