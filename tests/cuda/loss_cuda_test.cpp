// loss_cuda_test.cpp - cross_entropy, soft_dice_loss and segmentation_loss on CUDA (ops/loss/loss_cuda.cu)
// against the CPU op in float64 on the same logits and labels: the loss and dlogits through backward(),
// float32 / float16 logits, NCDHW / NDHWC, every class present or one absent, and the label errors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops/loss/loss.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"

namespace halfgrad {
namespace {

using testing::check_close;
using testing::check_error;
using testing::rtol_for;
using testing::to_cuda;

using LossFn = std::function<Tensor(const Tensor&, const Tensor&)>;

struct NamedLoss {
  const char* name;
  LossFn fn;
};

const std::vector<NamedLoss>& losses() {
  static const std::vector<NamedLoss> l = {
      {"cross_entropy", [](const Tensor& x, const Tensor& t) { return ops::cross_entropy(x, t); }},
      {"soft_dice_loss", [](const Tensor& x, const Tensor& t) { return ops::soft_dice_loss(x, t); }},
      {"segmentation_loss", [](const Tensor& x, const Tensor& t) { return ops::segmentation_loss(x, t); }},
  };
  return l;
}

// Labels in [0, C), skipping class `absent` (-1: none skipped).
Tensor labels(const Shape& s, int64_t C, int64_t absent, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v(static_cast<size_t>(shape_numel(s)));
  for (int64_t& e : v) {
    do e = g.randint(C);
    while (e == absent && C > 1);
  }
  return Tensor::from_labels(v, s);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_double_vector()) m = std::max(m, std::fabs(v));
  return m;
}

// grad_scale: the incoming gradient (a CUDA scalar), or 0 for backward() without one (a CPU seed of 1).
void check_loss(const NamedLoss& L, const Shape& s, Dtype dt, MemoryFormat f, int64_t absent, double grad_scale,
                uint64_t seed) {
  INFO(std::string(L.name) << " " << std::string(dtype_name(dt)) << std::string(f == MemoryFormat::ChannelsLast3d ? " NDHWC " : " NCDHW ") << shape_str(s)
              << " absent class " << absent << " grad " << grad_scale);
  Shape ts = s;
  ts.erase(ts.begin() + 1);
  const Tensor x = testing::random_tensor(s, seed, dt, 2.0);
  const Tensor t = labels(ts, s[1], absent, seed + 1);
  Tensor xc = to_cuda(x, f).set_requires_grad(true);
  Tensor lc = L.fn(xc, to_cuda(t));
  Tensor x64 = x.cast_copy(kFloat64).set_requires_grad(true);
  Tensor l64 = L.fn(x64, t);
  if (grad_scale == 0) {
    lc.backward();
    l64.backward();
  } else {
    lc.backward(to_cuda(Tensor::scalar(grad_scale)));
    l64.backward(Tensor::scalar(grad_scale, kFloat64));
  }
  CHECK(lc.is_cuda());
  CHECK(lc.dtype() == dt);
  CHECK(lc.dim() == 0);
  check_close(lc, l64, rtol_for(dt), dt == kFloat16 ? 1e-3 : 1e-6, "loss");
  REQUIRE(xc.grad().defined());
  CHECK(xc.grad().memory_format() == f);
  CHECK(xc.grad().dtype() == dt);
  // dlogits are O(1/(N*S)): the atol is relative to the largest one
  const double at = (dt == kFloat16 ? 2e-3 : 1e-5) * max_abs(x64.grad());
  check_close(xc.grad(), x64.grad(), rtol_for(dt), at, "dlogits");
}

}  // namespace

CUDA_TEST_CASE("losses cuda f32/f16 NCDHW/NDHWC: loss and dlogits vs CPU f64, classes present and absent") {
  const std::vector<Shape> shapes = {{2, 3, 5, 7, 6}, {3, 4, 4, 5, 3}, {2, 2, 16, 16, 16}, {1, 3, 20, 20, 20}};
  uint64_t seed = 700;
  for (const NamedLoss& L : losses())
    for (const Shape& s : shapes)
      for (Dtype dt : {kFloat32, kFloat16})
        for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d})
          for (int64_t absent : {int64_t{-1}, int64_t{1}})
            check_loss(L, s, dt, f, absent, absent < 0 ? 0.0 : 2.5, seed += 10);
}

CUDA_TEST_CASE("losses cuda odd class counts and ranks: C = 1, C = 17, (N, C) and (N, C, L) logits") {
  uint64_t seed = 800;
  for (const NamedLoss& L : losses())
    for (Dtype dt : {kFloat32, kFloat16}) {
      check_loss(L, {2, 1, 3, 4, 5}, dt, MemoryFormat::ChannelsLast3d, -1, 0.0, seed += 10);
      check_loss(L, {2, 17, 3, 4, 5}, dt, MemoryFormat::ChannelsLast3d, 5, 1.0, seed += 10);
      check_loss(L, {2, 17, 3, 4, 5}, dt, MemoryFormat::Contiguous, -1, 1.0, seed += 10);
      check_loss(L, {6, 4}, dt, MemoryFormat::Contiguous, -1, 0.0, seed += 10);
      check_loss(L, {3, 4, 9}, dt, MemoryFormat::Contiguous, -1, 0.0, seed += 10);
    }
}

CUDA_TEST_CASE("losses cuda errors: label out of range (the first one named), mixed devices, dtypes") {
  const Shape s = {2, 3, 4, 5, 6};
  const Tensor xc = to_cuda(testing::random_tensor(s, 1), MemoryFormat::ChannelsLast3d);
  std::vector<int64_t> v(2 * 4 * 5 * 6, 1);
  v[1 * 120 + 2 * 30 + 3 * 6 + 4] = -1;  // the later one: [1, 2, 3, 4]
  v[0 * 120 + 3 * 30 + 1 * 6 + 2] = 3;   // the first one: [0, 3, 1, 2]
  const Tensor bad = Tensor::from_labels(v, {2, 4, 5, 6});
  for (const NamedLoss& L : losses())
    check_error([&] { L.fn(xc, to_cuda(bad)); },
                {L.name, "target value 3", "[0, 3, 1, 2]", "outside [0, 3)", "[2, 3, 4, 5, 6]"});
  v[0 * 120 + 3 * 30 + 1 * 6 + 2] = 1;
  check_error([&] { ops::segmentation_loss(xc, to_cuda(Tensor::from_labels(v, {2, 4, 5, 6}))); },
              {"segmentation_loss", "target value -1", "[1, 2, 3, 4]"});
  // After a failed call the next one works (the flag is per call).
  v[1 * 120 + 2 * 30 + 3 * 6 + 4] = 2;
  Tensor ok = ops::segmentation_loss(xc, to_cuda(Tensor::from_labels(v, {2, 4, 5, 6})));
  CHECK(std::isfinite(ok.item()));
  const Tensor t_cpu = Tensor::from_labels(v, {2, 4, 5, 6});
  check_error([&] { ops::cross_entropy(xc, t_cpu); }, {"cross_entropy", "target", "cpu", "cuda"});
  check_error([&] { ops::cross_entropy(xc, to_cuda(t_cpu.cast_copy(kFloat32))); }, {"cross_entropy", "int64"});
}

}  // namespace halfgrad
