// trainer.cpp - halfgrad-unet3d's training run (trainer.h): the setup in the constructor's order, one
// step, the epoch loop and its end, the report.
#include "examples/05_unet3d/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "autocast/autocast.h"
#include "autograd/anomaly.h"
#include "core/allocator.h"
#include "core/checksum.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/json_checked.h"
#include "core/nonfinite.h"
#include "core/nvtx.h"
#include "dist/scaler_agreement.h"
#include "examples/05_unet3d/curves.h"
#include "examples/05_unet3d/resume.h"
#include "nn/batch_norm.h"
#include "ops/common.h"
#include "ops/ops.h"
#include "unet3d/run_checkpoint.h"

namespace unet3d_app {

using namespace halfgrad;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt(double v, int prec = 4) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(prec);
  os << v;
  return os.str();
}

// --workers: on CUDA two threads keep the GPU fed; on the CPU a worker competes with the compute threads
// for the same cores (bench/NOTES.md, "Issue 9: loader"), so batches are built in the training thread.
int default_workers(Device device) { return device == Device::CUDA ? 2 : 0; }

// The options of the run: the command line's, or (--resume) the run's own from its training state
// merged with the command line's (resume.h); --data as an absolute path, so that a run resumed from
// another working directory reads the same folder.
TrainArgs run_args(const TrainArgs& cli_args, const nlohmann::json& saved_meta) {
  TrainArgs a = cli_args.resume.empty() ? cli_args : resumed_args(cli_args, saved_meta);
  if (!a.data.empty()) a.data = std::filesystem::absolute(a.data).lexically_normal().string();
  return a;
}

// The recipe of --config with the command line's overrides.
Recipe run_recipe(const TrainArgs& a) {
  Recipe r = recipe_by_name(a.config);
  if (a.optimizer == "sgd") r = with_nnunet_sgd(r);
  if (!a.lr_schedule.empty()) r.schedule = schedule_by_name(a.lr_schedule, "halfgrad-unet3d train: --lr-schedule");
  if (a.data.empty()) r.epochs = r.default_data_epochs;
  if (a.epochs > 0) r.epochs = a.epochs;
  if (a.batch > 0) r.batch = a.batch;
  if (a.lr > 0) r.lr = a.lr;
  if (a.val_every > 0) r.val_every = a.val_every;
  if (!a.augment.empty()) r.augment = augmentation_by_name(a.augment, "halfgrad-unet3d train: --augment");
  if (a.deep_supervision) r.model.deep_supervision(true);
  return r;
}

// --augment-device (gpu_batch.h): cpu unless given, written back into the options (which the run saves,
// so that --resume keeps it). The CUDA kernels are opt-in until they have run on a GPU: they were
// written and checked against the CPU loops on a machine without one (tests/cuda/augment_cuda_test.cpp
// has not run yet). Returns whether the augmentation runs on the GPU.
bool resolve_augment_device(TrainArgs& a, const Recipe& r) {
  if (a.augment_device.empty()) a.augment_device = "cpu";
  return r.augment != Augmentation::None && a.augment_device == "cuda";
}

// --grad-stats FILE follows the run folder's rule: an existing file is refused unless --overwrite,
// and it may not be one of the run's own files.
void check_grad_stats_path(const TrainArgs& a) {
  if (a.grad_stats.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(a.grad_stats, ec);
  std::vector<std::string> own = run_file_names();
  own.push_back(RunFolderLock::kFileName);
  for (const std::string& name : own)
    HG_CHECK(p != fs::weakly_canonical(fs::path(a.out) / name, ec),
             "halfgrad-unet3d train: --grad-stats " << a.grad_stats << " is the run's own " << name
                                                    << "; expected another file");
  const fs::file_status st = fs::symlink_status(a.grad_stats, ec);
  HG_CHECK(!fs::exists(st) || fs::is_regular_file(st) || fs::is_symlink(st),
           "halfgrad-unet3d train: --grad-stats " << a.grad_stats << " exists and is not a file; expected a CSV file path");
  HG_CHECK(!fs::exists(st) || a.overwrite,
           "halfgrad-unet3d train: --grad-stats " << a.grad_stats << " exists already; pass --overwrite to replace it, "
                                                  << "or choose another file");
  // Its folder must take the file now, not after the data has loaded (the run folder is made later).
  const fs::path parent = fs::path(a.grad_stats).has_parent_path() ? fs::path(a.grad_stats).parent_path() : fs::path(".");
  if (fs::weakly_canonical(parent, ec) == fs::weakly_canonical(a.out, ec)) return;
  const bool is_dir = fs::is_directory(parent, ec);
  HG_CHECK(is_dir && ::access(parent.c_str(), W_OK | X_OK) == 0,
           "halfgrad-unet3d train: --grad-stats " << a.grad_stats << ": cannot write into " << parent.string() << " ("
                                                  << (is_dir ? std::strerror(errno) : "no such folder")
                                                  << "); expected a CSV file path in a writable folder");
}

// --resume: the data must be the data the run was trained on (data_fingerprint.h).
void check_resumed_data(const nlohmann::json& saved_meta, const DataFingerprint& now, const TrainArgs& a) {
  const std::string where = "halfgrad-unet3d train --resume " + a.resume;
  const json_checked::Field m(saved_meta, where + ": training_state.safetensors");
  if (!m.has("data_fingerprint")) {
    std::cout << "note: the run was saved without a data fingerprint (before 2026-12-04): the data is not "
                 "compared with what it trained on" << std::endl;
    return;
  }
  const DataFingerprint saved = DataFingerprint::from_json(m["data_fingerprint"]);
  const std::vector<std::string> diffs = data_differences(saved, now);
  if (diffs.empty()) return;
  std::string list;
  for (const std::string& d : diffs) list += "\n  " + d;
  if (!data_changed(saved, now)) {  // the same files in a moved folder
    std::cout << "note: the data has the same files as the run's:" << list << std::endl;
    return;
  }
  HG_CHECK(a.allow_data_change, where << ": the data is not what the run trained on:" << list
                                      << "\npass --allow-data-change to continue on the new data knowingly (the run "
                                         "will then match no run on either), or restore the data");
  std::cout << "warning: --allow-data-change: the data is not what the run trained on:" << list << std::endl;
}

// Why --cuda-graph is off for this run ("" when it is on): something in the step needs the host.
std::string graph_off_reason(const TrainArgs& a, const RankContext& ctx) {
  if (ctx.distributed()) return "several GPUs (the all-reduces and the ranks' agreement sit between the step's parts)";
  if (a.detect_anomaly) return "--detect-anomaly checks every op's output on the host";
  if (a.precision_report) return "--precision-report records every op and every step's outcome on the host";
  if (!a.grad_stats.empty()) return "--grad-stats reads the gradients on the host";
  if (a.deep_supervision) return "--deep-supervision downsamples the labels on the host (ops/loss/deep_supervision.h)";
  return "";
}

}  // namespace

