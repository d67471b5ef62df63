// dtype.h - the element types a halfgrad Tensor can hold.
//
//   Float32  IEEE binary32, the default and the type of master weights.
//   Float16  IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits), stored as uint16_t bit patterns;
//            on the CPU every op computes in FP32 and rounds its result to half (round-to-nearest-even),
//            which is what a Tensor Core does with FP16 operands and FP32 accumulation.
//   BFloat16 bfloat16 (1 sign, 8 exponent, 7 mantissa bits): FP32's exponent range with 8 bits of
//            precision, stored as bfloat16_bits (core/bfloat16.h). Same CPU rule as Float16: compute in
//            FP32, round the result once (round-to-nearest-even). FP32's range means no loss scaling.
//   Float64  for gradient checks (central differences need the extra precision).
//   Int64    class labels.
#pragma once
#include <cstddef>
#include <cstdint>

namespace halfgrad {

// BFloat16 comes last, so the older dtypes keep their enum values (autocast/cast_stats.cpp indexes by them).
enum class Dtype : uint8_t { Float32, Float16, Float64, Int64, BFloat16 };

constexpr Dtype kFloat32 = Dtype::Float32;
constexpr Dtype kFloat16 = Dtype::Float16;
constexpr Dtype kFloat64 = Dtype::Float64;
constexpr Dtype kInt64 = Dtype::Int64;
constexpr Dtype kBFloat16 = Dtype::BFloat16;

/// Every dtype, in enum order: for loops that map names or codes back to a Dtype.
inline constexpr Dtype kAllDtypes[] = {kFloat32, kFloat16, kFloat64, kInt64, kBFloat16};
inline constexpr size_t kNumDtypes = sizeof(kAllDtypes) / sizeof(kAllDtypes[0]);

/// Bytes per element: 4, 2, 8, 8, 2.
size_t dtype_size(Dtype d);
/// "float32", "float16", "float64", "int64", "bfloat16" (PyTorch's names).
const char* dtype_name(Dtype d);
inline bool is_floating(Dtype d) { return d != Dtype::Int64; }
/// The 16-bit floating types (Float16, BFloat16): stored in 2 bytes, computed in FP32 on the CPU
/// (ops/common.h compute_dtype) and as float in CUDA kernels (core/cuda/check.cuh to_float).
inline bool is_reduced_float(Dtype d) { return d == Dtype::Float16 || d == Dtype::BFloat16; }

/// The wider of two floating types, as PyTorch's type promotion: f16 < f32 < f64 and bf16 < f32 < f64;
/// f16 with bf16 gives f32 (neither holds the other: f16 has more precision, bf16 more range), as
/// torch.promote_types(torch.float16, torch.bfloat16).
Dtype promote_types(Dtype a, Dtype b);

}  // namespace halfgrad
