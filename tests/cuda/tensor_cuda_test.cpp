// tensor_cuda_test.cpp - core's CUDA runtime and CUDA tensors: copies, memory formats, fills, casts,
// gradient accumulation, the caching allocator, Module::to(Device) and checkpoints of CUDA models.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>

#include "core/cuda/runtime.h"
#include "core/cuda/tensor_kernels.h"
#include "core/tensor.h"
#include "nn/checkpoint.h"
#include "nn/conv3d.h"
#include "tests/check_error.h"
#include "tests/cuda/cuda_test.h"

using namespace halfgrad;
using namespace halfgrad::testing;

TEST_CASE("memory format: CPU NCDHW <-> NDHWC round trip keeps the logical values") {
  Tensor x = random_tensor({2, 3, 4, 5, 6}, 1);
  Tensor cl = x.format_copy(MemoryFormat::ChannelsLast3d);
  CHECK(cl.is_channels_last());
  // physical NDHWC: element (n=1, c=2, d=3, h=4, w=5) sits at ((1*4+3)*5+4)*6+5)*3+2
  const int64_t phys = ((((1 * 4 + 3) * 5 + 4) * 6 + 5) * 3 + 2);
  CHECK(cl.data<float>()[phys] == x.data<float>()[(((1 * 3 + 2) * 4 + 3) * 5 + 4) * 6 + 5]);
  CHECK(cl.to_float_vector() == x.to_float_vector());  // logical order
  CHECK(cl.format_copy(MemoryFormat::Contiguous).to_float_vector() == x.to_float_vector());
  check_error([&] { Tensor::empty({2, 3}, kFloat32, Device::CPU, MemoryFormat::ChannelsLast3d); }, {"5-D"});
}

TEST_CASE("Tensor::to(Device::CUDA) without a device: a clear error, or a working copy with one") {
  Tensor x = random_tensor({3, 4}, 2);
  if (!cuda::is_available()) {
    check_error([&] { x.to(Device::CUDA); }, {"CUDA"});
  } else {
    CHECK(x.to(Device::CUDA).to_float_vector() == x.to_float_vector());
  }
}

CUDA_TEST_CASE("cuda tensor: host/device copies, fill, casts and formats match the CPU") {
  for (Dtype dt : {kFloat32, kFloat16, kFloat64, kInt64}) {
    CAPTURE(dtype_name(dt));
    Tensor x = dt == kInt64 ? Tensor::from_labels({3, -1, 7, 0, 2, 9}, {2, 3}) : random_tensor({2, 3, 5, 4, 3}, 3, dt);
    Tensor g = x.copy_to(Device::CUDA);
    CHECK(g.is_cuda());
    CHECK(g.to_double_vector() == x.to_double_vector());
    CHECK(g.clone().to_double_vector() == x.to_double_vector());
    if (x.dim() == 5) {
      Tensor gcl = g.format_copy(MemoryFormat::ChannelsLast3d);
      CHECK(gcl.to_double_vector() == x.to_double_vector());
      CHECK(gcl.copy_to(Device::CPU).to_double_vector() == x.format_copy(MemoryFormat::ChannelsLast3d).to_double_vector());
    }
    for (Dtype to : {kFloat32, kFloat16, kFloat64}) {
      CAPTURE(dtype_name(to));
      CHECK(g.cast_copy(to).to_double_vector() == x.cast_copy(to).to_double_vector());
    }
  }
  Tensor f = Tensor::full({1000}, 0.1, kFloat16, Device::CUDA);
  CHECK(f.item_at(999) == Tensor::full({1}, 0.1, kFloat16).item());
  Tensor z = Tensor::zeros({7, 9}, kFloat32, Device::CUDA);
  for (double v : z.to_double_vector()) CHECK(v == 0.0);
  // copy_from across devices, dtypes and formats
  Tensor src = random_tensor({2, 4, 3, 3, 3}, 4);
  Tensor dst = Tensor::empty({2, 4, 3, 3, 3}, kFloat16, Device::CUDA, MemoryFormat::ChannelsLast3d);
  dst.copy_from(src);
  CHECK(dst.to_double_vector() == src.cast_copy(kFloat16).to_double_vector());
}

