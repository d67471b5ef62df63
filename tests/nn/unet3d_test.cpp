// UNet3d: parameter counts against the PyTorch reference, names, forward/backward, shape errors;
// deep supervision (ds_heads, forward_deep, its options in JSON and in a state_dict's shapes).
#include <doctest/doctest.h>

#include "autocast/autocast.h"
#include "autograd/gradcheck.h"
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

// Deep supervision (nnU-Net v2's): ds_heads on every decoder level but the last, forward_deep.

TEST_CASE("nn: UNet3d deep_supervision off keeps the reference's parameters, names and outputs bit for bit") {
  CHECK_FALSE(nn::UNet3dOptions().deep_supervision());
  Generator g1(11), g2(11);
  nn::UNet3d plain(tiny(), g1);
  nn::UNet3d on(tiny().deep_supervision(true), g2);  // draws the same values for the shared parameters
  const auto ps = plain.named_parameters(), qs = on.named_parameters();
  CHECK(ps.size() == 36);
  CHECK(ps.back().first == "head.bias");
  REQUIRE(qs.size() == ps.size() + 2);
  for (size_t i = 0; i < ps.size(); ++i) {
    INFO(ps[i].first);
    CHECK(qs[i].first == ps[i].first);
    CHECK(qs[i].second.to_double_vector() == ps[i].second.to_double_vector());
  }
  for (const auto& [name, p] : ps) CHECK(name.rfind("ds_heads", 0) != 0);
  CHECK(nn::UNet3d().num_parameters() == 5646419);
  CHECK(nn::UNet3d(nn::UNet3dOptions::cpu()).num_parameters() == 1412523);
  CHECK_THROWS_WITH_AS(plain.forward_deep(Tensor::zeros({1, 1, 8, 8, 8})), doctest::Contains("deep_supervision off"), Error);
}

TEST_CASE("nn: UNet3d deep_supervision channels {4,8,16} adds ds_heads.{0,1} (deepest first) and their counts") {
  nn::UNet3d net(nn::UNet3dOptions().channels({4, 8, 16}).bottleneck(32).deep_supervision(true));
  const auto ps = net.named_parameters();
  REQUIRE(ps.size() >= 4);
  std::vector<std::string> last;
  for (size_t i = ps.size() - 4; i < ps.size(); ++i) last.push_back(ps[i].first);
  CHECK(last == std::vector<std::string>{"ds_heads.0.weight", "ds_heads.0.bias", "ds_heads.1.weight", "ds_heads.1.bias"});
  CHECK(ps[ps.size() - 4].second.shape() == Shape{3, 16, 1, 1, 1});  // on dec.0 (width 16, 1/4 resolution)
  CHECK(ps[ps.size() - 3].second.shape() == Shape{3});
  CHECK(ps[ps.size() - 2].second.shape() == Shape{3, 8, 1, 1, 1});   // on dec.1 (width 8, 1/2 resolution)
  CHECK(net.ds_heads.size() == 2);
  // The header's counts: + (c_l + 1) * num_classes per head.
  CHECK(nn::UNet3d(nn::UNet3dOptions().deep_supervision(true)).num_parameters() == 5646419 + 681);
  CHECK(nn::UNet3d(nn::UNet3dOptions::cpu().deep_supervision(true)).num_parameters() == 1412523 + 345);
  CHECK_THROWS_WITH_AS(nn::UNet3d(nn::UNet3dOptions().channels({4}).deep_supervision(true)),
                       doctest::Contains("at least 2 levels"), Error);
}

TEST_CASE("nn: UNet3d float32 forward_deep (2,1,16,16,16) channels {4,8,16}: shapes 16, 8, 4; [0] equals forward; backward reaches the heads") {
  Generator gen(12);
  nn::UNet3d net(nn::UNet3dOptions().channels({4, 8, 16}).bottleneck(32).deep_supervision(true), gen);
  net.eval();  // BatchNorm's running statistics: forward and forward_deep see the same model
  Tensor x = Tensor::randn({2, 1, 16, 16, 16}, gen);
  const std::vector<Tensor> ys = net.forward_deep(x);
  REQUIRE(ys.size() == 3);
  CHECK(ys[0].shape() == Shape{2, 3, 16, 16, 16});
  CHECK(ys[1].shape() == Shape{2, 3, 8, 8, 8});
  CHECK(ys[2].shape() == Shape{2, 3, 4, 4, 4});
  CHECK(ys[0].to_double_vector() == net.forward(x).to_double_vector());
  Tensor s = ops::mean(ops::mul(ys[1], ys[1]));
  s = ops::add(s, ops::mean(ops::mul(ys[2], ys[2])));
  s.backward();
  for (const auto& h : net.ds_heads) CHECK(h->named_parameters()[0].second.grad().defined());
  CHECK_FALSE(net.head->named_parameters()[0].second.grad().defined());
}