std::vector<double> validate(nn::UNet3d& model, const std::vector<SegVolume>& vols, int64_t num_classes,
                             const amp::OptLevelSetup& mp, const Placement& where,
                             const std::function<void(const SegVolume&, const Tensor&)>& on_volume) {
  model.eval();
  NoGradGuard no_grad;
  amp::AutocastGuard autocast(mp.autocast_options());
  std::vector<double> sum(num_classes - 1, 0.0);
  for (const SegVolume& v : vols) {
    const Shape s = v.image.shape();
    Tensor x = mp.cast_input(where.input(v.image.view_as_shape({1, 1, s[0], s[1], s[2]})));
    const Tensor logits = model(x);
    // A NaN logit argmaxes to a class without a word and scores a plausible Dice: refuse it.
    HG_CHECK(!any_nonfinite(logits),
             "halfgrad-unet3d: validation of " << v.name << ": the network's output holds NaN or inf ("
                                               << amp::opt_level_name(mp.level) << "): "
                                               << (mp.level == amp::OptLevel::O0
                                                       ? "the weights or the BatchNorm statistics are too large or not "
                                                         "finite, or a variance is negative"
                                                       : "the weights or the BatchNorm statistics are too large or not "
                                                         "finite, or an FP16 forward overflowed (try --fp32-module or "
                                                         "the FP32 model)"));
    Tensor pred = ops::argmax(logits, 1).copy_to(Device::CPU).view_as_shape(s);
    std::vector<double> d = dice_per_class(pred, v.label, num_classes);
    if (on_volume) on_volume(v, pred);
    for (size_t c = 0; c < d.size(); ++c) sum[c] += d[c];
  }
  for (double& d : sum) d /= std::max<size_t>(vols.size(), 1);
  model.train();
  return sum;
}

Trainer::MuteStdout::~MuteStdout() {
  if (muted) {
    std::cout.rdbuf(saved);
    std::cout.clear();
  }
}

Trainer::Trainer(const TrainArgs& cli_args, const RankContext& ctx)
    : ctx_(ctx),
      mute_(!ctx.is_root()),
      agreement_(ctx),
      saved_meta_(cli_args.resume.empty() ? nlohmann::json() : read_run_training_meta(cli_args.resume)),
      a_(run_args(cli_args, saved_meta_)),
      resuming_(!a_.resume.empty()),
      r_(run_recipe(a_)) {
  HG_CHECK(!a_.out.empty(), "halfgrad-unet3d train: --out RUN_DIR is required");
  guard_run_folder();
  take_plan();
  // This rank's samples of each global batch of r.batch (all of them with one GPU).
  slice_ = rank_batch_slice(r_.batch, ctx_.world_size, ctx_.rank);
  plan_ = precision_plan(a_);  // a bad combination fails before the data loads
  where_ = make_placement(a_.device, a_.memory_format, "train");
  load_data();
  check_train_memory();
  make_run_folder();
  build_model();
  decide_graph();
  build_optimizer();
  open_instruments();
  restore_run();
  start_ddp_and_loader();
  build_graph_step();
  t0_ = Clock::now();  // run() starts the clock again; run_epoch() / end_epoch() alone count from here
}

Trainer::~Trainer() = default;

// Refuse at once, before the data loads; rank 0 owns the folder, and tells the others. The lock is
// rank 0's for the life of the run (a folder made later, once the data has loaded, is locked then).
void Trainer::guard_run_folder() {
  if (ctx_.is_root()) agreement_.guard([&] {
    if (!resuming_) check_run_folder(a_.out, a_.overwrite);
    if (std::filesystem::is_directory(a_.out)) lock_.emplace(a_.out);
    check_grad_stats_path(a_);
  });
  agreement_.agree({}, "the run folder check");
}

