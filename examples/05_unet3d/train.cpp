// train.cpp - the training loop of halfgrad-unet3d, written the way a libtorch user would write it:
//   forward under autocast -> loss -> scaler.scale(loss).backward() -> scaler.step(opt) -> update().
#include "examples/05_unet3d/train.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/error.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/metrics.h"
#include "nn/checkpoint.h"
#include "nn/unet3d.h"
#include "autograd/node.h"
#include "ops/common.h"
#include "ops/ops.h"
#include "optim/adamw.h"

namespace unet3d_app {

using namespace halfgrad;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Learning rate at fractional epoch e: linear warm-up from lr/10, then cosine decay to lr/20.
static double lr_at(const Recipe& r, double e) {
  if (e < r.warmup_epochs) return r.lr * (0.1 + 0.9 * e / r.warmup_epochs);
  if (!r.cosine) return r.lr;
  const double span = std::max<double>(1.0, static_cast<double>(r.epochs - r.warmup_epochs));
  const double t = std::min(1.0, (e - r.warmup_epochs) / span);
  const double lo = r.lr / 20;
  return lo + 0.5 * (r.lr - lo) * (1 + std::cos(M_PI * t));
}

// Per-class Dice averaged over volumes, predicting whole volumes one at a time.
static std::vector<double> validate(nn::UNet3d& model, const std::vector<SegVolume>& vols, int64_t num_classes,
                                    bool amp) {
  model.eval();
  NoGradGuard no_grad;
  amp::AutocastGuard autocast(amp);
  std::vector<double> sum(num_classes - 1, 0.0);
  for (const SegVolume& v : vols) {
    const Shape s = v.image.shape();
    Tensor x = v.image.view_as_shape({1, 1, s[0], s[1], s[2]});
    Tensor pred = ops::argmax(model.forward(x), 1).view_as_shape(s);
    std::vector<double> d = dice_per_class(pred, v.label, num_classes);
    for (size_t c = 0; c < d.size(); ++c) sum[c] += d[c];
  }
  for (double& d : sum) d /= std::max<size_t>(vols.size(), 1);
  model.train();
  return sum;
}

static std::string fmt(double v, int prec = 4) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(prec);
  os << v;
  return os.str();
}

