// halfgrad_external - a program outside the source tree that links the installed halfgrad
// (examples/external/CMakeLists.txt) and uses only <halfgrad/halfgrad.h>. Two models a PyTorch user
// would write first (docs/writing_models.md walks through the MLP and shows the anisotropic options):
//   1. an MLP (Linear, LayerNorm, GELU, Dropout) that learns the two-spirals problem in 2-D;
//   2. a small 3-D network with anisotropic convolutions ((1, 3, 3) kernels, (1, 2, 2) stride, as
//      nnU-Net's plans for thick-slice scans), GroupNorm, SiLU, adaptive average pooling and Linear,
//      trained for 60 steps on one batch of noisy cubes and spheres (it must fit it), once under FP16 autocast with
//      a GradScaler and once under BF16 autocast without one.
// It runs on CUDA when the package was built with it and a GPU is present, else on the CPU (whose
// FP16 and BF16 ops compute in FP32 and round, as a Tensor Core does). Exit status 1 when the MLP's
// held-out accuracy is below 0.95, or a 3-D run leaves a gradient missing or non-finite or its loss
// above half its first value: the package must not only link, it must train.
#include <halfgrad/halfgrad.h>

#include <cmath>
#include <cstdio>
#include <memory>

using namespace halfgrad;

// ---- 1. an MLP on two spirals ---------------------------------------------------------------------

// B points (B, 2) float32 on two interleaved spirals, labels (B) int64: 0 or 1 (which spiral).
static void spirals_batch(Generator& gen, int64_t B, Tensor& x, Tensor& y) {
  std::vector<float> pts(static_cast<size_t>(2 * B));
  std::vector<int64_t> lab(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = gen.uniform() < 0.5;
    const double t = 0.25 + 2.75 * gen.uniform();  // radius and angle grow together
    const double a = 2.0 * t + M_PI * static_cast<double>(k);
    pts[static_cast<size_t>(2 * b)] = static_cast<float>(t * std::cos(a) + 0.05 * gen.normal());
    pts[static_cast<size_t>(2 * b + 1)] = static_cast<float>(t * std::sin(a) + 0.05 * gen.normal());
    lab[static_cast<size_t>(b)] = k;
  }
  x = Tensor::from_vector(pts, {B, 2});
  y = Tensor::from_labels(lab, {B});
}

struct Mlp : nn::Module {
  std::shared_ptr<nn::Sequential> net;
  explicit Mlp(Generator& gen) : nn::Module("Mlp") {
    net = register_module("net", std::make_shared<nn::Sequential>());
    net->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(2, 64), gen));
    net->push_back(std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({64})));
    net->push_back(std::make_shared<nn::GELU>());
    net->push_back(std::make_shared<nn::Dropout>(nn::DropoutOptions(0.1)));
    net->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(64, 64), gen));
    net->push_back(std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({64})));
    net->push_back(std::make_shared<nn::GELU>());
    net->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(64, 2), gen));
  }
  Tensor forward(const Tensor& x) override { return (*net)(x); }  // (B, 2) -> logits (B, 2)
};

static double train_mlp(Device dev) {
  Generator gen(1);
  auto model = std::make_shared<Mlp>(gen);
  model->to(dev);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(1e-2).weight_decay(1e-4));
  for (int step = 1; step <= 600; ++step) {
    Tensor x, y;
    spirals_batch(gen, 128, x, y);
    opt.zero_grad();
    Tensor loss = ops::cross_entropy((*model)(x.to(dev)), y.to(dev));
    loss.backward();
    opt.step();
    if (step % 200 == 0) std::printf("  mlp step %d  loss %.4f\n", step, loss.item());
  }
  model->eval();  // Dropout off
  NoGradGuard no_grad;
  Tensor x, y;
  spirals_batch(gen, 1024, x, y);
  const Tensor pred = ops::argmax((*model)(x.to(dev)), 1).to(Device::CPU);
  int64_t correct = 0;
  for (int64_t i = 0; i < y.numel(); ++i) correct += pred.data<int64_t>()[i] == y.data<int64_t>()[i];
  return static_cast<double>(correct) / static_cast<double>(y.numel());
}

// ---- 2. an anisotropic 3-D network under FP16 and BF16 autocast -----------------------------------

// (B, 1, 8, 16, 16) volumes (thick slices: 8 along D) and labels (B) int64: 0 = cube, 1 = sphere.
static void shapes_batch(Generator& gen, int64_t B, Tensor& x, Tensor& y) {
  const int64_t D = 8, S = 16;
  std::vector<float> img(static_cast<size_t>(B * D * S * S));
  std::vector<int64_t> lab(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const bool sphere = gen.uniform() < 0.5;
    lab[static_cast<size_t>(b)] = sphere;
    const double c[3] = {3 + 2 * gen.uniform(), 6 + 4 * gen.uniform(), 6 + 4 * gen.uniform()};
    const double r = 3.5 + 1.5 * gen.uniform();  // in-plane voxels; a D voxel is twice as thick
    for (int64_t z = 0; z < D; ++z)
      for (int64_t yy = 0; yy < S; ++yy)
        for (int64_t xx = 0; xx < S; ++xx) {
          const double d[3] = {2.0 * (z - c[0]), yy - c[1], xx - c[2]};
          const bool in = sphere ? d[0] * d[0] + d[1] * d[1] + d[2] * d[2] < r * r
                                 : std::fabs(d[0]) < 0.8 * r && std::fabs(d[1]) < 0.8 * r && std::fabs(d[2]) < 0.8 * r;
          img[static_cast<size_t>(((b * D + z) * S + yy) * S + xx)] = static_cast<float>((in ? 1.0 : 0.0) + 0.3 * gen.normal());
        }
  }
  x = Tensor::from_vector(img, {B, 1, D, S, S});
  y = Tensor::from_labels(lab, {B});
}