// --plan (plan.h): made now (auto), read (FILE) or, on --resume, the run's own plan.json. A fresh run
// folds the plan's config, batch and spacing into its options (which its training state saves, so a
// resumed run has them already); the patch, widths, samples per epoch and foreground share go into
// the recipe. The plan's checksum is saved with the options, so --resume refuses a plan.json edited since.
void Trainer::take_plan() {
  if (a_.plan.empty()) return;
  const std::string own = a_.out + "/" + kPlanFile;
  if (resuming_) {
    HG_CHECK(std::filesystem::exists(own), "halfgrad-unet3d train --resume " << a_.out << ": the run was started with "
                                               << "--plan " << a_.plan << ", but " << own << " is missing; restore it");
    training_plan_ = read_plan(own);
    const std::string text = plan_text(*training_plan_);
    const std::string sum = hex64(xxh3_64(text.data(), text.size()));
    HG_CHECK(a_.plan_xxh3.empty() || sum == a_.plan_xxh3,
             "halfgrad-unet3d train --resume " << a_.out << ": " << own << " is not the plan the run started with "
                 << "(its values changed since: checksum " << sum << ", the training state saved " << a_.plan_xxh3
                 << "); restore the run's plan.json, or start a new run with --plan " << own);
  } else if (a_.plan == "auto") {
    const bool config_given = std::count(a_.given.begin(), a_.given.end(), "--config") > 0;
    const PlanTarget target = plan_target(a_.device, precision_plan(a_).level,
                                          config_given ? a_.config : default_plan_config(a_.device), 0,
                                          "halfgrad-unet3d train --plan auto");
    training_plan_ = make_plan(fingerprint_dataset(a_.data), target);
  } else {
    training_plan_ = read_plan(a_.plan);
    check_plan_matches_data(*training_plan_, a_.data, a_.plan);
  }
  std::cout << training_plan_->summary();
  if (training_plan_->device != a_.device || training_plan_->opt_level != amp::opt_level_name(precision_plan(a_).level))
    std::cout << "note: the plan was made for " << training_plan_->device << " at " << training_plan_->opt_level
              << "; this run is on " << a_.device << " at " << amp::opt_level_name(precision_plan(a_).level)
              << " (the memory check below still applies)" << std::endl;
  if (!resuming_) {
    for (const std::string& line : fold_plan_into_args(a_, *training_plan_)) std::cout << "plan: " << line << std::endl;
    const std::string text = plan_text(*training_plan_);
    a_.plan_xxh3 = hex64(xxh3_64(text.data(), text.size()));
  }
  r_ = apply_plan(run_recipe(a_), *training_plan_);
}

void Trainer::load_data() {
  manual_seed(a_.seed);  // the model's initial weights; batches come from batch_seed(seed, step)
  const auto t_load = Clock::now();
  HG_CHECK(!a_.data.empty() || !std::count(a_.given.begin(), a_.given.end(), "--fold"),
           "halfgrad-unet3d train: --fold needs --data (the default data splits by hemisphere, not by fold)");
  HG_CHECK(!a_.data.empty() || !std::count(a_.given.begin(), a_.given.end(), "--spacing"),
           "halfgrad-unet3d train: --spacing needs --data (the default data is the 2 mm atlas of io/mricron.h)");
  data_ = a_.data.empty() ? load_default_data(r_)
                          : load_msd_data(a_.data, r_, false, a_.fold,
                                          SpacingChoice::parse(a_.spacing, "halfgrad-unet3d train: --spacing"));
  r_.model.num_classes(data_.num_classes);
  std::cout << "data: " << data_.source << ": " << data_.train.size() << " training, " << data_.val.size()
            << " validation volumes, " << data_.num_classes << " classes (loaded in " << fmt(seconds_since(t_load), 1)
            << " s)" << std::endl;
  if (r_.model.deep_supervision() && r_.model.channels().size() < 3)
    std::cout << "note: --deep-supervision on a U-Net of " << r_.model.channels().size()
              << " levels adds one output, at the lowest resolution, whose weight is 0 (nnU-Net's rule): the loss is "
                 "the plain one; it needs 3 levels or more to change anything"
              << std::endl;
  gpu_augment_ = resolve_augment_device(a_, r_);
  if (r_.augment != Augmentation::None)
    std::cout << "augment: " << augmentation_name(r_.augment)
              << ", nnU-Net v2's training transforms on each sample before its flips (io/augment.h), "
              << (gpu_augment_ ? "drawn on the CPU and applied by CUDA kernels (--augment-device cuda; gpu_batch.h)"
                               : "on the CPU (--augment-device cpu)")
              << std::endl;
  r_.volume_shape = data_.volume_shape;
  // What the data is, by content: saved with every checkpoint, compared on --resume (rank 0's job,
  // before the run folder is touched).
  if (ctx_.is_root()) agreement_.guard([&] {
    fingerprint_ = fingerprint_data(data_.root, data_.files);
    if (resuming_) check_resumed_data(saved_meta_, *fingerprint_, a_);
  });
}

// Memory, from the shapes, before the optimizer state, the batches and the activations exist. The
// peak the run reports at the end counts from here (the data already loaded is not part of it).
void Trainer::check_train_memory() {
  const bool cuda = where_.device == Device::CUDA;
  memory_baseline_ = cuda ? cuda::allocator_stats().allocated_bytes : cpu_allocator_stats().allocated_bytes;
  if (cuda) cuda::reset_peak_stats();
  else cpu_reset_peak_stats();
  model_ = std::make_shared<nn::UNet3d>(r_.model);
  const std::array<int64_t, 3> step_shape = r_.patch[0] > 0 ? r_.patch : r_.volume_shape;
  need_ = estimate_train_memory(r_.model, model_->num_parameters(), step_shape, slice_.size(), r_.volume_shape,
                                plan_.level, cuda);
  if (gpu_augment_) need_.augment_volumes = GpuBatchBuilder::volume_bytes(data_);
  if (!a_.memory_check) return;
  const MemoryAvailable avail = available_memory(a_.device);
  HG_CHECK(need_.augment_volumes <= avail.bytes,
           "halfgrad-unet3d train: --augment-device cuda holds the " << data_.train.size() << " training volumes on the "
               << "GPU, " << human_bytes(need_.augment_volumes) << ", but the GPU has " << human_bytes(avail.bytes)
               << " available (" << avail.source << "); pass --augment-device cpu to augment on the CPU instead");
  check_memory(need_, avail, "train", a_.device,
               "lower --batch (now " + std::to_string(r_.batch) +
                   (ctx_.distributed() ? ", " + std::to_string(slice_.size()) + " per GPU" : std::string()) + ")" +
                   (gpu_augment_ ? ", pass --augment-device cpu (the training volumes then stay in host memory)" : ""));
  std::cout << "memory: estimated " << need_.describe() << "; " << human_bytes(avail.bytes) << " available"
            << std::endl;
}

