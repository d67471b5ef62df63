// elementwise_cuda.h - CUDA launchers of the elementwise ops (plain C++; kernels in elementwise_cuda.cu).
// Tensor-level: each takes CUDA tensors of float32, float16 or bfloat16 in either memory format and returns a
// new CUDA tensor. Errors (halfgrad::Error) name the op and the shapes.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace halfgrad::cuda {

enum class BinaryOp { Add, Sub, Mul, Div };

/// y = a (op) b broadcast to `out_shape` (from ops::broadcast_shapes). a and b: one dtype (float32 or
/// float16), on CUDA; y has that dtype. Memory format of y: that of the operand whose shape is
/// `out_shape` (a first), else of the first 5-D operand; a 5-D output only, otherwise contiguous.
/// Paths: same shape and format -> one flat loop (16-byte packs); same shape, other format -> b is
/// converted to a's format first; a one-element operand -> flat loop reading it from device memory;
/// a per-channel operand ((1, C, 1, 1, 1), (C, 1, 1, 1)) against a 5-D one -> flat loop that derives
/// the channel from the physical index; anything else -> the general strided-broadcast loop.
Tensor binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, const Shape& out_shape);

enum class UnaryOp {
  Affine,   // scale * x + shift
  Exp,      // exp(x)
  Log,      // log(x)
  Pow,      // x ^ exponent
  PowGrad,  // exponent * x ^ (exponent - 1)   (pow's derivative)
};
struct UnaryFn {
  UnaryOp kind = UnaryOp::Affine;
  double scale = 1, shift = 0;  // Affine
  double exponent = 1;          // Pow, PowGrad
};
/// y = fn(x) elementwise, same shape and memory format as x, dtype `out` (float32, float16 or bfloat16), FP32 math.
Tensor unary(const char* op, const Tensor& x, Dtype out, const UnaryFn& fn);

/// y (shape `shape`, `format`, dtype `out`) = scale * g broadcast to `shape` (g's shape broadcasts to
/// it). The backward of the reductions, and bias rows for linear.
Tensor broadcast_scaled(const char* op, const Tensor& g, const Shape& shape, MemoryFormat format, double scale, Dtype out);

/// Element strides of each logical dim of t's buffer: row-major for Contiguous; for ChannelsLast3d
/// (N, C, D, H, W) stored NDHWC: {D*H*W*C, 1, H*W*C, W*C, C}.
std::vector<int64_t> physical_strides(const Tensor& t);
/// The logical dims in the order the buffer stores them, outermost first ({0, 2, 3, 4, 1} for NDHWC).
std::vector<int> physical_order(int64_t ndim, MemoryFormat format);

}  // namespace halfgrad::cuda
