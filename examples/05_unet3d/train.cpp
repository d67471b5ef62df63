// train.cpp - the training loop of halfgrad-unet3d, written the way a libtorch user would write it:
//   forward under autocast -> loss -> scaler.scale(loss).backward() -> scaler.step(opt) -> update().
// The precision is chosen by --opt-level (amp/opt_level.h): O0 FP32, O1 autocast (--amp), O2 FP16
// weights with FP32 norms and master weights, O3 pure FP16; --fp32-op / --fp32-module move op kinds
// or modules to FP32 under autocast.
// On several GPUs (distributed.h) the model runs inside dist::DistributedDataParallel, each rank on its
// slice of the global batch, and only rank 0 writes the run folder; with one GPU none of that exists.
// With --device cuda on one GPU the step is captured in a CUDA graph and replayed (--cuda-graph, on by
// default; graph_step.h): the optimizer and the scaler are then capturable, the loss is read one step
// late, and the label check and the skipped-step count are read once an epoch.
#include "examples/05_unet3d/train.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "autocast/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/grad_stats.h"
#include "amp/opt_level.h"
#include "amp/precision_report.h"
#include "autograd/anomaly.h"
#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/json_checked.h"
#include "core/nonfinite.h"
#include "core/nvtx.h"
#include "dist/distributed_data_parallel.h"
#include "dist/scaler_agreement.h"
#include "examples/05_unet3d/curves.h"
#include "examples/05_unet3d/data.h"
#include "examples/05_unet3d/data_fingerprint.h"
#include "examples/05_unet3d/distributed.h"
#include "examples/05_unet3d/graph_step.h"
#include "examples/05_unet3d/loader.h"
#include "examples/05_unet3d/memory_estimate.h"
#include "examples/05_unet3d/metrics.h"
#include "examples/05_unet3d/overlay.h"
#include "examples/05_unet3d/progress.h"
#include "examples/05_unet3d/resume.h"
#include "examples/05_unet3d/run_checkpoint.h"
#include "examples/05_unet3d/run_folder.h"
#include "examples/05_unet3d/trained_model.h"
#include "nn/batch_norm.h"
#include "nn/buffer_snapshot.h"
#include "nn/checkpoint.h"
#include "nn/unet3d.h"
#include "autograd/node.h"
#include "ops/common.h"
#include "ops/loss/deferred_label_check.h"
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
// `on_volume(v, pred)`, when given, sees each volume's prediction (D, H, W) int64 (eval --overlay).
static std::vector<double> validate(nn::UNet3d& model, const std::vector<SegVolume>& vols, int64_t num_classes,
                                    const amp::OptLevelSetup& mp, const Placement& where,
                                    const std::function<void(const SegVolume&, const Tensor&)>& on_volume = {}) {
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

amp::PrecisionPlan precision_plan(const TrainArgs& a) {
  return amp::PrecisionPlan::from_words(a.opt_level, a.amp, a.amp_dtype, a.fp32_ops, a.fp32_modules,
                                        "halfgrad-unet3d train");
}

// --workers: on CUDA two threads keep the GPU fed; on the CPU a worker competes with the compute threads
// for the same cores (bench/NOTES.md, "Issue 9: loader"), so batches are built in the training thread.
static int default_workers(Device device) { return device == Device::CUDA ? 2 : 0; }

static std::string fmt(double v, int prec = 4) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(prec);
  os << v;
  return os.str();
}

// Ranks other than 0 print nothing to stdout (their errors go to stderr, from main): std::cout is
// pointed at nothing for the run, and restored after it.
struct MuteStdout {
  explicit MuteStdout(bool mute) : saved(mute ? std::cout.rdbuf(nullptr) : nullptr), muted(mute) {}
  ~MuteStdout() {
    if (muted) {
      std::cout.rdbuf(saved);
      std::cout.clear();
    }
  }
  std::streambuf* saved;
  bool muted;
};

// --data as an absolute path, so that a run resumed from another working directory reads the same
// folder (and the saved options name it unambiguously).
static TrainArgs with_absolute_data(TrainArgs a) {
  if (!a.data.empty()) a.data = std::filesystem::absolute(a.data).lexically_normal().string();
  return a;
}