// The run folder is touched only once the data has loaded and the memory is known to suffice, and
// an earlier run in it is removed only after the model, optimizer and instruments are set up
// (open_instruments), so a run that fails on bad input leaves the folder's files as they were.
// Only rank 0 writes into it, so only rank 0 makes and checks it: another rank (another host, or
// one that got here first) may not see it yet, and nothing orders the two.
void Trainer::make_run_folder() {
  if (!ctx_.is_root()) return;
  std::error_code ec;
  std::filesystem::create_directories(a_.out, ec);
  HG_CHECK(!ec && std::filesystem::is_directory(a_.out),
           "halfgrad-unet3d train: --out " << a_.out << ": cannot create the run folder (" << ec.message()
                                           << "); expected a writable directory path");
  if (!lock_) lock_.emplace(a_.out);
}

// The precision plan applied to the model and the optimizer's and scaler's options; the model on its
// device (before the optimizer: its state is made on the parameters' device); the model line.
void Trainer::build_model() {
  HG_CHECK(r_.optimizer != OptimizerKind::Sgd || plan_.level != amp::OptLevel::O3,
           "halfgrad-unet3d train --optimizer sgd: --opt-level O3 keeps no FP32 master weights, which SGD "
           "always uses (optim/sgd.h); expected O0, O1 (--amp) or O2, or --optimizer adamw");
  adamw_ = optim::AdamWOptions().lr(r_.lr).weight_decay(r_.weight_decay);
  mp_ = plan_.apply(*model_, adamw_, scaler_options_);
  if (plan_.lower == kBFloat16)
    std::cout << "amp: autocast lowers to bfloat16; GradScaler disabled (BF16 has FP32's exponent range, so its "
                 "gradients need no loss scaling)" << std::endl;
  model_->to(where_.device);
  if (where_.device == Device::CUDA)
    std::cout << "device: " << cuda::device_description() << ", activations "
              << (where_.format == MemoryFormat::ChannelsLast3d ? "NDHWC (channels-last)" : "NCDHW") << std::endl;
  std::cout << "model: UNet3d " << r_.model.describe() << ", " << model_->num_parameters() << " parameters; recipe '"
            << r_.name << "', " << plan_.describe() << ", batch " << r_.batch
            << (ctx_.distributed() ? " (" + std::to_string(slice_.size()) + " on each of " +
                                         std::to_string(ctx_.world_size) + " GPUs, DistributedDataParallel over NCCL)"
                                   : std::string())
            << ", " << describe_optimizer() << ", " << r_.epochs << " epochs, " << ops::num_threads() << " CPU threads" << std::endl;
  for (const std::string& name : a_.fp32_ops) std::cout << "autocast: op " << name << " runs in FP32" << std::endl;
  for (const std::string& prefix : a_.fp32_modules)
    std::cout << "autocast: modules '" << prefix << "*' run in FP32" << std::endl;
}

// --cuda-graph: on with --device cuda unless something in the step needs the host (graph_step.h).
void Trainer::decide_graph() {
  if (where_.device != Device::CUDA || !a_.cuda_graph) return;
  std::string off = graph_off_reason(a_, ctx_);
  if (off.empty() && r_.optimizer == OptimizerKind::Sgd)
    off = "--optimizer sgd: SGD's learning rate is a number in its kernel's arguments (optim/sgd_cuda.h), so a "
          "captured step would replay one lr";
  use_graph_ = off.empty();
  if (!use_graph_) std::cout << "cuda graph: off: " << off << "; eager steps" << std::endl;
}

// "AdamW lr 0.001, weight decay 0.01, cosine" / "SGD lr 0.01, Nesterov momentum 0.99, weight decay 3e-05, poly".
std::string Trainer::describe_optimizer() const {
  std::ostringstream os;
  os << (r_.optimizer == OptimizerKind::Sgd ? "SGD" : "AdamW") << " lr " << r_.lr;
  if (r_.optimizer == OptimizerKind::Sgd) os << ", Nesterov momentum " << r_.momentum;
  os << ", weight decay " << r_.weight_decay;
  if (r_.optimizer == OptimizerKind::AdamW && plan_.level == amp::OptLevel::O3) os << ", eps " << adamw_.eps();
  os << ", " << (r_.warmup_epochs > 0 ? std::to_string(r_.warmup_epochs) + "-epoch warm-up, " : std::string())
     << schedule_name(r_.schedule) << " schedule";
  return os.str();
}

// AdamW (capturable under a CUDA graph) or nnU-Net's SGD. The precision plan set adamw_'s master
// weights; SGD always updates FP16 / BF16 parameters through FP32 master weights (optim/sgd.h), so the
// pure-FP16 level O3, which has none, is AdamW's only (build_model refuses it).
void Trainer::build_optimizer() {
  scaler_options_.capturable(use_graph_);
  if (r_.optimizer == OptimizerKind::Sgd) {
    opt_ = std::make_unique<optim::SGD>(model_->parameters(), optim::SGDOptions(r_.lr)
                                                                   .momentum(r_.momentum)
                                                                   .nesterov(true)
                                                                   .weight_decay(r_.weight_decay));
  } else {
    adamw_.capturable(use_graph_);  // lr and step counts on the device
    auto adamw = std::make_unique<optim::AdamW>(model_->parameters(), adamw_);
    adamw_opt_ = adamw.get();
    opt_ = std::move(adamw);
  }
  scaler_ = std::make_unique<amp::GradScaler>(scaler_options_);
  const int64_t per_epoch = r_.samples_per_epoch > 0 ? r_.samples_per_epoch : static_cast<int64_t>(data_.train.size());
  steps_per_epoch_ = std::max<int64_t>(1, per_epoch / r_.batch);
}

