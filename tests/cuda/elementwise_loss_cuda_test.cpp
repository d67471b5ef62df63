// elementwise_loss_cuda_test.cpp - mse_loss, l1_loss and binary_cross_entropy_with_logits on CUDA
// (ops/loss/elementwise_loss_cuda.cu) against the CPU: float32 and float16, NCDHW and NDHWC, every
// reduction, BCE with weight and pos_weight; loss, dx and dtarget.
#include <functional>
#include <string>

#include "autocast/autocast.h"
#include "ops/loss/elementwise_loss.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;
using ops::Reduction;

CUDA_TEST_CASE("elementwise loss cuda f32/f16 NCDHW/NDHWC mse/l1/bce, mean/sum/none (2,3,5,7,6): loss, dx, dtarget") {
  const std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&, Reduction)>> losses[] = {
      {"mse_loss", [](const Tensor& x, const Tensor& t, Reduction r) { return ops::mse_loss(x, t, r); }},
      {"l1_loss", [](const Tensor& x, const Tensor& t, Reduction r) { return ops::l1_loss(x, t, r); }},
      {"bce_with_logits",
       [](const Tensor& x, const Tensor& t, Reduction r) { return ops::binary_cross_entropy_with_logits(x, t, {}, {}, r); }},
  };
  const Shape s{2, 3, 5, 7, 6};
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d})
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt) + " reduction " +
                                 std::to_string(static_cast<int>(r));
        SUBCASE(what.c_str()) {
          // Sum: 1260 terms; float16 rounds each term's gradient once.
          const Tolerance t = dt == kFloat16 ? Tolerance{5e-3, 5e-3} : Tolerance{1e-5, 1e-4};
          for (const auto& [name, f] : losses)
            compare_with_cpu(std::string(name) + " " + what, {{s, Values::Normal, fmt}, {s, Values::Positive, fmt}}, dt,
                             [&](const std::vector<Tensor>& in) { return f(in[0], in[1], r); }, t, t);
        }
      }
}

CUDA_TEST_CASE("bce_with_logits cuda f32 NDHWC with weight (1,3,1,1,1) and pos_weight (6) matches the CPU") {
  const Shape s{2, 3, 5, 7, 6};
  const Tensor w = make_input({{1, 3, 1, 1, 1}, Values::Positive}, kFloat32, 5);
  const Tensor pw = make_input({{6}, Values::Positive}, kFloat32, 6);
  compare_with_cpu("bce weights", {{s, Values::Normal, MemoryFormat::ChannelsLast3d}, {s, Values::Positive, MemoryFormat::ChannelsLast3d}},
                   kFloat32,
                   [&](const std::vector<Tensor>& in) {
                     const bool cuda = in[0].is_cuda();
                     return ops::binary_cross_entropy_with_logits(in[0], in[1], cuda ? to_cuda(w) : w, cuda ? to_cuda(pw) : pw);
                   },
                   {1e-5, 1e-5}, {1e-5, 1e-6});
}

CUDA_TEST_CASE("elementwise loss cuda: float16 logits under autocast give a float32 loss (the FP32 list)") {
  const Tensor x = to_cuda(random_tensor({4, 8}, 3, kFloat16)), t = to_cuda(random_tensor({4, 8}, 4, kFloat16));
  amp::AutocastGuard on;
  CHECK(ops::mse_loss(x, t).dtype() == kFloat32);
  CHECK(ops::binary_cross_entropy_with_logits(x, t).dtype() == kFloat32);
}
