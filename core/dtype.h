// dtype.h - the element types a halfgrad Tensor can hold.
//
//   Float32  IEEE binary32, the default and the type of master weights.
//   Float16  IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits), stored as uint16_t bit patterns;
//            on the CPU every op computes in FP32 and rounds its result to half (round-to-nearest-even),
//            which is what a Tensor Core does with FP16 operands and FP32 accumulation.
//   Float64  for gradient checks (central differences need the extra precision).
//   Int64    class labels.
#pragma once
#include <cstddef>
#include <cstdint>

namespace halfgrad {

enum class Dtype : uint8_t { Float32, Float16, Float64, Int64 };

constexpr Dtype kFloat32 = Dtype::Float32;
constexpr Dtype kFloat16 = Dtype::Float16;
constexpr Dtype kFloat64 = Dtype::Float64;
constexpr Dtype kInt64 = Dtype::Int64;

/// Bytes per element: 4, 2, 8, 8.
size_t dtype_size(Dtype d);
/// "float32", "float16", "float64", "int64" (PyTorch's names).
const char* dtype_name(Dtype d);
inline bool is_floating(Dtype d) { return d != Dtype::Int64; }

/// The wider of two floating types, as PyTorch's type promotion: f16 < f32 < f64.
Dtype promote_types(Dtype a, Dtype b);

}  // namespace halfgrad
