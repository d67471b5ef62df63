// common.h - what every CPU op shares: argument checks that name the op, and the dtype dispatch.
//
// Compute precision on the CPU: Float64 ops compute in double (gradient checks); Float32 and the 16-bit
// floats (Float16, BFloat16: is_reduced_float) compute in float. A 16-bit op converts its inputs to
// float, computes with FP32 accumulation, and rounds its output to its dtype once (round-to-nearest-
// even): the numerics of an FP16 / BF16 Tensor Core op.
#pragma once
#include <omp.h>

#include <string>
#include <vector>

#include "autocast/autocast.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/tensor.h"

namespace halfgrad::ops {

/// For ops (or paths) that run on the CPU only: throws "<op>: <what> is undefined / on cuda / channels-last".
void check_input(const char* op, const char* what, const Tensor& t);
/// Same, and requires a floating dtype.
void check_floating(const char* op, const char* what, const Tensor& t);

/// For ops with both a CPU and a CUDA path: defined; on the CPU also contiguous (NCDHW) - CPU kernels
/// read NCDHW only - and on CUDA float32 / float16 / bfloat16 / int64 (no float64 kernels; gradcheck runs on the CPU).
void check_tensor(const char* op, const char* what, const Tensor& t);
/// check_tensor, and a floating dtype.
void check_floating_tensor(const char* op, const char* what, const Tensor& t);
/// Throws "<op>: <what_b> is on cuda but <what_a> is on cpu" unless both live on one device.
void check_same_device(const char* op, const char* what_a, const Tensor& a, const char* what_b, const Tensor& b);
/// Throws unless t.dim() == d ("<op>: <what> must be 5-D (N, C, D, H, W), got [..]").
void check_dim(const char* op, const char* what, const Tensor& t, int64_t d, const char* layout);

/// The cast an op makes of an operand for autocast: x.to(dt), except that an FP32 leaf weight with
/// requires_grad cast to the region's lower dtype (amp::autocast_lower_dtype: FP16 or BF16) inside an
/// enabled AutocastGuard, with grad mode on, is cast once per region and reused (the weight-cast cache of autocast/autocast.h, as PyTorch's autocast `cached_cast`).
/// Differentiable either way: the gradient of every use flows back through the one cast to `x` in FP32.
/// A cached cast whose tape node was already consumed by a backward inside the region is made again.
/// Same errors as Tensor::to.
Tensor autocast_cast(const Tensor& x, Dtype dt);

/// The tensor an op computes with: Float16 / BFloat16 -> a Float32 copy; Float32 / Float64 -> itself
/// (no copy).
Tensor to_compute(const Tensor& t);
/// The dtype an op computes in for a storage dtype: Float16 / BFloat16 -> Float32, others unchanged.
inline Dtype compute_dtype(Dtype d) { return is_reduced_float(d) ? kFloat32 : d; }
/// Convert a compute-precision result to the op's output dtype (rounds once for Float16 / BFloat16).
Tensor from_compute(const Tensor& t, Dtype out_dtype);

/// Calls f(T{}) with T = double for Float64 and T = float otherwise.
template <typename F>
decltype(auto) dispatch_compute(Dtype d, F&& f) {
  if (d == kFloat64) return f(double{});
  return f(float{});
}

/// Within its scope (when active), Eigen's GEMM runs on the calling thread. Outside an OpenMP team Eigen starts its
// own for products above ~1e5 multiply-adds, and its workers spin-wait on each other many times per
// product: when another process takes one of the two cores, each wait lasts a scheduler time slice
// (a 0.1 ms product took 80 ms). The OpenMP thread count is per thread and restored on exit.
class SerialEigen {
 public:
  explicit SerialEigen(bool active) : prev_(omp_get_max_threads()), active_(active) {
    if (active_) omp_set_num_threads(1);
  }
  ~SerialEigen() {
    if (active_) omp_set_num_threads(prev_);
  }
  SerialEigen(const SerialEigen&) = delete;
  SerialEigen& operator=(const SerialEigen&) = delete;

 private:
  int prev_;
  bool active_;
};

/// Number of worker threads ops use (OpenMP), and whether n elements of work are worth splitting.
int num_threads();
// 2^17 elements: below that a parallel region costs more than it saves (an OpenMP barrier on a
// shared core can wait a whole scheduler slice).
inline bool parallel_worth(int64_t work) { return work >= (1 << 17); }

}  // namespace halfgrad::ops