// Instruments (--grad-stats, --precision-report, --detect-anomaly); each does nothing unless asked.
// Last of the steps that can fail on the user's options: only then is an earlier run removed
// (--overwrite) and are stale temp files cleaned.
void Trainer::open_instruments() {
  HG_CHECK(a_.grad_stats_every >= 1, "halfgrad-unet3d train: --grad-stats-every must be >= 1, got " << a_.grad_stats_every);
  if (!a_.grad_stats.empty() && ctx_.is_root()) grad_stats_.emplace(a_.grad_stats);  // the grads agree after DDP
  if (ctx_.is_root())
    for (const std::string& note : resuming_ ? remove_stale_temps(a_.out) : prepare_run_folder(a_.out, a_.overwrite))
      std::cout << "note: " << note << std::endl;
  // metrics.csv is rewritten (atomically) right after each checkpoint, with the rows up to the
  // checkpoint's epoch, which training_state.safetensors holds too. A process killed between the
  // renames leaves metrics.csv one save behind; --resume rewrites it from the training state's rows.
  csv_path_ = a_.out + "/metrics.csv";
  metrics_.emplace(data_.class_names);
  gpu_gaps_.emplace(where_.device == Device::CUDA);
  // A step GradScaler skips changes nothing but the loss scale: the BatchNorm running statistics it
  // folded in (inf/NaN when the forward overflowed, pytorch#115500) are put back (nn/buffer_snapshot.h).
  if (scaler_->is_enabled() && !model_->buffers().empty()) buffers_before_.emplace(*model_);
}

// --resume: the model, optimizer and scaler as they were after the saved epoch; the batches continue
// from the saved step (a batch is a function of the seed and the step: make_training_batch).
void Trainer::restore_run() {
  if (!resuming_) return;
  const nlohmann::json saved = load_run_checkpoint(a_.out, *model_, *opt_, *scaler_);
  const json_checked::Field m(saved, a_.out + "/" + kTrainingStateFile);
  saved_epoch_ = m["epoch"].as_int(1, r_.epochs - 1);
  start_epoch_ = saved_epoch_ + 1;
  global_step_ = m["step"].as_int(0, INT64_MAX);
  HG_CHECK(global_step_ == saved_epoch_ * steps_per_epoch_,
           "halfgrad-unet3d train --resume " << a_.out << ": the training state is at step " << global_step_
               << " after epoch " << saved_epoch_ << ", but this data gives " << steps_per_epoch_
               << " steps per epoch; was --data changed?");
  if (m.has("metrics_rows")) {  // saved before 2026-12-04: the rows with their times, and the total time
    metrics_->restore_rows(m["metrics_rows"].as_string_list());
    elapsed_before_ = m["elapsed_seconds"].as_number();
  } else {  // the rows without times; the times from metrics.csv where its rows agree
    elapsed_before_ = metrics_->restore_untimed_rows(m["metrics"]["rows"].as_string_list(), read_metrics_csv(csv_path_));
  }
  best_ = m["best_dice"].as_number();
  best_epoch_ = m["best_epoch"].as_int();
  last_ = m["last_dice"].as_number();
  last_epoch_ = m["last_epoch"].as_int();
  nonfinite_streak_ = m["nonfinite_streak"].as_int();
  std::cout << "resume: " << a_.out << " after epoch " << saved_epoch_ << " of " << r_.epochs << " (step "
            << global_step_ << ", loss scale " << scaler_->get_scale() << ")" << std::endl;
}

// Several GPUs: the replicas start from rank 0's weights (the broadcast of DDP's constructor, after a
// --resume too), gradients are averaged in backward, the scaler's inf/NaN flag is MAX-reduced.
// Buffers are not broadcast before each forward: training-mode BatchNorm uses the batch's statistics,
// and rank 0's running statistics (the checkpoint's) are its own either way; so no collective
// precedes the step agreement. Batches: built ahead by worker threads (loader.h), in step order from
// global_step on (after a --resume, the saved step: the loader starts only once it is known).
void Trainer::start_ddp_and_loader() {
  if (ctx_.distributed()) {
    HG_CHECK(!r_.model.deep_supervision(),
             "halfgrad-unet3d train --deep-supervision: runs on one GPU only (DistributedDataParallel's forward "
             "returns one output); got --gpus " << ctx_.world_size);
    ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, ctx_.comm, dist::DdpOptions().broadcast_buffers(false));
    dist::set_communicator(*scaler_, ctx_.comm);
  }
  loader_options_.workers = a_.workers >= 0 ? static_cast<int>(a_.workers) : default_workers(where_.device);
  loader_options_.prefetch = static_cast<int>(a_.prefetch);
  loader_options_.device = where_.device;
  BatchBuilder build = [this](int64_t step, Tensor& x, Tensor& y) {
    make_training_batch_slice(data_, r_, a_.seed, step, slice_.begin, slice_.end, x, y);
  };
  if (gpu_augment_) {  // kernels queued by the training thread, on the step's stream (gpu_batch.h says why)
    if (a_.workers > 0)
      std::cout << "note: --workers " << a_.workers << " unused: with --augment-device cuda the training thread "
                << "queues each batch's kernels (gpu_batch.h)" << std::endl;
    loader_options_.workers = 0;
    gpu_batch_ = std::make_unique<GpuBatchBuilder>(data_, r_, a_.seed, slice_);
    build = [this](int64_t step, Tensor& x, Tensor& y) { gpu_batch_->build(step, x, y); };
  }
  loader_ = std::make_unique<BatchLoader>(std::move(build), global_step_, r_.epochs * steps_per_epoch_, loader_options_);
}

// --cuda-graph: step() without hooks on the graph's static buffers, with the buffer restore and the
// label check decided on the device.
void Trainer::build_graph_step() {
  if (!use_graph_) return;
  constexpr int64_t kGraphWarmupSteps = 3;
  label_check_.emplace();
  lagged_.emplace();
  for (const auto& m : model_->modules())
    if (const auto* bn = dynamic_cast<const nn::BatchNorm3d*>(m.get()); bn != nullptr && bn->num_batches_tracked.defined())
      bn_counters_.push_back(bn->num_batches_tracked);
  graph_step_ = std::make_unique<GraphStep>([this](const Tensor& xs, const Tensor& ys) { return step(xs, ys).loss; },
                                            [this] { adamw_opt_->stage_lr(); }, kGraphWarmupSteps);
  std::cout << "cuda graph: the training step is captured after " << kGraphWarmupSteps
            << " eager steps and replayed (--no-cuda-graph for eager steps)" << std::endl;
}

