// gradcheck.h - compare an op's backward with central finite differences, in float64.
//
// For y = f(x_1..x_k) and a random cotangent r of y's shape, the analytic vector-Jacobian product
// (what backward computes, seeded with r) must equal the numerical one:
//     d<r, f(x)>/dx_j  ~=  (<r, f(x + eps e_j)> - <r, f(x - eps e_j)>) / (2 eps)
// for every element j of every input that requires grad. This is torch.autograd.gradcheck's test
// (and flashlight's), with a random projection so one backward covers all outputs.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;  // for the cotangent
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string report;  // first mismatches: input, element, analytic, numeric
};

/// `inputs` must be float64; those with requires_grad are checked. `f` is called many times and must
/// be deterministic. Returns the comparison (never throws on a mismatch; throws on bad arguments).
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& opt = GradcheckOptions());

}  // namespace halfgrad::autograd