CUDA_TEST_CASE("cuda tensor: to(Device) and to(MemoryFormat) are differentiable, gradients accumulate on CUDA") {
  Tensor x = random_tensor({2, 3, 4, 4, 4}, 5).set_requires_grad(true);
  Tensor gx = x.to(Device::CUDA).to(MemoryFormat::ChannelsLast3d);
  Tensor seed = random_tensor({2, 3, 4, 4, 4}, 6);
  gx.backward(to_cuda(seed, MemoryFormat::ChannelsLast3d), /*retain_graph=*/true);
  CHECK(x.grad().device() == Device::CPU);
  CHECK(x.grad().to_float_vector() == seed.to_float_vector());
  gx.backward(to_cuda(seed, MemoryFormat::ChannelsLast3d));  // accumulates: 2 * seed
  const auto g2 = x.grad().to_float_vector(), sv = seed.to_float_vector();
  for (size_t i = 0; i < sv.size(); ++i) CHECK(g2[i] == 2 * sv[i]);
  // a CUDA leaf accumulates on the device
  Tensor y = random_tensor({3, 5}, 9).copy_to(Device::CUDA).set_requires_grad(true);
  Tensor s2 = random_tensor({3, 5}, 10);
  y.backward(s2.copy_to(Device::CUDA));
  y.backward(s2.copy_to(Device::CUDA));
  CHECK(y.grad().is_cuda());
  const auto gy = y.grad().to_float_vector(), s2v = s2.to_float_vector();
  for (size_t i = 0; i < s2v.size(); ++i) CHECK(gy[i] == 2 * s2v[i]);
}

CUDA_TEST_CASE("cuda tensor: count_nonfinite and accumulate") {
  Tensor a = random_tensor({4096}, 7).copy_to(Device::CUDA);
  CHECK(cuda::count_nonfinite(a.raw_data(), kFloat32, a.numel()) == 0);
  std::vector<float> v(4096, 1.0f);
  v[17] = NAN;
  v[4000] = INFINITY;
  Tensor b = Tensor::from_vector(v, {4096}).copy_to(Device::CUDA);
  CHECK(cuda::count_nonfinite(b.raw_data(), kFloat32, b.numel()) == 2);
  Tensor h = b.cast_copy(kFloat16);
  CHECK(cuda::count_nonfinite(h.raw_data(), kFloat16, h.numel()) == 2);
  Tensor c = random_tensor({4096}, 8);
  Tensor gc = c.copy_to(Device::CUDA);
  cuda::accumulate(gc.raw_data(), a.raw_data(), kFloat32, 4096);
  const auto av = a.to_float_vector(), cv = c.to_float_vector(), got = gc.to_float_vector();
  for (int i = 0; i < 4096; ++i) CHECK(got[i] == av[i] + cv[i]);
}

CUDA_TEST_CASE("cuda caching allocator: a repeated allocation pattern stops calling cudaMalloc") {
  auto pattern = [] {
    for (int64_t n : {1, 100, 4096, 300000, 5000000}) {
      Tensor t = Tensor::empty({n}, kFloat32, Device::CUDA);
      t.fill_(1.0);
    }
  };
  pattern();
  cuda::synchronize();
  const auto before = cuda::allocator_stats();
  pattern();
  pattern();
  const auto after = cuda::allocator_stats();
  CHECK(after.cuda_malloc_calls == before.cuda_malloc_calls);
  CHECK(after.hits >= before.hits + 10);
  CHECK(after.peak_allocated_bytes >= size_t{5000000} * 4);
  check_error([] { Tensor::empty({int64_t{1} << 45}, kFloat32, Device::CUDA); }, {"out of CUDA memory"});
}

CUDA_TEST_CASE("cuda module: Module::to(Device) moves parameters in place; checkpoints round-trip from CUDA") {
  nn::Conv3d conv(nn::Conv3dOptions(2, 3, 3).padding(1));
  Tensor w = conv.weight;  // the same TensorImpl after the move
  const auto w_host = w.to_float_vector();
  conv.to(Device::CUDA);
  CHECK(w.is_cuda());
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
  CHECK(w.to_float_vector() == w_host);
  const std::string path = (std::filesystem::temp_directory_path() / "halfgrad_cuda_ckpt_test.bin").string();
  nn::save_checkpoint(path, conv, nlohmann::json::object());
  nn::Conv3d other(nn::Conv3dOptions(2, 3, 3).padding(1));
  other.to(Device::CUDA);
  nn::load_checkpoint(path, other);
  CHECK(other.weight.is_cuda());
  CHECK(other.weight.to_float_vector() == w_host);
  std::remove(path.c_str());
}
