// cuda_test_case.h - CUDA_TEST_CASE and the upload helper, without cuda_test.h's check_close (whose
// signature is the one tests/golden.h also defines), for CUDA tests that read golden files.
// CUDA_TEST_CASE("conv3d cuda f16 NDHWC ...") declares a doctest case that runs only where a CUDA
// device is usable; elsewhere doctest reports it as skipped and one line names it.
#pragma once
#include <doctest/doctest.h>

#include <iostream>

#include "core/cuda/runtime.h"
#include "core/tensor.h"

namespace halfgrad::testing {

/// True where CUDA tests can run; otherwise prints "skipped: <name>: ..." once per case.
inline bool cuda_test_enabled(const char* name) {
  const bool ok = cuda::is_available();
  if (!ok) std::cout << "skipped: " << name << ": " << cuda::device_description() << "\n";
  return ok;
}

/// A CUDA copy of `t` in `format` whose values are the same; also used to upload test inputs.
inline Tensor to_cuda(const Tensor& t, MemoryFormat format = MemoryFormat::Contiguous) {
  return t.copy_to(Device::CUDA).format_copy(t.dim() == 5 ? format : MemoryFormat::Contiguous);
}

}  // namespace halfgrad::testing

#define HG_CUDA_CAT_(a, b) a##b
#define HG_CUDA_CAT(a, b) HG_CUDA_CAT_(a, b)
/// A doctest case that runs only with a CUDA device, reported as skipped (and named on stdout) without.
#define CUDA_TEST_CASE(name) \
  TEST_CASE(name * doctest::skip(!::halfgrad::testing::cuda_test_enabled(name)))
