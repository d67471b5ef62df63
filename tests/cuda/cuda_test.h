// cuda_test.h - what every CUDA test shares.
//
// CUDA_TEST_CASE("conv3d cuda f16 NDHWC ...") declares a doctest case that runs only where a CUDA
// device is usable. Elsewhere (CI, a laptop) doctest reports it as skipped and one line per case names
// it: "skipped: <name>: CUDA unavailable: <why>". The CUDA code itself is still compiled there.
//
// The reference is always the CPU op on the same inputs, in float64 where the op supports it (or
// float32), compared by the dtype's tolerance: |gpu - ref| <= atol + rtol * |ref| elementwise,
// with rtol 1e-5 for float32 and 2e-3 for float16 (each FP16 rounding is 2^-11 relative; ops that
// sum many FP16 products before one rounding need the looser conv / GEMM tolerances they state).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "tests/cuda/cuda_test_case.h"

namespace halfgrad::testing {

/// Fresh random inputs for every check (never zeros): N(0, 1) seeded by the case.
inline Tensor random_tensor(const Shape& s, uint64_t seed, Dtype dt = kFloat32, double std = 1.0) {
  Generator g(seed);
  return Tensor::randn(s, g, dt, std);
}

/// Elementwise |got - want| <= atol + rtol * |want|; reports the worst element. NaN never passes.
/// In an unnamed namespace (a copy per test file): tests/golden.h declares a check_close with the same
/// parameter types (atol and rtol the other way round, NaN matching NaN), and two inline functions of
/// one name and signature in one binary are an ODR violation: the linker kept one of them for every
/// call it had not inlined, so a CPU golden test could run this comparison, or a CUDA test that one.
namespace {
inline void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what << ": shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape()));
  const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = atol + rtol * std::fabs(w[i]);
    const double err = std::fabs(g[i] - w[i]);
    if (!(err <= tol)) {  // NaN fails here
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - tol;
      if (worst < 0 || excess > worst_excess) { worst = static_cast<int64_t>(i); worst_excess = excess; }
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << g.size() << " elements out of tolerance (rtol " << rtol << ", atol "
                               << atol << "); worst at " << worst << ": got " << (worst >= 0 ? g[worst] : 0) << ", want "
                               << (worst >= 0 ? w[worst] : 0));
}

}  // namespace

/// Relative Frobenius error ||got - ref|| / ||ref|| (||ref|| taken as 1 when it is 0), in float64: the
/// conv tests' whole-tensor comparison of sums of many FP16 products.
inline double rel_error(const Tensor& got, const Tensor& ref) {
  REQUIRE(got.defined());
  REQUIRE(got.shape() == ref.shape());
  const std::vector<double> g = got.to_double_vector(), r = ref.to_double_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - r[i]) * (g[i] - r[i]);
    den += r[i] * r[i];
  }
  return std::sqrt(num) / std::sqrt(den > 0 ? den : 1.0);
}

/// Tolerances of one FP rounding per output for each dtype (see the header comment).
inline double rtol_for(Dtype d) { return d == kBFloat16 ? 1e-2 : d == kFloat16 ? 2e-3 : d == kFloat32 ? 1e-5 : 1e-12; }

}  // namespace halfgrad::testing