int run_train(const TrainArgs& a) {
  Recipe r = recipe_by_name(a.config);
  if (a.data.empty()) r.epochs = r.default_data_epochs;
  if (a.epochs > 0) r.epochs = a.epochs;
  if (a.batch > 0) r.batch = a.batch;
  if (a.lr > 0) r.lr = a.lr;
  if (a.val_every > 0) r.val_every = a.val_every;
  HG_CHECK(!a.out.empty(), "halfgrad-unet3d train: --out RUN_DIR is required");
  std::filesystem::create_directories(a.out);

  manual_seed(a.seed);
  Generator gen(a.seed);
  const auto t_load = Clock::now();
  SegData data = a.data.empty() ? load_default_data(r) : load_msd_data(a.data, r, false);
  r.model.num_classes(data.num_classes);
  std::cout << "data: " << data.source << ": " << data.train.size() << " training, " << data.val.size()
            << " validation volumes, " << data.num_classes << " classes (loaded in " << fmt(seconds_since(t_load), 1)
            << " s)" << std::endl;

  auto model = std::make_shared<nn::UNet3d>(r.model);
  std::cout << "model: UNet3d " << r.model.describe() << ", " << model->num_parameters() << " parameters; recipe '"
            << r.name << "', " << (a.amp ? "AMP (autocast FP16 + GradScaler)" : "FP32") << ", batch " << r.batch
            << ", AdamW lr " << r.lr << ", " << r.epochs << " epochs, " << ops::num_threads() << " CPU threads" << std::endl;

  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(r.lr).weight_decay(r.weight_decay));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(a.amp));

  const int64_t per_epoch = r.samples_per_epoch > 0 ? r.samples_per_epoch : static_cast<int64_t>(data.train.size());
  const int64_t steps_per_epoch = std::max<int64_t>(1, per_epoch / r.batch);
  std::ofstream csv(a.out + "/metrics.csv");
  csv << "epoch,train_loss,skipped_steps,loss_scale,lr";
  for (int64_t c = 1; c < data.num_classes; ++c) csv << ",dice_" << data.class_names[c];
  csv << ",mean_dice,epoch_seconds,elapsed_seconds\n";

  const auto t0 = Clock::now();
  double best = -1;
  for (int64_t epoch = 1; epoch <= r.epochs; ++epoch) {
    const auto te = Clock::now();
    double loss_sum = 0;
    int64_t skipped = 0, counted = 0;
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      const double lr = lr_at(r, (epoch - 1) + static_cast<double>(step) / steps_per_epoch);
      for (auto& g : opt.param_groups()) g.options().set_lr(lr);
      Tensor x, y;
      make_training_batch(data, r, gen, x, y);
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard autocast(a.amp);
        loss = ops::segmentation_loss(model->forward(x), y);
      }
      scaler.scale(loss).backward();
      const bool stepped = scaler.step(opt);
      scaler.update();
      if (!stepped) ++skipped;
      const double l = loss.item();
      if (std::isfinite(l)) { loss_sum += l; ++counted; }
      if (a.progress) {
        const double el = seconds_since(te);
        std::fprintf(stderr, "\r  epoch %lld [%-30s] %lld/%lld loss %.4f  %.2f s/step ", static_cast<long long>(epoch),
                     std::string(static_cast<size_t>(30 * (step + 1) / steps_per_epoch), '#').c_str(),
                     static_cast<long long>(step + 1), static_cast<long long>(steps_per_epoch), l, el / (step + 1));
        std::fflush(stderr);
      }
    }
    if (a.progress) std::fprintf(stderr, "\r%100s\r", "");
    const double train_loss = counted ? loss_sum / counted : NAN;
    const bool do_val = epoch % r.val_every == 0 || epoch == r.epochs;
    std::vector<double> dice;
    if (do_val) dice = validate(*model, data.val, data.num_classes, a.amp);
    double mean = 0;
    for (double d : dice) mean += d;
    if (!dice.empty()) mean /= dice.size();
    const double epoch_s = seconds_since(te), elapsed = seconds_since(t0);

    std::ostringstream line;
    line << "epoch " << epoch << "/" << r.epochs << "  loss " << fmt(train_loss) << "  skipped " << skipped
         << "  scale " << scaler.get_scale() << "  lr " << fmt(opt.param_groups()[0].options().get_lr(), 5);
    if (do_val) {
      line << "  val dice";
      for (size_t c = 0; c < dice.size(); ++c) line << " " << data.class_names[c + 1] << " " << fmt(dice[c]);
      line << "  mean " << fmt(mean);
    }
    line << "  " << fmt(epoch_s, 1) << " s";
    std::cout << line.str() << std::endl;

    csv << epoch << "," << train_loss << "," << skipped << "," << scaler.get_scale() << "," << opt.param_groups()[0].options().get_lr();
    for (int64_t c = 1; c < data.num_classes; ++c) csv << "," << (do_val ? fmt(dice[c - 1]) : "");
    csv << "," << (do_val ? fmt(mean) : "") << "," << fmt(epoch_s, 2) << "," << fmt(elapsed, 2) << "\n";
    csv.flush();

    nlohmann::json meta = {{"recipe", r.name},        {"model", r.model.to_json()}, {"epoch", epoch},
                           {"amp", a.amp},            {"volume_shape", r.volume_shape},
                           {"class_names", data.class_names}, {"scaler", scaler.state_dict()},
                           {"optimizer", opt.state_dict()}, {"val_mean_dice", mean}};
    nn::save_checkpoint(a.out + "/checkpoint.bin", *model, meta);
    if (do_val && mean > best) best = mean;
    if (a.max_minutes > 0 && elapsed > a.max_minutes * 60) {
      std::cout << "stopping: --max-minutes " << a.max_minutes << " reached after epoch " << epoch << std::endl;
      break;
    }
  }
  std::cout << "done in " << fmt(seconds_since(t0), 1) << " s; best validation mean Dice " << fmt(best)
            << "; checkpoint " << a.out << "/checkpoint.bin, metrics " << a.out << "/metrics.csv" << std::endl;
  return 0;
}

int run_eval(const EvalArgs& a) {
  nlohmann::json meta = nn::read_checkpoint_metadata(a.checkpoint);
  Recipe r = recipe_by_name(meta.at("recipe").get<std::string>());
  r.model = nn::UNet3dOptions::from_json(meta.at("model"));
  r.volume_shape = meta.at("volume_shape").get<std::array<int64_t, 3>>();
  auto model = std::make_shared<nn::UNet3d>(r.model);
  nn::load_checkpoint(a.checkpoint, *model);
  SegData data = a.data.empty() ? load_default_data(r) : load_msd_data(a.data, r, true);
  HG_CHECK(data.num_classes == r.model.num_classes(),
           "halfgrad-unet3d eval: " << data.source << " has " << data.num_classes << " classes but checkpoint "
                                    << a.checkpoint << " was trained for " << r.model.num_classes());
  std::vector<double> dice = validate(*model, data.val, data.num_classes, meta.value("amp", false));
  double mean = 0;
  for (double d : dice) mean += d;
  mean /= std::max<size_t>(dice.size(), 1);
  nlohmann::json out = {{"dice", dice}, {"mean_dice", mean}, {"volumes", data.val.size()}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace unet3d_app
