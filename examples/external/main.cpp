// halfgrad_external - a program outside the source tree that links the installed halfgrad
// (examples/external/CMakeLists.txt): a small 3-D network (Conv3d, BatchNorm3d, ReLU, MaxPool3d, a
// linear classifier on pooled features) learns whether a noisy 16^3 volume holds a bright cube or a
// bright sphere, with autocast and GradScaler when the build can run FP16 (CUDA, or the CPU's FP16
// ops), and prints its training and held-out accuracy. Exit status 1 when the held-out accuracy is
// below 0.9: the package must not only link, it must train.
#include <halfgrad/halfgrad.h>

#include <cmath>
#include <cstdio>
#include <memory>

using namespace halfgrad;

// (B, 1, 16, 16, 16) volumes and labels (B) int64: 0 = cube, 1 = sphere, random centre and size.
static void shapes_batch(Generator& gen, int64_t B, Tensor& x, Tensor& y) {
  const int64_t S = 16;
  std::vector<float> img(B * S * S * S);
  std::vector<int64_t> lab(B);
  for (int64_t b = 0; b < B; ++b) {
    const bool sphere = gen.uniform() < 0.5;
    lab[b] = sphere;
    const double c[3] = {6 + 4 * gen.uniform(), 6 + 4 * gen.uniform(), 6 + 4 * gen.uniform()};
    const double r = 3.5 + 1.5 * gen.uniform();
    for (int64_t z = 0; z < S; ++z)
      for (int64_t yy = 0; yy < S; ++yy)
        for (int64_t xx = 0; xx < S; ++xx) {
          const double d[3] = {z - c[0], yy - c[1], xx - c[2]};
          const bool in = sphere ? d[0] * d[0] + d[1] * d[1] + d[2] * d[2] < r * r
                                 : std::fabs(d[0]) < 0.8 * r && std::fabs(d[1]) < 0.8 * r && std::fabs(d[2]) < 0.8 * r;
          img[((b * S + z) * S + yy) * S + xx] = static_cast<float>((in ? 1.0 : 0.0) + 0.3 * gen.normal());
        }
  }
  x = Tensor::from_vector(img, {B, 1, S, S, S});
  y = Tensor::from_labels(lab, {B});
}

struct ShapeNet : nn::Module {
  std::shared_ptr<nn::Sequential> features;
  Tensor fc_weight, fc_bias;  // (2, 32), (2): the classifier, through ops::linear
  explicit ShapeNet(Generator& gen) : nn::Module("ShapeNet") {
    features = register_module("features", std::make_shared<nn::Sequential>());
    features->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 16, 3).padding(1).bias(false), gen));
    features->push_back(std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(16)));
    features->push_back(std::make_shared<nn::ReLU>());
    features->push_back(std::make_shared<nn::MaxPool3d>(nn::MaxPool3dOptions(2)));
    features->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(16, 32, 3).padding(1).bias(false), gen));
    features->push_back(std::make_shared<nn::BatchNorm3d>(nn::BatchNorm3dOptions(32)));
    features->push_back(std::make_shared<nn::ReLU>());
    fc_weight = register_parameter("fc_weight", Tensor::randn({2, 32}, gen, kFloat32, 1.0 / std::sqrt(32.0)));
    fc_bias = register_parameter("fc_bias", Tensor::zeros({2}));
  }
  // x (B, 1, 16, 16, 16) -> logits (B, 2).
  Tensor forward(const Tensor& x) override {
    Tensor h = (*features)(x);                                        // (B, 32, 8, 8, 8)
    Tensor pooled = ops::mean(h.to(kFloat32), {2, 3, 4});                // global average pool: (B, 32)
    return ops::linear(pooled, fc_weight, fc_bias);
  }
};

int main() {
  manual_seed(0);
  Generator gen(0);
  auto model = std::make_shared<ShapeNet>(gen);
  const bool cuda = cuda::is_available();
  const Device dev = cuda ? Device::CUDA : Device::CPU;
  model->to(dev);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(3e-3));
  amp::GradScaler scaler;
  std::printf("halfgrad_external: %s, autocast FP16 + GradScaler\n", cuda ? "CUDA" : "CPU");
  for (int step = 1; step <= 150; ++step) {
    Tensor x, y;
    shapes_batch(gen, 16, x, y);
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast;
      loss = ops::cross_entropy(model->forward(x.copy_to(dev)).to(kFloat32), y.copy_to(dev));
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    if (step % 50 == 0) std::printf("step %d  loss %.4f  scale %g\n", step, loss.item(), scaler.get_scale());
  }
  model->eval();
  NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (int b = 0; b < 8; ++b) {
    Tensor x, y;
    shapes_batch(gen, 16, x, y);
    Tensor pred = ops::argmax(model->forward(x.copy_to(dev)), 1).copy_to(Device::CPU);
    for (int64_t i = 0; i < 16; ++i) correct += pred.data<int64_t>()[i] == y.data<int64_t>()[i];
    total += 16;
  }
  const double acc = static_cast<double>(correct) / total;
  std::printf("held-out accuracy %.3f on %lld volumes\n", acc, static_cast<long long>(total));
  return acc >= 0.9 ? 0 : 1;
}
