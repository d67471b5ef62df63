// UNet3d: parameter counts against the PyTorch reference, names, forward/backward, shape errors.
#include <doctest/doctest.h>

#include "autocast/autocast.h"
#include "core/error.h"
#include "nn/nn.h"
#include "ops/ops.h"

using namespace halfgrad;

namespace {
nn::UNet3dOptions tiny() { return nn::UNet3dOptions().channels({4, 8}).bottleneck(16); }
}  // namespace

TEST_CASE("nn: UNet3d default (16,32,64,128 / 256, BatchNorm) has 5,646,419 parameters, as the PyTorch reference") {
  // sum(p.numel() for p in UNet3D().parameters()) in ../shared/reference/torch_unet_step.py
  nn::UNet3d net;
  CHECK(net.num_parameters() == 5646419);
  CHECK(net.parameters().size() == 64);  // 9 blocks x (2 conv + 2 BN weight + 2 BN bias) + 4 up x 2 + head 2
  CHECK(net.named_buffers().size() == 9 * 2 * 3);
  CHECK(net.size_divisor() == 16);
}

TEST_CASE("nn: UNet3d cpu() preset (8,16,32,64 / 128) has 1,412,523 parameters") {
  nn::UNet3d net(nn::UNet3dOptions::cpu());
  CHECK(net.num_parameters() == 1412523);
}

TEST_CASE("nn: UNet3d parameter and buffer names follow the PyTorch state_dict of the reference") {
  nn::UNet3d net(tiny());
  const auto ps = net.named_parameters();
  std::vector<std::string> first, last;
  for (size_t i = 0; i < 6; ++i) first.push_back(ps[i].first);
  for (size_t i = ps.size() - 4; i < ps.size(); ++i) last.push_back(ps[i].first);
  CHECK(first == std::vector<std::string>{"enc.0.0.weight", "enc.0.1.weight", "enc.0.1.bias", "enc.0.3.weight",
                                          "enc.0.4.weight", "enc.0.4.bias"});
  CHECK(last == std::vector<std::string>{"dec.1.4.weight", "dec.1.4.bias", "head.weight", "head.bias"});
  CHECK(ps.size() == 36);
  CHECK(ps[12].first == "bott.0.weight");
  CHECK(ps[18].first == "up.0.weight");
  CHECK(ps[18].second.shape() == Shape{16, 8, 2, 2, 2});
  CHECK(ps[22].first == "dec.0.0.weight");
  CHECK(ps[22].second.shape() == Shape{8, 16, 3, 3, 3});
  CHECK(net.named_buffers()[0].first == "enc.0.1.running_mean");
  CHECK(net.named_buffers()[2].first == "enc.0.1.num_batches_tracked");
}

TEST_CASE("nn: UNet3d float32 forward (1,1,16,16,16) channels {4,8} gives (1,3,16,16,16); backward reaches every parameter") {
  Generator gen(7);
  nn::UNet3d net(tiny(), gen);
  Tensor x = Tensor::randn({1, 1, 16, 16, 16}, gen);
  Tensor y = net.forward(x);
  CHECK(y.shape() == Shape{1, 3, 16, 16, 16});
  CHECK(y.dtype() == kFloat32);
  ops::mean(ops::mul(y, y)).backward();
  for (auto& [name, p] : net.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().shape() == p.shape());
    double s = 0;
    for (double g : p.grad().to_double_vector()) s += g * g;
    CHECK(s > 0);
  }
  net.zero_grad();
  for (auto& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("nn: UNet3d instance-norm and no-norm variants run; no-norm convs get a bias") {
  Generator gen(8);
  Tensor x = Tensor::randn({2, 1, 8, 8, 8}, gen);
  nn::UNet3d inorm(nn::UNet3dOptions().channels({2}).bottleneck(4).norm(nn::NormKind::Instance), gen);
  CHECK(inorm.forward(x).shape() == Shape{2, 3, 8, 8, 8});
  CHECK(inorm.named_buffers().empty());
  nn::UNet3d plain(nn::UNet3dOptions().channels({2}).bottleneck(4).norm(nn::NormKind::None), gen);
  CHECK(plain.forward(x).shape() == Shape{2, 3, 8, 8, 8});
  CHECK(plain.named_parameters()[1].first == "enc.0.0.bias");
  CHECK(plain.named_parameters()[2].first == "enc.0.2.weight");  // Sequential(conv, ReLU, conv, ReLU)
}

TEST_CASE("nn: UNet3d rejects spatial extents not divisible by 2^levels, naming the shape") {
  nn::UNet3d net(tiny());  // 2 levels: multiples of 4
  CHECK_THROWS_WITH_AS(net.forward(Tensor::zeros({1, 1, 16, 10, 16})),
                       doctest::Contains("[1, 1, 16, 10, 16]: H = 10 is not divisible by 4"), Error);
  CHECK_THROWS_WITH_AS(net.forward(Tensor::zeros({1, 2, 16, 16, 16})), doctest::Contains("2 channels"), Error);
  CHECK_THROWS_WITH_AS(net.forward(Tensor::zeros({1, 16, 16, 16})), doctest::Contains("must be 5-D"), Error);
  CHECK_THROWS_AS(nn::UNet3d(nn::UNet3dOptions().channels({})), Error);
  CHECK_THROWS_AS(nn::UNet3d(nn::UNet3dOptions().channels({4, 0})), Error);
}

TEST_CASE("nn: UNet3dOptions round-trips through JSON and rejects bad JSON") {
  const auto o = nn::UNet3dOptions::cpu().num_classes(4).norm(nn::NormKind::Instance);
  const auto back = nn::UNet3dOptions::from_json(o.to_json());
  CHECK(back.channels() == std::vector<int64_t>{8, 16, 32, 64});
  CHECK(back.bottleneck() == 128);
  CHECK(back.num_classes() == 4);
  CHECK(back.in_channels() == 1);
  CHECK(back.norm() == nn::NormKind::Instance);
  CHECK(o.describe() == "channels {8, 16, 32, 64}, bottleneck 128, norm instance, in 1, classes 4");
  auto j = o.to_json();
  j["norm"] = "group";
  CHECK_THROWS_WITH_AS(nn::UNet3dOptions::from_json(j), doctest::Contains("field 'norm' is \"group\"; expected \"batch\", \"instance\" or \"none\""),
                       Error);
  j = o.to_json();
  j.erase("bottleneck");
  CHECK_THROWS_WITH_AS(nn::UNet3dOptions::from_json(j), doctest::Contains("field 'bottleneck' is missing"), Error);
}

TEST_CASE("nn: UNet3d under autocast gives float16 logits and float32 gradients; after to(float16) runs in float16") {
  Generator gen(9);
  nn::UNet3d net(tiny(), gen);
  Tensor x = Tensor::randn({1, 1, 8, 8, 8}, gen);
  Tensor y;
  {
    amp::AutocastGuard autocast;
    y = net.forward(x);
  }
  CHECK(y.dtype() == kFloat16);  // the head conv is on autocast's FP16 list
  ops::mean(y.to(kFloat32)).backward();
  for (auto& [name, p] : net.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == kFloat32);  // master weights stay FP32, and so do their gradients
  }
  // O3 style: every floating parameter and buffer in FP16 (BatchNorm still computes in FP32).
  net.to(kFloat16);
  Tensor yh = net.forward(x.to(kFloat16));
  CHECK(yh.shape() == Shape{1, 3, 8, 8, 8});
  CHECK(yh.dtype() == kFloat16);
}