// --grad-stats FILE follows the run folder's rule: an existing file is refused unless --overwrite,
// and it may not be one of the run's own files.
static void check_grad_stats_path(const TrainArgs& a) {
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
static void check_resumed_data(const nlohmann::json& saved_meta, const DataFingerprint& now, const TrainArgs& a) {
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

int run_train(const TrainArgs& cli_args, const RankContext& ctx) {
  const MuteStdout mute(!ctx.is_root());
  StepAgreement agreement(ctx);
  // --resume: the run's own options, from its training state (resume.h).
  const nlohmann::json saved_meta = cli_args.resume.empty() ? nlohmann::json() : read_run_training_meta(cli_args.resume);
  const TrainArgs a = with_absolute_data(cli_args.resume.empty() ? cli_args : resumed_args(cli_args, saved_meta));
  const bool resuming = !a.resume.empty();
  Recipe r = recipe_by_name(a.config);
  if (a.data.empty()) r.epochs = r.default_data_epochs;
  if (a.epochs > 0) r.epochs = a.epochs;
  if (a.batch > 0) r.batch = a.batch;
  if (a.lr > 0) r.lr = a.lr;
  if (a.val_every > 0) r.val_every = a.val_every;
  HG_CHECK(!a.out.empty(), "halfgrad-unet3d train: --out RUN_DIR is required");
  // Refuse at once, before the data loads; rank 0 owns the folder, and tells the others. The lock is
  // rank 0's for the life of the run (a folder made later, once the data has loaded, is locked then).
  std::optional<RunFolderLock> lock;
  if (ctx.is_root()) agreement.guard([&] {
    if (!resuming) check_run_folder(a.out, a.overwrite);
    if (std::filesystem::is_directory(a.out)) lock.emplace(a.out);
    check_grad_stats_path(a);
  });
  agreement.agree({}, "the run folder check");
  // This rank's samples of each global batch of r.batch (all of them with one GPU).
  const BatchSlice slice = rank_batch_slice(r.batch, ctx.world_size, ctx.rank);
  const bool progress = a.progress && ctx.is_root();
  const amp::PrecisionPlan plan = precision_plan(a);  // a bad combination fails before the data loads
  const amp::OptLevel level = plan.level;
  const Placement where = make_placement(a.device, a.memory_format, "train");

  manual_seed(a.seed);  // the model's initial weights; batches come from batch_seed(seed, step)
  const auto t_load = Clock::now();
  SegData data = a.data.empty() ? load_default_data(r) : load_msd_data(a.data, r, false);
  r.model.num_classes(data.num_classes);
  std::cout << "data: " << data.source << ": " << data.train.size() << " training, " << data.val.size()
            << " validation volumes, " << data.num_classes << " classes (loaded in " << fmt(seconds_since(t_load), 1)
            << " s)" << std::endl;

  r.volume_shape = data.volume_shape;
  // What the data is, by content: saved with every checkpoint, compared on --resume (rank 0's job,
  // before the run folder is touched).
  std::optional<DataFingerprint> fingerprint;
  if (ctx.is_root()) agreement.guard([&] {
    fingerprint = fingerprint_data(data.root, data.files);
    if (resuming) check_resumed_data(saved_meta, *fingerprint, a);
  });

  // Memory, from the shapes, before the optimizer state, the batches and the activations exist. The
  // peak the run reports at the end counts from here (the data already loaded is not part of it).
  const uint64_t baseline = where.device == Device::CUDA ? cuda::allocator_stats().allocated_bytes
                                                         : cpu_allocator_stats().allocated_bytes;
  if (where.device == Device::CUDA) cuda::reset_peak_stats();
  else cpu_reset_peak_stats();
  auto model = std::make_shared<nn::UNet3d>(r.model);
  const std::array<int64_t, 3> step_shape = r.patch[0] > 0 ? r.patch : r.volume_shape;
  const MemoryEstimate need = estimate_train_memory(r.model, model->num_parameters(), step_shape, slice.size(),
                                                    r.volume_shape, level, where.device == Device::CUDA);
  if (a.memory_check) {
    const MemoryAvailable avail = available_memory(a.device);
    check_memory(need, avail, "train", a.device,
                 "lower --batch (now " + std::to_string(r.batch) +
                     (ctx.distributed() ? ", " + std::to_string(slice.size()) + " per GPU" : std::string()) + ")");
    std::cout << "memory: estimated " << need.describe() << "; " << human_bytes(avail.bytes) << " available"
              << std::endl;
  }

  // The run folder is touched only once the data has loaded and the memory is known to suffice, and
  // an earlier run in it is removed only after the model, optimizer and instruments are set up (below),
  // so a run that fails on bad input leaves the folder's files as they were.
  // Only rank 0 writes into it, so only rank 0 makes and checks it: another rank (another host, or
  // one that got here first) may not see it yet, and nothing orders the two.
  if (ctx.is_root()) {
    std::error_code ec;
    std::filesystem::create_directories(a.out, ec);
    HG_CHECK(!ec && std::filesystem::is_directory(a.out),
             "halfgrad-unet3d train: --out " << a.out << ": cannot create the run folder (" << ec.message()
                                             << "); expected a writable directory path");
    if (!lock) lock.emplace(a.out);
  }

  optim::AdamWOptions adamw = optim::AdamWOptions().lr(r.lr).weight_decay(r.weight_decay);
  amp::GradScalerOptions scaler_options;
  const amp::OptLevelSetup mp = plan.apply(*model, adamw, scaler_options);
  if (plan.lower == kBFloat16)
    std::cout << "amp: autocast lowers to bfloat16; GradScaler disabled (BF16 has FP32's exponent range, so its "
                 "gradients need no loss scaling)" << std::endl;
  model->to(where.device);  // before the optimizer: its state is made on the parameters' device
  if (where.device == Device::CUDA)
    std::cout << "device: " << cuda::device_description() << ", activations "
              << (where.format == MemoryFormat::ChannelsLast3d ? "NDHWC (channels-last)" : "NCDHW") << std::endl;
  std::cout << "model: UNet3d " << r.model.describe() << ", " << model->num_parameters() << " parameters; recipe '"
            << r.name << "', "
            << plan.describe()
            << ", batch " << r.batch
            << (ctx.distributed() ? " (" + std::to_string(slice.size()) + " on each of " + std::to_string(ctx.world_size) +
                                        " GPUs, DistributedDataParallel over NCCL)"
                                  : std::string())
            << ", AdamW lr " << r.lr
            << (level == amp::OptLevel::O3 ? ", eps " + std::to_string(adamw.eps()) : std::string()) << ", "
            << r.epochs << " epochs, " << ops::num_threads() << " CPU threads" << std::endl;
  for (const std::string& name : a.fp32_ops) std::cout << "autocast: op " << name << " runs in FP32" << std::endl;
  for (const std::string& prefix : a.fp32_modules)
    std::cout << "autocast: modules '" << prefix << "*' run in FP32" << std::endl;

  // --cuda-graph: on with --device cuda unless something in the step needs the host (graph_step.h).
  std::string graph_off;
  if (where.device == Device::CUDA && a.cuda_graph) {
    if (ctx.distributed()) graph_off = "several GPUs (the all-reduces and the ranks' agreement sit between the step's parts)";
    else if (a.detect_anomaly) graph_off = "--detect-anomaly checks every op's output on the host";
    else if (a.precision_report) graph_off = "--precision-report records every op and every step's outcome on the host";
    else if (!a.grad_stats.empty()) graph_off = "--grad-stats reads the gradients on the host";
  }
  const bool use_graph = where.device == Device::CUDA && a.cuda_graph && graph_off.empty();
  if (!graph_off.empty()) std::cout << "cuda graph: off: " << graph_off << "; eager steps" << std::endl;
  adamw.capturable(use_graph);  // lr and step counts on the device
  scaler_options.capturable(use_graph);
  optim::AdamW opt(model->parameters(), adamw);
  amp::GradScaler scaler(scaler_options);

  const int64_t per_epoch = r.samples_per_epoch > 0 ? r.samples_per_epoch : static_cast<int64_t>(data.train.size());
  const int64_t steps_per_epoch = std::max<int64_t>(1, per_epoch / r.batch);

  // Instruments (--grad-stats, --precision-report, --detect-anomaly); each does nothing unless asked.
  std::optional<amp::GradStatsCsvWriter> grad_stats;
  HG_CHECK(a.grad_stats_every >= 1, "halfgrad-unet3d train: --grad-stats-every must be >= 1, got " << a.grad_stats_every);
  if (!a.grad_stats.empty() && ctx.is_root()) grad_stats.emplace(a.grad_stats);  // the grads agree after DDP
  // Last of the steps that can fail on the user's options: only now is an earlier run removed
  // (--overwrite) and are stale temp files cleaned.
  if (ctx.is_root())
    for (const std::string& note : resuming ? remove_stale_temps(a.out) : prepare_run_folder(a.out, a.overwrite))
      std::cout << "note: " << note << std::endl;
  // metrics.csv is rewritten (atomically) right after each checkpoint, with the rows up to the
  // checkpoint's epoch, which training_state.safetensors holds too. A process killed between the
  // renames leaves metrics.csv one save behind; --resume rewrites it from the training state's rows.
  const std::string csv_path = a.out + "/metrics.csv";
  MetricsTable metrics(data.class_names);
  int64_t saved_epoch = 0;  // the epoch whose weights model.safetensors holds (0: none written yet)
  amp::PrecisionRecorder precision;
  int64_t global_step = 0;

  StepGapTimer gpu_gaps(where.device == Device::CUDA);
  // A step GradScaler skips changes nothing but the loss scale: the BatchNorm running statistics it
  // folded in (inf/NaN when the forward overflowed, pytorch#115500) are put back (nn/buffer_snapshot.h).
  std::optional<nn::BufferSnapshot> buffers_before;
  if (scaler.is_enabled() && !model->buffers().empty()) buffers_before.emplace(*model);

  constexpr int64_t kMaxNonFiniteStreak = 50;  // GradScaler halves the scale each time: 2^16 -> 2^-34
  int64_t nonfinite_streak = 0;
  double best = -1, last = -1;
  int64_t best_epoch = 0, last_epoch = 0;
  int64_t start_epoch = 1;
  double elapsed_before = 0;  // training time of the earlier processes of a resumed run
  if (resuming) {
    // Model, optimizer and scaler as they were after the saved epoch; the batches continue from the
    // saved step (a batch is a function of the seed and the step: make_training_batch).
    const nlohmann::json saved = load_run_checkpoint(a.out, *model, opt, scaler);
    const json_checked::Field m(saved, a.out + "/" + kTrainingStateFile);
    saved_epoch = m["epoch"].as_int(1, r.epochs - 1);
    start_epoch = saved_epoch + 1;
    global_step = m["step"].as_int(0, INT64_MAX);
    HG_CHECK(global_step == saved_epoch * steps_per_epoch,
             "halfgrad-unet3d train --resume " << a.out << ": the training state is at step " << global_step
                 << " after epoch " << saved_epoch << ", but this data gives " << steps_per_epoch
                 << " steps per epoch; was --data changed?");
    if (m.has("metrics_rows")) {  // saved before 2026-12-04: the rows with their times, and the total time
      metrics.restore_rows(m["metrics_rows"].as_string_list());
      elapsed_before = m["elapsed_seconds"].as_number();
    } else {  // the rows without times; the times from metrics.csv where its rows agree
      elapsed_before = metrics.restore_untimed_rows(m["metrics"]["rows"].as_string_list(), read_metrics_csv(csv_path));
    }
    best = m["best_dice"].as_number();
    best_epoch = m["best_epoch"].as_int();
    last = m["last_dice"].as_number();
    last_epoch = m["last_epoch"].as_int();
    nonfinite_streak = m["nonfinite_streak"].as_int();
    std::cout << "resume: " << a.out << " after epoch " << saved_epoch << " of " << r.epochs << " (step "
              << global_step << ", loss scale " << scaler.get_scale() << ")" << std::endl;
  }
  // Several GPUs: the replicas start from rank 0's weights (the broadcast of DDP's constructor, after a
  // --resume too), gradients are averaged in backward, the scaler's inf/NaN flag is MAX-reduced.
  // Buffers are not broadcast before each forward: training-mode BatchNorm uses the batch's statistics,
  // and rank 0's running statistics (the checkpoint's) are its own either way; so no collective
  // precedes the step agreement below.
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (ctx.distributed()) {
    ddp = std::make_unique<dist::DistributedDataParallel>(model, ctx.comm,
                                                          dist::DdpOptions().broadcast_buffers(false));
    dist::set_communicator(scaler, ctx.comm);
  }
  // Batches: built ahead by worker threads (loader.h), in step order from global_step on
  // (after a --resume, the saved step: the loader starts only once it is known).
  LoaderOptions loader_options;
  loader_options.workers = a.workers >= 0 ? static_cast<int>(a.workers) : default_workers(where.device);
  loader_options.prefetch = static_cast<int>(a.prefetch);
  loader_options.device = where.device;
  BatchLoader loader([&](int64_t step, Tensor& x, Tensor& y) {
                       make_training_batch_slice(data, r, a.seed, step, slice.begin, slice.end, x, y);
                     },
                     global_step, r.epochs * steps_per_epoch, loader_options);
  // --cuda-graph: the same step as the eager one below (zero_grad ... update), on the graph's static
  // buffers, with the buffer restore and the label check decided on the device.
  constexpr int64_t kGraphWarmupSteps = 3;
  std::unique_ptr<GraphStep> graph_step;
  std::vector<Tensor> bn_counters;  // --cuda-graph: every BatchNorm's num_batches_tracked (a host Int64)
  std::optional<LaggedLoss> lagged;
  std::optional<ops::DeferredLabelCheck> label_check;
  if (use_graph) {
    label_check.emplace();
    lagged.emplace();
    for (const auto& m : model->modules())
      if (const auto* bn = dynamic_cast<const nn::BatchNorm3d*>(m.get()); bn != nullptr && bn->num_batches_tracked.defined())
        bn_counters.push_back(bn->num_batches_tracked);
    graph_step = std::make_unique<GraphStep>(
        [&](const Tensor& xs, const Tensor& ys) {
          opt.zero_grad();
          if (buffers_before) buffers_before->capture();
          Tensor loss;
          {
            NvtxRange nvtx_range("forward");
            amp::AutocastGuard autocast(mp.autocast_options());
            loss = ops::segmentation_loss((*model)(mp.cast_input(xs)).to(kFloat32), ys);
          }
          {
            NvtxRange nvtx_range("backward");
            scaler.scale(loss).backward();
          }
          {
            NvtxRange nvtx_range("optimizer step");
            scaler.step(opt);  // capturable: skipped on the device when found_inf is set
          }
          if (buffers_before) buffers_before->restore_if(scaler.device_found_inf(opt));
          scaler.update();
          return loss;
        },
        [&] { opt.stage_lr(); }, kGraphWarmupSteps);
    std::cout << "cuda graph: the training step is captured after " << kGraphWarmupSteps
              << " eager steps and replayed (--no-cuda-graph for eager steps)" << std::endl;
  }
  const auto t0 = Clock::now();
  for (int64_t epoch = start_epoch; epoch <= r.epochs; ++epoch) {
    const auto te = Clock::now();
    double loss_sum = 0;
    int64_t skipped = 0, counted = 0, nonfinite = 0;
    const int64_t skipped_before = use_graph ? scaler.skipped_steps() : 0;  // graph: the device counts them
    const int64_t replays_before = graph_step ? graph_step->replays() : 0;
    const int64_t captures_before = graph_step ? graph_step->captures() : 0;
    ProgressBar bar("  epoch " + std::to_string(epoch), steps_per_epoch, progress);
    // The host's bookkeeping of step `s`'s loss `l` (lr `lr_used`): eager, before the step's backward;
    // with --cuda-graph one step late, after the step (and the next one's queueing).
    const auto check_loss = [&](double l, int64_t s, double lr_used) {
      if (!std::isfinite(l)) {
        // Without a loss scaler nothing would skip this step: the weights would turn NaN and every
        // later checkpoint with them. With one, a non-finite loss is skipped like an overflow, but a
        // long streak means the weights or the data are broken, not the scale.
        HG_CHECK(scaler.is_enabled(), "halfgrad-unet3d train: the loss is " << l << " at epoch " << epoch << ", step "
                                          << s + 1 << " (lr " << lr_used << "); stopping "
                                          << (use_graph ? "(--cuda-graph reads the loss a step late: its update has run): "
                                                        : "before the update: ")
                                          << (saved_epoch > 0 ? a.out + "/model.safetensors keeps the weights of epoch " +
                                                                    std::to_string(saved_epoch)
                                                              : "this run wrote no checkpoint into " + a.out)
                                          << "; lower --lr");
        HG_CHECK(++nonfinite_streak <= kMaxNonFiniteStreak,
                 "halfgrad-unet3d train: the loss has been non-finite for " << nonfinite_streak
                     << " steps in a row (epoch " << epoch << ", loss scale " << scaler.get_scale()
                     << "); stopping: lower --lr, or check the data");
      } else {
        nonfinite_streak = 0;
      }
    };
    const auto count_loss = [&](double l, int64_t s) {
      if (std::isfinite(l)) { loss_sum += l; ++counted; }
      else ++nonfinite;
      bar.update(s + 1, "loss " + fmt(l));
    };
    double lagged_lr = 0;  // --cuda-graph: the lr of the step whose loss is pending
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      const double lr = lr_at(r, (epoch - 1) + static_cast<double>(step) / steps_per_epoch);
      for (auto& g : opt.param_groups()) g.options().set_lr(lr);
      if (graph_step) {
        agreement.guard([&] {
          Tensor x, y;
          loader.next(x, y);
          x = where.input(x);
          y = where.labels(y);
          gpu_gaps.step_start();
          ++global_step;
          lagged->push(graph_step->step(x, y));
          gpu_gaps.step_end();
          if (lagged->pending() == 2) {  // the previous step's loss: that step has run by now
            const double l = lagged->pop();
            check_loss(l, step - 1, lagged_lr);
            count_loss(l, step - 1);
          }
          lagged_lr = lr;
        });
        continue;
      }
      // Several GPUs: an error in the guarded parts is every rank's, at the agreement below.
      Tensor x, y, loss;
      agreement.guard([&] {
        loader.next(x, y);  // the batch of global_step (this rank's slice of it)
        x = where.input(x);
        y = where.labels(y);
        gpu_gaps.step_start();
        if (buffers_before) buffers_before->capture();
      });
      ++global_step;
      amp::PrecisionRecorder::Observe observe(a.precision_report ? &precision : nullptr);
      autograd::DetectAnomalyGuard anomaly(a.detect_anomaly);
      double local_loss = 0;
      agreement.guard([&] {
        opt.zero_grad();
        {
          NvtxRange nvtx_range("forward");
          amp::AutocastGuard autocast(mp.autocast_options());
          // The loss in FP32 at every level (O2/O3 logits are FP16; under O1 the loss is on autocast's
          // FP32 list anyway).
          const Tensor input = mp.cast_input(x);
          loss = ops::segmentation_loss((ddp ? ddp->forward(input) : (*model)(input)).to(kFloat32), y);
        }
        local_loss = loss.item();
      });
      // The global batch's loss (the mean of the ranks' equal slices' means), the same on every rank,
      // so that every rank takes the same decisions below; with one GPU, this rank's loss as it is.
      const double l = ctx.distributed()
                           ? agreement.agree({local_loss}, "epoch " + std::to_string(epoch) + ", step " +
                                                               std::to_string(step + 1))[0] / ctx.world_size
                           : local_loss;
      check_loss(l, step, lr);
      {
        NvtxRange nvtx_range("backward");
        scaler.scale(loss).backward();
      }
      if (grad_stats && global_step % a.grad_stats_every == 0)  // before step(): the grads still hold S * g
        grad_stats->write(global_step, amp::collect_grad_stats(model->named_parameters(), scaler.get_scale()));
      const double scale_used = scaler.get_scale();
      bool stepped;
      {
        NvtxRange nvtx_range("optimizer step");
        stepped = scaler.step(opt);
      }
      if (!stepped && buffers_before) buffers_before->restore();
      scaler.update();
      gpu_gaps.step_end();
      precision.record_step(global_step, scale_used, !stepped, scaler.get_scale());
      if (!stepped) ++skipped;
      count_loss(l, step);
    }
    if (graph_step) {  // the epoch's last loss, the label check and the skipped steps: read once here
      agreement.guard([&] {
        while (lagged->pending() > 0) {
          const double l = lagged->pop();
          check_loss(l, steps_per_epoch - 1, lagged_lr);
          count_loss(l, steps_per_epoch - 1);
        }
        label_check->check("halfgrad-unet3d train: epoch " + std::to_string(epoch));
        skipped = scaler.skipped_steps() - skipped_before;
        // BatchNorm counts a step in its forward, on the host. The replays ran no host code; a capture
        // ran the forward's host code once (one count) for the step its first replay then runs (counted
        // among the replays); and the eager steps of this path are not rolled back when skipped
        // (restore_if restores the device buffers only). So the counters lack the epoch's replays less
        // its captures and its skipped steps; with them, a checkpoint counts the kept steps, as a
        // --no-cuda-graph run's does (CTest halfgrad_unet3d_graph_counters).
        const int64_t missing =
            (graph_step->replays() - replays_before) - (graph_step->captures() - captures_before) - skipped;
        for (Tensor& c : bn_counters) {
          c.data<int64_t>()[0] += missing;
          c.bump_version();
        }
      });
    }
    bar.finish();
    gpu_gaps.skip_gap();  // validation and the checkpoint are not the loader's gap
    const double train_loss = counted ? loss_sum / counted : NAN;
    const bool do_val = epoch % r.val_every == 0 || epoch == r.epochs;
    std::vector<double> dice;
    if (do_val && ctx.is_root()) {  // rank 0's model is the checkpoint's; the others wait at the agreement
      NvtxRange nvtx_range("validation");
      agreement.guard([&] { dice = validate(*model, data.val, data.num_classes, mp, where); });
    }
    double mean = 0;
    for (double d : dice) mean += d;
    if (!dice.empty()) mean /= dice.size();
    const double epoch_s = seconds_since(te), elapsed = elapsed_before + seconds_since(t0);

    std::ostringstream line;
    line << "epoch " << epoch << "/" << r.epochs << "  loss " << fmt(train_loss) << "  skipped " << skipped
         << (nonfinite ? "  non-finite losses " + std::to_string(nonfinite) : std::string())
         << "  scale " << scaler.get_scale() << "  lr " << fmt(opt.param_groups()[0].options().get_lr(), 5);
    if (do_val) {
      line << "  val dice";
      for (size_t c = 0; c < dice.size(); ++c) line << " " << data.class_names[c + 1] << " " << fmt(dice[c]);
      line << "  mean " << fmt(mean);
    }
    line << "  " << fmt(epoch_s, 1) << " s";
    std::cout << line.str() << std::endl;

    EpochMetrics row;
    row.epoch = epoch;
    row.train_loss = train_loss;
    row.skipped_steps = skipped;
    row.nonfinite_steps = nonfinite;
    row.loss_scale = scaler.get_scale();
    row.lr = opt.param_groups()[0].options().get_lr();
    if (do_val) { row.dice = dice; row.mean_dice = mean; }
    row.epoch_seconds = epoch_s;
    row.elapsed_seconds = elapsed;
    metrics.add(row);

    if (do_val) { last = mean; last_epoch = epoch; }
    if (do_val && mean > best) { best = mean; best_epoch = epoch; }
    // By rank 0's clock, so that every rank stops after the same epoch.
    const bool out_of_time =
        agreement.agree({ctx.is_root() && a.max_minutes > 0 && seconds_since(t0) > a.max_minutes * 60 ? 1.0 : 0.0},
                        "the end of epoch " + std::to_string(epoch))[0] > 0;
    const bool stopping = epoch < r.epochs && (out_of_time || epoch == a.stop_after_epoch);
    if ((epoch % a.save_every == 0 || epoch == r.epochs || stopping) && ctx.is_root()) agreement.guard([&] {
      // model.safetensors' metadata: what eval needs, and nothing that differs between two equal runs
      // (no times), so that same options and seed give the same bytes.
      nlohmann::json model_meta = {{"recipe", r.name},          {"model", r.model.to_json()}, {"epoch", epoch},
                                   {"volume_shape", r.volume_shape}, {"class_names", data.class_names},
                                   {"val_mean_dice", mean}};
      model_meta.update(plan.to_json());  // amp, opt_level, amp_dtype, fp32_ops, fp32_modules
      // training_state's: what --resume needs (resume.h), and no times, so that two runs with the same
      // options and seed write the same bytes (the times are in metrics.csv, which --resume reads).
      const nlohmann::json train_meta = {{"args", train_args_to_json(a)},   {"epochs", r.epochs},
                                         {"epoch", epoch},                   {"step", global_step},
                                         {"metrics", metrics.to_json()},     {"best_dice", best},
                                         {"best_epoch", best_epoch},         {"last_dice", last},
                                         {"last_epoch", last_epoch},         {"nonfinite_streak", nonfinite_streak},
                                         {"data_fingerprint", fingerprint->to_json()}};
      const RunCheckpointWrite w = save_run_checkpoint(a.out, *model, opt, scaler, model_meta, train_meta);
      write_file_atomic(csv_path, metrics.csv());
      saved_epoch = epoch;
      std::cout << "checkpoint: " << w.describe() << std::endl;
    });
    agreement.agree({}, "the checkpoint of epoch " + std::to_string(epoch));
    if (stopping) {
      if (out_of_time) std::cout << "stopping: --max-minutes " << a.max_minutes << " reached after epoch " << epoch;
      else std::cout << "stopping: --stop-after-epoch " << epoch;
      std::cout << "; continue with: halfgrad-unet3d train --resume " << a.out << std::endl;
      break;
    }
  }
  std::cout << loader.stats().summary(loader_options.workers, loader_options.prefetch) << std::endl;
  if (graph_step)
    std::cout << "cuda graph: " << graph_step->captures() << " capture(s), " << graph_step->replays() << " replays of "
              << graph_step->nodes() << " nodes each; the graph's memory pool holds "
              << human_bytes(graph_step->pool_bytes()) << " beside the peak below" << std::endl;
  if (where.device == Device::CUDA) {
    const double gap_s = gpu_gaps.finish();
    std::cout << "gpu: idle " << fmt(gap_s, 3) << " s in total between steps (" << gpu_gaps.gaps() << " gaps, "
              << fmt(gpu_gaps.gaps() ? 1000.0 * gap_s / gpu_gaps.gaps() : 0.0, 3)
              << " ms per step; CUDA events from the end of a step's last op to the next step's batch on the device, "
                 "epoch boundaries left out)"
              << std::endl;
  }
  if (grad_stats) std::cout << "gradient statistics: " << grad_stats->path() << std::endl;
  if (saved_epoch > 0 && ctx.is_root()) {
    const CurvesFiles curves = write_training_curves(a.out, data.class_names);
    for (const std::string& f : curves.files) std::cout << "curves: " << f << std::endl;
    if (!curves.note.empty()) std::cout << "curves: " << curves.note << std::endl;
  }
  const uint64_t peak = (where.device == Device::CUDA ? cuda::allocator_stats().peak_allocated_bytes
                                                      : cpu_allocator_stats().peak_allocated_bytes) - baseline;
  std::cout << "memory: peak " << human_bytes(peak) << " of tensors (estimated "
            << human_bytes(need.total()) << ")" << std::endl;
  if (a.precision_report && ctx.is_root()) {
    const amp::PrecisionReportFiles files = precision.write(a.out);
    std::cout << precision.summary_text();
    for (const std::string& f : files.files) std::cout << "precision report: " << f << std::endl;
    if (!files.note.empty()) std::cout << "precision report: " << files.note << std::endl;
  }
  std::cout << "done in " << fmt(seconds_since(t0), 1) << " s; validation mean Dice " << fmt(last) << " at epoch "
            << last_epoch << " (the checkpoint's; best " << fmt(best) << " at epoch " << best_epoch << "); checkpoint "
            << a.out << "/model.safetensors, metrics " << a.out << "/metrics.csv" << std::endl;
  return 0;
}

// eval --overlay's picture of volume `name`: DIR/<file name less .nii[.gz]>.png.
static std::filesystem::path overlay_path(const std::string& dir, const std::string& name) {
  std::string base = std::filesystem::path(name).filename().string();
  base = base.substr(0, base.rfind(".nii"));
  return std::filesystem::path(dir) / (base + ".png");
}

int run_eval(const EvalArgs& a) {
  const Placement where = make_placement(a.device, "ndhwc", "eval");
  TrainedModel tm = load_trained_model(a.checkpoint, where, "eval");
  if (!tm.inferred.empty()) std::cerr << "eval: " << a.checkpoint << ": " << tm.inferred << std::endl;
  if (!tm.unverified.empty()) std::cerr << "eval: note: " << tm.unverified << std::endl;
  const Recipe& r = tm.recipe;
  nn::UNet3d* model = tm.model.get();
  const amp::OptLevel level = tm.plan.level;
  const amp::OptLevelSetup& mp = tm.mp;
  SegData data = a.data.empty() ? load_default_data(r) : load_msd_data(a.data, r, true);
  HG_CHECK(data.num_classes == r.model.num_classes(),
           "halfgrad-unet3d eval: " << data.source << " has " << data.num_classes << " classes but checkpoint "
                                    << a.checkpoint << " was trained for " << r.model.num_classes());
  if (a.memory_check)  // every volume is padded to data.volume_shape, the largest one's
    check_memory(estimate_eval_memory(r.model, model->num_parameters(), data.volume_shape, level),
                 available_memory(a.device), "eval", a.device,
                 "the volumes are padded to " + shape_str(Shape{data.volume_shape[0], data.volume_shape[1],
                                                                data.volume_shape[2]}) +
                     "; check the image headers");
  if (!a.overlay.empty()) {
    std::error_code ec;
    // Refused before anything runs, as predict does: an existing picture is somebody's, and two
    // volumes whose names differ only in .nii / .nii.gz would write one picture.
    std::map<std::filesystem::path, std::string> written_by;
    for (const SegVolume& v : data.val) {
      const std::filesystem::path png = overlay_path(a.overlay, v.name);
      const auto [it, fresh] = written_by.emplace(png, v.name);
      HG_CHECK(fresh, "halfgrad-unet3d eval: --overlay: " << it->second << " and " << v.name << " would both be drawn in "
                                                          << png.string() << "; expected one picture per volume");
      HG_CHECK(a.overwrite || !std::filesystem::exists(std::filesystem::symlink_status(png, ec)),
               "halfgrad-unet3d eval: --overlay: " << png.string()
                                                   << " exists already; pass --overwrite to replace it, or choose another folder");
    }
    std::filesystem::create_directories(a.overlay, ec);
    HG_CHECK(std::filesystem::is_directory(a.overlay, ec),
             "halfgrad-unet3d eval: --overlay " << a.overlay << ": cannot create the folder (" << ec.message() << ")");
  }
  const auto overlay = [&](const SegVolume& v, const Tensor& pred) {
    write_png(overlay_path(a.overlay, v.name).string(), compose_overlay(v.image, v.label, pred));
  };
  std::vector<double> dice = validate(*model, data.val, data.num_classes, mp, where,
                                      a.overlay.empty() ? std::function<void(const SegVolume&, const Tensor&)>{} : overlay);
  double mean = 0;
  for (double d : dice) mean += d;
  mean /= std::max<size_t>(dice.size(), 1);
  nlohmann::json out = {{"dice", dice}, {"mean_dice", mean}, {"volumes", data.val.size()}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace unet3d_app