Tensor Trainer::forward_loss(const Tensor& x, const Tensor& y) {
  NvtxRange nvtx_range("forward");
  amp::AutocastGuard autocast(mp_.autocast_options());
  // The loss in FP32 at every level (O2/O3 logits are FP16; under O1 the loss is on autocast's FP32
  // list anyway).
  const Tensor input = mp_.cast_input(x);
  if (r_.model.deep_supervision()) {  // --deep-supervision: one GPU (start_ddp_and_loader), so no ddp_
    std::vector<Tensor> logits = model_->forward_deep(input);
    for (Tensor& l : logits) l = l.to(kFloat32);
    return ops::deep_supervision_loss(logits, y);
  }
  return ops::segmentation_loss((ddp_ ? ddp_->forward(input) : (*model_)(input)).to(kFloat32), y);
}

Trainer::StepResult Trainer::step(const Tensor& x, const Tensor& y, const StepHooks& hooks) {
  amp::PrecisionRecorder::Observe observe(a_.precision_report ? &precision_ : nullptr);
  autograd::DetectAnomalyGuard anomaly(a_.detect_anomaly);
  StepResult out;
  // Several GPUs: an error in the guarded part is every rank's, at the agreement in after_forward.
  agreement_.guard([&] {
    opt_->zero_grad();
    if (buffers_before_) buffers_before_->capture();
    out.loss = forward_loss(x, y);
  });
  if (hooks.after_forward) hooks.after_forward(out.loss);
  {
    NvtxRange nvtx_range("backward");
    scaler_->scale(out.loss).backward();
  }
  if (hooks.after_backward) hooks.after_backward();
  {
    NvtxRange nvtx_range("optimizer step");
    out.stepped = scaler_->step(*opt_);  // capturable: skipped on the device when found_inf is set
  }
  if (buffers_before_) {
    if (scaler_options_.capturable()) buffers_before_->restore_if(scaler_->device_found_inf(*opt_));
    else if (!out.stepped) buffers_before_->restore();
  }
  scaler_->update();
  return out;
}

// One epoch's tally: the mean loss, the skipped and non-finite steps, the progress bar.
struct Trainer::Epoch {
  Epoch(int64_t number, int64_t steps, bool progress)
      : number(number), bar("  epoch " + std::to_string(number), steps, progress), start(Clock::now()) {}
  int64_t number;
  ProgressBar bar;
  Clock::time_point start;
  double loss_sum = 0;
  int64_t skipped = 0, counted = 0, nonfinite = 0;
  int64_t skipped_before = 0, replays_before = 0, captures_before = 0;  // --cuda-graph: the device counts them
  double lagged_lr = 0;  // --cuda-graph: the lr of the step whose loss is pending
};

// The host's bookkeeping of step `s`'s loss `l` (lr `lr_used`): eager, before the step's backward;
// with --cuda-graph one step late, after the step (and the next one's queueing).
void Trainer::check_loss(Epoch& e, double l, int64_t s, double lr_used) {
  if (std::isfinite(l)) {
    nonfinite_streak_ = 0;
    return;
  }
  constexpr int64_t kMaxNonFiniteStreak = 50;  // GradScaler halves the scale each time: 2^16 -> 2^-34
  // Without a loss scaler nothing would skip this step: the weights would turn NaN and every later
  // checkpoint with them. With one, a non-finite loss is skipped like an overflow, but a long streak
  // means the weights or the data are broken, not the scale.
  HG_CHECK(scaler_->is_enabled(), "halfgrad-unet3d train: the loss is " << l << " at epoch " << e.number << ", step "
                                      << s + 1 << " (lr " << lr_used << "); stopping "
                                      << (use_graph_ ? "(--cuda-graph reads the loss a step late: its update has run): "
                                                     : "before the update: ")
                                      << (saved_epoch_ > 0 ? a_.out + "/model.safetensors keeps the weights of epoch " +
                                                                 std::to_string(saved_epoch_)
                                                           : "this run wrote no checkpoint into " + a_.out)
                                      << "; lower --lr");
  HG_CHECK(++nonfinite_streak_ <= kMaxNonFiniteStreak,
           "halfgrad-unet3d train: the loss has been non-finite for " << nonfinite_streak_ << " steps in a row (epoch "
               << e.number << ", loss scale " << scaler_->get_scale() << "); stopping: lower --lr, or check the data");
}

void Trainer::count_loss(Epoch& e, double l, int64_t s) {
  if (std::isfinite(l)) {
    e.loss_sum += l;
    ++e.counted;
  } else {
    ++e.nonfinite;
  }
  e.bar.update(s + 1, "loss " + fmt(l));
}

// An eager step: step() with the host's work around it.
void Trainer::eager_step(Epoch& e, int64_t s, double lr) {
  Tensor x, y;
  agreement_.guard([&] {
    loader_->next(x, y);  // the batch of global_step (this rank's slice of it)
    x = where_.input(x);
    y = where_.labels(y);
    gpu_gaps_->step_start();
  });
  ++global_step_;
  double l = 0, scale_used = 0;
  StepHooks hooks;
  hooks.after_forward = [&](const Tensor& loss) {
    double local_loss = 0;
    agreement_.guard([&] { local_loss = loss.item(); });
    // The global batch's loss (the mean of the ranks' equal slices' means), the same on every rank,
    // so that every rank takes the same decisions below; with one GPU, this rank's loss as it is.
    l = ctx_.distributed() ? agreement_.agree({local_loss}, "epoch " + std::to_string(e.number) + ", step " +
                                                                std::to_string(s + 1))[0] / ctx_.world_size
                           : local_loss;
    check_loss(e, l, s, lr);
  };
  hooks.after_backward = [&] {
    if (grad_stats_ && global_step_ % a_.grad_stats_every == 0)  // the grads still hold S * g
      grad_stats_->write(global_step_, amp::collect_grad_stats(model_->named_parameters(), scaler_->get_scale()));
    scale_used = scaler_->get_scale();
  };
  const bool stepped = step(x, y, hooks).stepped;
  gpu_gaps_->step_end();
  precision_.record_step(global_step_, scale_used, !stepped, scaler_->get_scale());
  if (!stepped) ++e.skipped;
  count_loss(e, l, s);
}