struct AnisoNet : nn::Module {
  std::shared_ptr<nn::Sequential> net;
  explicit AnisoNet(Generator& gen) : nn::Module("AnisoNet") {
    net = register_module("net", std::make_shared<nn::Sequential>());
    // In-plane only first (the thick axis is not mixed), then an in-plane downsampling, then 3-D.
    net->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(1, 16, {1, 3, 3}).padding({0, 1, 1}).bias(false), gen));
    net->push_back(std::make_shared<nn::GroupNorm>(nn::GroupNormOptions(4, 16)));
    net->push_back(std::make_shared<nn::SiLU>());
    net->push_back(std::make_shared<nn::Conv3d>(
        nn::Conv3dOptions(16, 32, {1, 3, 3}).stride({1, 2, 2}).padding({0, 1, 1}).bias(false), gen));  // (8, 8, 8)
    net->push_back(std::make_shared<nn::GroupNorm>(nn::GroupNormOptions(4, 32)));
    net->push_back(std::make_shared<nn::SiLU>());
    net->push_back(std::make_shared<nn::Conv3d>(nn::Conv3dOptions(32, 32, 3).padding(1).bias(false), gen));
    net->push_back(std::make_shared<nn::GroupNorm>(nn::GroupNormOptions(4, 32)));
    net->push_back(std::make_shared<nn::SiLU>());
    net->push_back(std::make_shared<nn::AdaptiveAvgPool3d>(nn::AdaptiveAvgPool3dOptions({1, 1, 1})));
    net->push_back(std::make_shared<nn::Flatten>());
    net->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(32, 2), gen));
  }
  Tensor forward(const Tensor& x) override { return (*net)(x); }  // (B, 1, 8, 16, 16) -> logits (B, 2)
};

// One batch, trained on until the network fits it: the check is that a training step works end to
// end under the autocast dtype (finite loss, a finite gradient for every parameter, and the loss
// falling to below half its first value within 60 steps), not generalisation. Returns the loss ratio
// last / first (2 when a gradient was missing or not finite).
static double train_aniso(Device dev, Dtype lower) {
  Generator gen(0);
  auto model = std::make_shared<AnisoNet>(gen);
  model->to(dev);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(3e-3));
  // FP16 needs a loss scale (its gradients underflow below 6e-8); BF16 has FP32's exponent range.
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(lower == kFloat16));
  Tensor x, y;
  shapes_batch(gen, 16, x, y);
  x = x.to(dev);
  y = y.to(dev);
  double first = 0, last = 0;
  for (int step = 1; step <= 60; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(amp::AutocastOptions().dtype(lower));
      loss = ops::cross_entropy((*model)(x).to(kFloat32), y);
    }
    scaler.scale(loss).backward();
    if (step == 1) {
      for (const auto& [name, p] : model->named_parameters()) {
        const Tensor g = p.grad();
        bool finite = g.defined();
        if (finite) {
          const Tensor h = g.to(Device::CPU).cast_copy(kFloat64);
          for (int64_t i = 0; i < h.numel() && finite; ++i) finite = std::isfinite(h.data<double>()[i]);
        }
        if (!finite) {
          std::printf("  %s: parameter %s has no finite gradient\n", dtype_name(lower), name.c_str());
          return 2.0;
        }
      }
    }
    scaler.step(opt);
    scaler.update();
    last = loss.item();
    if (step == 1) first = last;
    if (step % 20 == 0 || step == 1) std::printf("  %s step %d  loss %.4f\n", dtype_name(lower), step, last);
  }
  return std::isfinite(last) && first > 0 ? last / first : 2.0;
}

int main() {
  manual_seed(0);
  const Device dev = cuda::is_available() ? Device::CUDA : Device::CPU;
  std::printf("halfgrad_external on %s\n", dev == Device::CUDA ? "CUDA" : "the CPU");
  const double mlp = train_mlp(dev);
  std::printf("mlp (Linear, LayerNorm, GELU, Dropout): held-out accuracy %.3f on two spirals\n", mlp);
  const double fp16 = train_aniso(dev, kFloat16);
  std::printf("anisotropic 3-D net, FP16 autocast + GradScaler: loss fell to %.3f of its first value\n", fp16);
  const double bf16 = train_aniso(dev, kBFloat16);
  std::printf("anisotropic 3-D net, BF16 autocast: loss fell to %.3f of its first value\n", bf16);
  const bool ok = mlp >= 0.95 && fp16 < 0.5 && bf16 < 0.5;
  if (!ok) std::printf("FAILED: mlp accuracy below 0.95, or a 3-D run's loss not below half its first value\n");
  return ok ? 0 : 1;
}
