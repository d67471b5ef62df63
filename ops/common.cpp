#include "ops/common.h"

#include <omp.h>

namespace halfgrad::ops {

void check_input(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.defined(), op << ": " << what << " is an undefined tensor");
  HG_CHECK(t.device() == Device::CPU, op << ": " << what << " is on " << device_name(t.device())
                                         << "; " << op << " runs on the CPU only");
  check_tensor(op, what, t);  // the CPU's layout rule
}

void check_tensor(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.defined(), op << ": " << what << " is an undefined tensor");
  if (t.device() == Device::CPU) {
    HG_CHECK(!t.is_channels_last(), op << ": " << what << " " << shape_str(t.shape())
                                       << " is channels-last (NDHWC) on the CPU; CPU ops read NCDHW: call .contiguous()");
  } else {
    HG_CHECK(t.dtype() != kFloat64, op << ": " << what << " " << shape_str(t.shape())
                                       << " is float64 on cuda; CUDA ops take float32, float16 or bfloat16 (run float64 on the CPU)");
  }
}

void check_floating_tensor(const char* op, const char* what, const Tensor& t) {
  check_tensor(op, what, t);
  HG_CHECK(is_floating(t.dtype()), op << ": " << what << " must be a floating-point tensor, got "
                                      << dtype_name(t.dtype()) << " of shape " << shape_str(t.shape()));
}

void check_same_device(const char* op, const char* what_a, const Tensor& a, const char* what_b, const Tensor& b) {
  HG_CHECK(a.device() == b.device(), op << ": " << what_b << " is on " << device_name(b.device()) << " but " << what_a
                                        << " is on " << device_name(a.device()) << "; move both to one device with .to(Device)");
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  check_input(op, what, t);
  HG_CHECK(is_floating(t.dtype()), op << ": " << what << " must be a floating-point tensor, got "
                                      << dtype_name(t.dtype()) << " of shape " << shape_str(t.shape()));
}

void check_dim(const char* op, const char* what, const Tensor& t, int64_t d, const char* layout) {
  HG_CHECK(t.dim() == d, op << ": " << what << " must be " << d << "-D " << layout << ", got shape "
                            << shape_str(t.shape()));
}

Tensor to_compute(const Tensor& t) { return is_reduced_float(t.dtype()) ? t.cast_copy(kFloat32) : t; }

Tensor from_compute(const Tensor& t, Dtype out_dtype) {
  return t.dtype() == out_dtype ? t : t.cast_copy(out_dtype);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace halfgrad::ops
