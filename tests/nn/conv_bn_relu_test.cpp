// nn::ConvBnReluPair (nn/conv_bn_relu.h) on the CPU: the U-Net's BatchNorm block keeps the Sequential's
// children, names, initial values and results; the fused op never runs here (CPU input), so forward is
// the Sequential's, bit for bit. Its fused CUDA path is tested in tests/cuda/conv_bn_relu_cuda_test.cpp.
#include <doctest/doctest.h>

#include "autocast/autocast.h"
#include "core/error.h"
#include "nn/nn.h"
#include "nn/conv_bn_relu.h"
#include "ops/ops.h"

using namespace halfgrad;

namespace {

// The block as nn/unet3d.cpp built it before ConvBnReluPair: the reference for names and values.
std::shared_ptr<nn::Sequential> plain_block(int64_t ci, int64_t co, Generator& gen) {
  auto block = std::make_shared<nn::Sequential>();
  for (int64_t in : {ci, co}) {
    block->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(in, co, 3).padding(1).bias(false), gen));
    block->push_back(std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(co)));
    block->push_back(std::make_shared<nn::ReLU>());
  }
  return block;
}

}  // namespace

TEST_CASE("nn: ConvBnReluPair has the plain block's parameter and buffer names and initial values") {
  Generator ga(3), gb(3);
  nn::ConvBnReluPair pair(4, 8, ga);
  auto plain = plain_block(4, 8, gb);
  const auto pp = pair.named_parameters(), qp = plain->named_parameters();
  REQUIRE(pp.size() == qp.size());
  for (size_t i = 0; i < pp.size(); ++i) {
    CHECK(pp[i].first == qp[i].first);
    CHECK(pp[i].second.to_double_vector() == qp[i].second.to_double_vector());
  }
  const auto pb = pair.named_buffers(), qb = plain->named_buffers();
  REQUIRE(pb.size() == qb.size());
  for (size_t i = 0; i < pb.size(); ++i) CHECK(pb[i].first == qb[i].first);
  CHECK(pp[0].first == "0.weight");
  CHECK(pb.back().first == "4.num_batches_tracked");
  CHECK(pair.size() == 6);
}

TEST_CASE("nn: ConvBnReluPair float32 CPU forward and backward equal the plain Sequential's bit for bit (no fusion on CPU)") {
  Generator ga(5), gb(5), gx(6);
  nn::ConvBnReluPair pair(4, 8, ga);
  auto plain = plain_block(4, 8, gb);
  const Tensor x0 = Tensor::randn({2, 4, 5, 6, 7}, gx);
  CHECK_FALSE(pair.fused_for(x0));
  Tensor xa = x0.clone(), xb = x0.clone();
  xa.set_requires_grad(true);
  xb.set_requires_grad(true);
  Tensor ya = pair(xa), yb = (*plain)(xb);
  CHECK(ya.to_double_vector() == yb.to_double_vector());
  ops::sum(ya).backward();
  ops::sum(yb).backward();
  CHECK(xa.grad().to_double_vector() == xb.grad().to_double_vector());
  const auto pp = pair.named_parameters(), qp = plain->named_parameters();
  for (size_t i = 0; i < pp.size(); ++i) CHECK(pp[i].second.grad().to_double_vector() == qp[i].second.grad().to_double_vector());
  const auto pb = pair.named_buffers(), qb = plain->named_buffers();
  for (size_t i = 0; i < pb.size(); ++i) CHECK(pb[i].second.to_double_vector() == qb[i].second.to_double_vector());
}

TEST_CASE("ops: conv_bn_relu_pair is on the conv's autocast list and never fuses a CPU input (it names itself)") {
  // ops/conv/conv_bn.h: "the row ConvBnRelu of autocast/autocast.h (the conv's list: operands to FP16/BF16)".
  CHECK(amp::default_policy(amp::OpKind::ConvBnRelu) == amp::CastPolicy::Lower);
  CHECK(amp::default_policy(amp::OpKind::ConvBnRelu) == amp::default_policy(amp::OpKind::Conv3d));
  Generator g(1);
  const Tensor x = Tensor::randn({1, 16, 4, 4, 4}, g);
  ops::ConvBnReluStage s1, s2;
  s1.conv_weight = Tensor::randn({16, 16, 3, 3, 3}, g);
  s2.conv_weight = Tensor::randn({16, 16, 3, 3, 3}, g);
  amp::AutocastGuard autocast;
  CHECK_FALSE(ops::conv_bn_relu_pair_fusable(x, s1, s2));
  CHECK_THROWS_WITH_AS(ops::conv_bn_relu_pair(x, s1, s2), doctest::Contains("conv_bn_relu"), Error);
  s2.conv_weight = Tensor::randn({16, 8, 3, 3, 3}, g);  // second conv's Cin must be the first's Cout
  CHECK_THROWS_WITH_AS(ops::conv_bn_relu_pair(x, s1, s2), doctest::Contains("second conv weight"), Error);
}
