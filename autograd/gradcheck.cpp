#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/node.h"
#include "core/error.h"

namespace halfgrad::autograd {

static double dot(const Tensor& a, const std::vector<double>& r) {
  std::vector<double> v = a.to_double_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
  return s;
}

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& opt) {
  for (size_t i = 0; i < inputs.size(); ++i)
    HG_CHECK(!inputs[i].requires_grad() || inputs[i].dtype() == kFloat64,
             "gradcheck: input " << i << " requires grad but is " << dtype_name(inputs[i].dtype()) << "; use float64");
  for (Tensor& t : inputs)
    if (t.requires_grad()) t.set_grad(Tensor());
  Tensor y = f(inputs);
  HG_CHECK(y.requires_grad(), "gradcheck: the function's output does not require grad");
  Generator gen(opt.seed);
  Tensor r = Tensor::randn(y.shape(), gen, y.dtype());
  const std::vector<double> rv = r.to_double_vector();
  y.backward(r);

  GradcheckResult res;
  std::ostringstream os;
  int shown = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor g = x.grad();
    std::vector<double> analytic = g.defined() ? g.to_double_vector() : std::vector<double>(x.numel(), 0.0);
    double* p = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = p[j];
      double fp, fm;
      {
        NoGradGuard ng;
        p[j] = orig + opt.eps;
        fp = dot(f(inputs), rv);
        p[j] = orig - opt.eps;
        fm = dot(f(inputs), rv);
        p[j] = orig;
      }
      x.bump_version();  // x[j] was written in place (and restored): one count per perturbed element
      const double numeric = (fp - fm) / (2 * opt.eps);
      const double err = std::fabs(numeric - analytic[j]);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (!(err <= opt.atol + opt.rtol * std::fabs(numeric))) {
        res.ok = false;
        if (shown++ < 5)
          os << "input " << k << " element " << j << ": analytic " << analytic[j] << ", numeric " << numeric << "\n";
      }
    }
  }
  res.report = os.str();
  return res;
}

}  // namespace halfgrad::autograd
