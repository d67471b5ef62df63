#include "core/dtype.h"

namespace halfgrad {

size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::Float32: return 4;
    case Dtype::Float16: return 2;
    case Dtype::Float64: return 8;
    case Dtype::Int64: return 8;
  }
  return 0;
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "float32";
    case Dtype::Float16: return "float16";
    case Dtype::Float64: return "float64";
    case Dtype::Int64: return "int64";
  }
  return "?";
}

static int float_rank(Dtype d) { return d == kFloat16 ? 0 : d == kFloat32 ? 1 : d == kFloat64 ? 2 : -1; }

Dtype promote_types(Dtype a, Dtype b) {
  if (!is_floating(a)) return b;
  if (!is_floating(b)) return a;
  return float_rank(a) >= float_rank(b) ? a : b;
}

}  // namespace halfgrad