// A --cuda-graph step: replayed (or, the first few, run eagerly and captured) by graph_step_; the
// previous step's loss is read once this one is queued.
void Trainer::replayed_step(Epoch& e, int64_t s, double lr) {
  agreement_.guard([&] {
    Tensor x, y;
    loader_->next(x, y);
    x = where_.input(x);
    y = where_.labels(y);
    gpu_gaps_->step_start();
    ++global_step_;
    lagged_->push(graph_step_->step(x, y));
    gpu_gaps_->step_end();
    if (lagged_->pending() == 2) {  // the previous step's loss: that step has run by now
      const double l = lagged_->pop();
      check_loss(e, l, s - 1, e.lagged_lr);
      count_loss(e, l, s - 1);
    }
    e.lagged_lr = lr;
  });
}

// --cuda-graph: the epoch's last loss, the label check and the skipped steps, read once here.
void Trainer::finish_graph_epoch(Epoch& e) {
  agreement_.guard([&] {
    while (lagged_->pending() > 0) {
      const double l = lagged_->pop();
      check_loss(e, l, steps_per_epoch_ - 1, e.lagged_lr);
      count_loss(e, l, steps_per_epoch_ - 1);
    }
    label_check_->check("halfgrad-unet3d train: epoch " + std::to_string(e.number));
    e.skipped = scaler_->skipped_steps() - e.skipped_before;
    // BatchNorm counts a step in its forward, on the host. The replays ran no host code; a capture ran
    // the forward's host code once (one count) for the step its first replay then runs (counted among
    // the replays); and the eager steps of this path are not rolled back when skipped (restore_if
    // restores the device buffers only). So the counters lack the epoch's replays less its captures
    // and its skipped steps; with them, a checkpoint counts the kept steps, as a --no-cuda-graph run's
    // does (CTest halfgrad_unet3d_graph_counters).
    const int64_t missing =
        (graph_step_->replays() - e.replays_before) - (graph_step_->captures() - e.captures_before) - e.skipped;
    for (Tensor& c : bn_counters_) {
      c.data<int64_t>()[0] += missing;
      c.bump_version();
    }
  });
}

EpochMetrics Trainer::run_epoch(int64_t epoch) {
  Epoch e(epoch, steps_per_epoch_, a_.progress && ctx_.is_root());
  if (graph_step_) {
    e.skipped_before = scaler_->skipped_steps();
    e.replays_before = graph_step_->replays();
    e.captures_before = graph_step_->captures();
  }
  for (int64_t s = 0; s < steps_per_epoch_; ++s) {
    const double lr = lr_at(r_, (epoch - 1) + static_cast<double>(s) / steps_per_epoch_);
    for (auto& g : opt_->param_groups()) g.options().set_lr(lr);
    if (graph_step_) replayed_step(e, s, lr);
    else eager_step(e, s, lr);
  }
  if (graph_step_) finish_graph_epoch(e);
  e.bar.finish();
  gpu_gaps_->skip_gap();  // validation and the checkpoint are not the loader's gap

  EpochMetrics row;
  row.epoch = epoch;
  row.train_loss = e.counted ? e.loss_sum / e.counted : NAN;
  row.skipped_steps = e.skipped;
  row.nonfinite_steps = e.nonfinite;
  row.loss_scale = scaler_->get_scale();
  row.lr = opt_->param_groups()[0].options().get_lr();
  row.epoch_seconds = seconds_since(e.start);  // end_epoch adds validation's time
  return row;
}

int Trainer::run() {
  t0_ = Clock::now();
  for (int64_t epoch = start_epoch_; epoch <= r_.epochs; ++epoch) {
    if (!end_epoch(run_epoch(epoch))) break;
  }
  report();
  return 0;
}

bool Trainer::end_epoch(EpochMetrics row) {
  const int64_t epoch = row.epoch;
  const auto tv = Clock::now();
  const bool do_val = epoch % r_.val_every == 0 || epoch == r_.epochs;
  std::vector<double> dice;
  if (do_val && ctx_.is_root()) {  // rank 0's model is the checkpoint's; the others wait at the agreement
    NvtxRange nvtx_range("validation");
    agreement_.guard([&] {
      try {
        dice = validate(*model_, data_.val, data_.num_classes, mp_, where_);
      } catch (const Error& e) {  // weights blown up by the steps: say which knob (the lr) and that nothing was saved
        std::ostringstream os;
        os << e.what() << "; after epoch " << epoch << " (lr " << row.lr << ", train loss " << row.train_loss
           << "): the training may have diverged (lower --lr); this epoch was not saved";
        throw Error(os.str());
      }
    });
  }
  double mean = 0;
  for (double d : dice) mean += d;
  if (!dice.empty()) mean /= dice.size();
  row.epoch_seconds += seconds_since(tv);
  row.elapsed_seconds = elapsed_before_ + seconds_since(t0_);

  std::ostringstream line;
  line << "epoch " << epoch << "/" << r_.epochs << "  loss " << fmt(row.train_loss) << "  skipped " << row.skipped_steps
       << (row.nonfinite_steps ? "  non-finite losses " + std::to_string(row.nonfinite_steps) : std::string())
       << "  scale " << row.loss_scale << "  lr " << fmt(row.lr, 5);
  if (do_val) {
    line << "  val dice";
    for (size_t c = 0; c < dice.size(); ++c) line << " " << data_.class_names[c + 1] << " " << fmt(dice[c]);
    line << "  mean " << fmt(mean);
  }
  line << "  " << fmt(row.epoch_seconds, 1) << " s";
  std::cout << line.str() << std::endl;

  if (do_val) {
    row.dice = dice;
    row.mean_dice = mean;
    last_ = mean;
    last_epoch_ = epoch;
    if (mean > best_) {
      best_ = mean;
      best_epoch_ = epoch;
    }
  }
  metrics_->add(row);
  // By rank 0's clock, so that every rank stops after the same epoch.
  const bool out_of_time =
      agreement_.agree({ctx_.is_root() && a_.max_minutes > 0 && seconds_since(t0_) > a_.max_minutes * 60 ? 1.0 : 0.0},
                       "the end of epoch " + std::to_string(epoch))[0] > 0;
  const bool stopping = epoch < r_.epochs && (out_of_time || epoch == a_.stop_after_epoch);
  if ((epoch % a_.save_every == 0 || epoch == r_.epochs || stopping) && ctx_.is_root())
    agreement_.guard([&] { save_checkpoint(epoch, mean); });
  agreement_.agree({}, "the checkpoint of epoch " + std::to_string(epoch));
  if (!stopping) return true;
  if (out_of_time) std::cout << "stopping: --max-minutes " << a_.max_minutes << " reached after epoch " << epoch;
  else std::cout << "stopping: --stop-after-epoch " << epoch;
  std::cout << "; continue with: halfgrad-unet3d train --resume " << a_.out << std::endl;
  return false;
}