TEST_CASE("nn: UNet3d float64 deep-supervision loss gradcheck on a tiny model's output logits (channels {2,4})") {
  // The loss through forward_deep, checked with respect to the input volume (the heads' and the
  // decoder's backward included), in float64 on a 1 x 1 x 4 x 4 x 4 input.
  Generator gen(13);
  nn::UNet3d net(nn::UNet3dOptions().channels({2, 4}).bottleneck(4).norm(nn::NormKind::None).num_classes(2).deep_supervision(true),
                 gen);
  net.to(kFloat64);
  std::vector<int64_t> lab(64);
  for (auto& l : lab) l = gen.randint(2);
  const Tensor t = Tensor::from_labels(lab, {1, 4, 4, 4});
  Tensor x = Tensor::randn({1, 1, 4, 4, 4}, gen, kFloat64).set_requires_grad(true);
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return ops::deep_supervision_loss(net.forward_deep(in[0]), t); },
                               {x});
  CHECK_MESSAGE(r.ok, r.report);
}

TEST_CASE("nn: UNet3dOptions deep_supervision round-trips through JSON; old JSON without the key reads false") {
  const auto o = nn::UNet3dOptions::cpu().deep_supervision(true);
  CHECK(o.to_json().at("deep_supervision") == true);
  const auto back = nn::UNet3dOptions::from_json(o.to_json());
  CHECK(back.deep_supervision());
  CHECK(back == o);
  CHECK_FALSE(back == nn::UNet3dOptions::cpu());
  CHECK(o.describe() == "channels {8, 16, 32, 64}, bottleneck 128, norm batch, in 1, classes 3, deep supervision");
  auto old = nn::UNet3dOptions::cpu().to_json();
  old.erase("deep_supervision");
  CHECK_FALSE(nn::UNet3dOptions::from_json(old).deep_supervision());
  CHECK(nn::UNet3dOptions::from_json(old) == nn::UNet3dOptions::cpu());
  auto bad = o.to_json();
  bad["deep_supervision"] = 1;
  CHECK_THROWS_WITH_AS(nn::UNet3dOptions::from_json(bad), doctest::Contains("deep_supervision"), Error);
}

TEST_CASE("nn: UNet3dOptions::infer_from_shapes finds ds_heads in a state_dict, and refuses a partial set") {
  auto shapes_of = [](nn::UNet3d& net) {
    std::map<std::string, Shape> m;
    for (const auto& [name, p] : net.named_parameters()) m[name] = p.shape();
    for (const auto& [name, b] : net.named_buffers()) m[name] = b.shape();
    return m;
  };
  const auto on_opts = nn::UNet3dOptions().channels({4, 8, 16}).bottleneck(32).deep_supervision(true);
  nn::UNet3d on(on_opts);
  auto shapes = shapes_of(on);
  CHECK(nn::UNet3dOptions::infer_from_shapes(shapes, "x") == on_opts);
  CHECK_NOTHROW(on_opts.check_matches_shapes(shapes, "x"));
  CHECK_THROWS_WITH_AS(nn::UNet3dOptions(on_opts).deep_supervision(false).check_matches_shapes(shapes, "x"),
                       doctest::Contains("x: the metadata describes"), Error);
  nn::UNet3d off(nn::UNet3dOptions(on_opts).deep_supervision(false));
  CHECK_FALSE(nn::UNet3dOptions::infer_from_shapes(shapes_of(off), "x").deep_supervision());
  shapes.erase("ds_heads.1.weight");
  CHECK_THROWS_WITH_AS(nn::UNet3dOptions::infer_from_shapes(shapes, "x"),
                       doctest::Contains("x: the file has 1 deep-supervision heads"), Error);
  shapes = shapes_of(on);
  shapes["ds_heads.0.weight"] = Shape{3, 16, 3, 3, 3};
  CHECK_THROWS_WITH_AS(nn::UNet3dOptions::infer_from_shapes(shapes, "x"), doctest::Contains("1x1x1 kernels"), Error);
}
