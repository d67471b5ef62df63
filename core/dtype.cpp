#include "core/dtype.h"

namespace halfgrad {

size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::Float32: return 4;
    case Dtype::Float16: return 2;
    case Dtype::Float64: return 8;
    case Dtype::Int64: return 8;
    case Dtype::BFloat16: return 2;
  }
  return 0;
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "float32";
    case Dtype::Float16: return "float16";
    case Dtype::Float64: return "float64";
    case Dtype::Int64: return "int64";
    case Dtype::BFloat16: return "bfloat16";
  }
  return "?";
}

// Float16 and BFloat16 share rank 0: the lattice has two bottoms, joined at Float32.
static int float_rank(Dtype d) { return is_reduced_float(d) ? 0 : d == kFloat32 ? 1 : d == kFloat64 ? 2 : -1; }

Dtype promote_types(Dtype a, Dtype b) {
  if (!is_floating(a)) return b;
  if (!is_floating(b)) return a;
  if (a != b && is_reduced_float(a) && is_reduced_float(b)) return kFloat32;  // f16 with bf16
  return float_rank(a) >= float_rank(b) ? a : b;
}

}  // namespace halfgrad
