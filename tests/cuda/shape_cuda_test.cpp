// CUDA reshape and one_hot against the CPU ops: reshape of NCDHW and NDHWC tensors forward and
// backward; one_hot of int64 labels on CUDA to float32 / float16, and its out-of-range error.
#include "ops/elementwise/elementwise.h"
#include "ops/shape/shape.h"
#include "tests/check_error.h"
#include "tests/cuda/cpu_reference.h"

using namespace halfgrad;
using namespace halfgrad::testing;

CUDA_TEST_CASE("shape cuda f32/f16 NCDHW/NDHWC reshape (2,3,5,7,6) -> (6,210) and back, with gradients") {
  for (Dtype dt : {kFloat32, kFloat16})
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast3d}) {
      const std::string what = std::string(dtype_name(dt)) + " " + format_name(fmt);
      SUBCASE(what.c_str()) {
        const Tolerance t = pointwise_tol(dt);
        compare_with_cpu("reshape " + what, {{{2, 3, 5, 7, 6}, Values::Normal, fmt}}, dt,
                         [](const std::vector<Tensor>& x) { return ops::reshape(x[0] * 2.0, {6, 210}); }, t, t);
        compare_with_cpu("reshape same shape " + what, {{{2, 3, 5, 7, 6}, Values::Normal, fmt}}, dt,
                         [](const std::vector<Tensor>& x) { return ops::reshape(x[0], {2, 3, 5, 7, 6}) * 3.0; }, t, t);
      }
    }
}

CUDA_TEST_CASE("shape cuda one_hot int64 (2,5,7,6) labels -> f32/f16 (2,4,5,7,6); out-of-range label throws") {
  const Shape s = {2, 5, 7, 6};
  Generator g(11);
  std::vector<int64_t> labels(shape_numel(s));
  for (auto& l : labels) l = g.randint(4);
  const Tensor cpu = Tensor::from_labels(labels, s);
  for (Dtype dt : {kFloat32, kFloat16}) {
    SUBCASE(dtype_name(dt)) {
      const Tensor want = ops::one_hot(cpu, 4, dt);
      const Tensor got = ops::one_hot(cpu.copy_to(Device::CUDA), 4, dt);
      REQUIRE(got.is_cuda());
      CHECK(got.dtype() == dt);
      check_close(got, want, 0, 0, "one_hot");
    }
  }
  labels[123] = 4;
  const Tensor bad = Tensor::from_labels(labels, s).copy_to(Device::CUDA);
  check_error([&] { ops::one_hot(bad, 4); }, {"one_hot", "label 4", "flat index 123"});
}