void Trainer::save_checkpoint(int64_t epoch, double mean_dice) {
  // model.safetensors' metadata: what eval needs, and nothing that differs between two equal runs
  // (no times), so that same options and seed give the same bytes.
  nlohmann::json model_meta = {{"recipe", r_.name},          {"model", r_.model.to_json()}, {"epoch", epoch},
                               {"volume_shape", r_.volume_shape}, {"class_names", data_.class_names},
                               {"val_mean_dice", mean_dice}};
  // The grid it trained on, which predict resamples every input to (absent: each volume's own).
  if (data_.spacing_mm) model_meta["spacing_mm"] = *data_.spacing_mm;
  model_meta.update(plan_.to_json());  // amp, opt_level, amp_dtype, fp32_ops, fp32_modules
  // training_state's: what --resume needs (resume.h), and no times, so that two runs with the same
  // options and seed write the same bytes (the times are in metrics.csv, which --resume reads).
  const nlohmann::json train_meta = {{"args", train_args_to_json(a_)},   {"epochs", r_.epochs},
                                     {"epoch", epoch},                    {"step", global_step_},
                                     {"metrics", metrics_->to_json()},    {"best_dice", best_},
                                     {"best_epoch", best_epoch_},         {"last_dice", last_},
                                     {"last_epoch", last_epoch_},         {"nonfinite_streak", nonfinite_streak_},
                                     {"data_fingerprint", fingerprint_->to_json()}};
  // The plan the run follows, beside its checkpoints (--resume reads it back: take_plan): written
  // before the first, so a run that fails before any checkpoint leaves no run file behind.
  if (training_plan_ && !resuming_ && saved_epoch_ == 0)
    write_file_atomic(a_.out + "/" + kPlanFile, plan_text(*training_plan_));
  const RunCheckpointWrite w = save_run_checkpoint(a_.out, *model_, *opt_, *scaler_, model_meta, train_meta);
  write_file_atomic(csv_path_, metrics_->csv());
  saved_epoch_ = epoch;
  std::cout << "checkpoint: " << w.describe() << std::endl;
}

void Trainer::report() {
  std::cout << loader_->stats().summary(loader_options_.workers, loader_options_.prefetch) << std::endl;
  if (graph_step_)
    std::cout << "cuda graph: " << graph_step_->captures() << " capture(s), " << graph_step_->replays()
              << " replays of " << graph_step_->nodes() << " nodes each; the graph's memory pool holds "
              << human_bytes(graph_step_->pool_bytes()) << " beside the peak below" << std::endl;
  if (where_.device == Device::CUDA) {
    const double gap_s = gpu_gaps_->finish();
    std::cout << "gpu: idle " << fmt(gap_s, 3) << " s in total between steps (" << gpu_gaps_->gaps() << " gaps, "
              << fmt(gpu_gaps_->gaps() ? 1000.0 * gap_s / gpu_gaps_->gaps() : 0.0, 3)
              << " ms per step; CUDA events from the end of a step's last op to the next step's batch on the device, "
                 "epoch boundaries left out)"
              << std::endl;
  }
  if (grad_stats_) std::cout << "gradient statistics: " << grad_stats_->path() << std::endl;
  if (saved_epoch_ > 0 && ctx_.is_root()) {
    const CurvesFiles curves = write_training_curves(a_.out, data_.class_names);
    for (const std::string& f : curves.files) std::cout << "curves: " << f << std::endl;
    if (!curves.note.empty()) std::cout << "curves: " << curves.note << std::endl;
  }
  const uint64_t peak = (where_.device == Device::CUDA ? cuda::allocator_stats().peak_allocated_bytes
                                                       : cpu_allocator_stats().peak_allocated_bytes) -
                        memory_baseline_;
  std::cout << "memory: peak " << human_bytes(peak) << " of tensors (estimated " << human_bytes(need_.total()) << ")"
            << std::endl;
  if (a_.precision_report && ctx_.is_root()) {
    const amp::PrecisionReportFiles files = precision_.write(a_.out);
    std::cout << precision_.summary_text();
    for (const std::string& f : files.files) std::cout << "precision report: " << f << std::endl;
    if (!files.note.empty()) std::cout << "precision report: " << files.note << std::endl;
  }
  std::cout << "done in " << fmt(seconds_since(t0_), 1) << " s; validation mean Dice " << fmt(last_) << " at epoch "
            << last_epoch_ << " (the checkpoint's; best " << fmt(best_) << " at epoch " << best_epoch_
            << "); checkpoint " << a_.out << "/model.safetensors, metrics " << a_.out << "/metrics.csv" << std::endl;
}

}  // namespace unet3d_app
