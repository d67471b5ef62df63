// resume.cpp - see resume.h.
#include "examples/05_unet3d/resume.h"

#include <algorithm>

#include "amp/precision_plan.h"
#include "core/checksum.h"
#include "core/error.h"
#include "examples/05_unet3d/data.h"

namespace unet3d_app {

using halfgrad::json_checked::Field;

nlohmann::json train_args_to_json(const TrainArgs& a) {
  return {{"data", a.data},
          {"config", a.config},
          {"device", a.device},
          {"memory_format", a.memory_format},
          {"epochs", a.epochs},
          {"batch", a.batch},
          {"lr", a.lr},
          {"amp", a.amp},
          {"opt_level", a.opt_level},
          {"amp_dtype", a.amp_dtype},
          {"fp32_ops", a.fp32_ops},
          {"fp32_modules", a.fp32_modules},
          {"seed", std::to_string(a.seed)},  // a string: JSON readers differ on integers past 2^63
          {"fold", a.fold},
          {"spacing", a.spacing},
          {"plan", a.plan},
          {"plan_xxh3", a.plan_xxh3},
          {"augment", a.augment},
          {"augment_device", a.augment_device},
          {"deep_supervision", a.deep_supervision},
          {"optimizer", a.optimizer},
          {"lr_schedule", a.lr_schedule},
          {"val_every", a.val_every},
          {"save_every", a.save_every},
          {"grad_stats", a.grad_stats},
          {"grad_stats_every", a.grad_stats_every},
          {"precision_report", a.precision_report},
          {"detect_anomaly", a.detect_anomaly}};
}

TrainArgs train_args_from_json(const Field& j) {
  j.require_object("the options of the run (train_meta.args)");
  TrainArgs a;
  a.data = j["data"].as_string();
  if (j.has("out")) a.out = j["out"].as_string();  // saved before 2026-12-04; the run folder is where the file is
  a.config = j["config"].as_string();
  a.device = j["device"].as_string();
  a.memory_format = j["memory_format"].as_string();
  a.epochs = j["epochs"].as_int();
  a.batch = j["batch"].as_int();
  a.lr = j["lr"].as_number();
  a.amp = j["amp"].as_bool();
  a.opt_level = j["opt_level"].as_string();
  a.amp_dtype = j.has("amp_dtype") ? j["amp_dtype"].as_string() : "fp16";  // runs saved before --amp-dtype
  a.fp32_ops = j["fp32_ops"].as_string_list();
  a.fp32_modules = j["fp32_modules"].as_string_list();
  // The saved precision words are checked where every precision is (amp::PrecisionPlan), naming the file.
  halfgrad::amp::PrecisionPlan::from_words(a.opt_level, a.amp, a.amp_dtype, a.fp32_ops, a.fp32_modules, j.where());
  const std::string seed = j["seed"].as_string();
  HG_CHECK(!seed.empty() && seed.size() <= 20 && std::all_of(seed.begin(), seed.end(), [](unsigned char c) { return c >= '0' && c <= '9'; }),
           j.where() << ": field 'seed' is \"" << seed.substr(0, 24) << "\"; expected decimal digits");
  a.seed = std::stoull(seed);
  a.fold = j.has("fold") ? j["fold"].as_int(0, kFolds - 1) : kReferenceFold;  // runs saved before --fold
  // Runs saved before --spacing trained every volume on its own grid.
  a.spacing = j.has("spacing") ? j["spacing"].as_string() : "native";
  SpacingChoice::parse(a.spacing, j.where() + ": field 'spacing'");
  // Runs saved before --plan had none; a run with one reads it back from RUN_DIR/plan.json (plan.h).
  a.plan = j.has("plan") ? j["plan"].as_string() : "";
  a.plan_xxh3 = j.has("plan_xxh3") ? j["plan_xxh3"].as_string() : "";  // runs saved before it: unchecked
  uint64_t sum = 0;
  if (!a.plan_xxh3.empty() && !halfgrad::parse_hex64(a.plan_xxh3, &sum))
    j["plan_xxh3"].fail("is not 16 hex digits (an XXH3-64 checksum of the run's plan.json)");
  // Runs saved before --augment trained without augmentation: the recipe's (every recipe's is none).
  a.augment = j.has("augment") ? j["augment"].as_string() : "";
  if (!a.augment.empty()) augmentation_by_name(a.augment, j.where() + ": field 'augment'");
  // Runs saved before --augment-device augmented on the CPU; empty: --device's (train saves what it resolved).
  a.augment_device = j.has("augment_device") ? j["augment_device"].as_string() : "cpu";
  HG_CHECK(a.augment_device.empty() || a.augment_device == "cpu" || a.augment_device == "cuda",
           j.where() << ": field 'augment_device' is \"" << a.augment_device.substr(0, 24) << "\"; expected cpu or cuda");
  // What the command line refuses (cli.cpp), refused here too: the CPU build would fail deep in Tensor::empty.
  HG_CHECK(a.augment_device != "cuda" || a.device == "cuda",
           j.where() << ": field 'augment_device' is \"cuda\" but field 'device' is \"" << a.device.substr(0, 24)
                     << "\"; expected augment_device cpu with device cpu (--augment-device cuda needs --device cuda)");
  // Runs saved before --deep-supervision trained without it.
  a.deep_supervision = j.has("deep_supervision") && j["deep_supervision"].as_bool();
  // Runs saved before --optimizer and --lr-schedule trained with the recipe's (AdamW, its schedule).
  a.optimizer = j.has("optimizer") ? j["optimizer"].as_string() : "";
  if (!a.optimizer.empty()) optimizer_by_name(a.optimizer, j.where() + ": field 'optimizer'");
  a.lr_schedule = j.has("lr_schedule") ? j["lr_schedule"].as_string() : "";
  if (!a.lr_schedule.empty()) schedule_by_name(a.lr_schedule, j.where() + ": field 'lr_schedule'");
  a.val_every = j["val_every"].as_int();
  a.save_every = j["save_every"].as_int(1, INT64_MAX);
  a.grad_stats = j["grad_stats"].as_string();
  a.grad_stats_every = j["grad_stats_every"].as_int(1, INT64_MAX);
  a.precision_report = j["precision_report"].as_bool();
  a.detect_anomaly = j["detect_anomaly"].as_bool();
  return a;
}

const std::vector<std::string>& resume_allowed_options() {
  static const std::vector<std::string> allowed = {"--resume",           "--epochs",       "--save-every",
                                                   "--max-minutes",      "--stop-after-epoch", "--no-progress",
                                                   "--no-memory-check",  "--workers",      "--prefetch",
                                                   "--gpus",             "--cuda-graph",   "--data",
                                                   "--allow-data-change"};
  return allowed;
}

void check_resume_args(const TrainArgs& a) {
  if (a.resume.empty()) return;
  std::string refused;
  for (const std::string& o : a.given)
    if (std::find(resume_allowed_options().begin(), resume_allowed_options().end(), o) == resume_allowed_options().end())
      refused += (refused.empty() ? "" : ", ") + o;
  HG_CHECK(refused.empty(), "halfgrad-unet3d train --resume " << a.resume << ": " << refused
                                << " cannot be given with --resume: the run continues with the options it was "
                                   "started with; only --epochs, --save-every, --max-minutes, --stop-after-epoch, "
                                   "--no-progress, --no-memory-check, --workers and --prefetch (which change no "
                                   "bit), --gpus (the same global batch, on any number of GPUs), --cuda-graph / --no-cuda-graph (how this "
                                   "process runs the step), --data (the run's data in a moved folder: compared with "
                                   "what it trained on) and --allow-data-change may be");
}

TrainArgs resumed_args(const TrainArgs& a, const nlohmann::json& train_meta) {
  const std::string where = "halfgrad-unet3d train --resume " + a.resume;
  const Field m(train_meta, where + ": training_state.safetensors");
  TrainArgs b = train_args_from_json(m["args"]);
  const int64_t saved_epoch = m["epoch"].as_int(1, INT64_MAX);
  const int64_t total = m["epochs"].as_int(1, INT64_MAX);
  HG_CHECK(b.grad_stats.empty() && !b.precision_report,
           where << ": the run was started with " << (b.grad_stats.empty() ? "--precision-report" : "--grad-stats")
                 << ", whose file covers the whole run; resuming such a run is not supported");
  auto given = [&](const char* o) { return std::find(a.given.begin(), a.given.end(), o) != a.given.end(); };
  b.epochs = given("--epochs") ? a.epochs : total;
  HG_CHECK(b.epochs > saved_epoch,
           where << ": the run has trained " << saved_epoch << " of " << total << " epochs"
                 << (given("--epochs") ? "; --epochs " + std::to_string(a.epochs) + " is not past it"
                                       : std::string(" and is finished"))
                 << "; pass --epochs N with N > " << saved_epoch << " to train it further");
  if (given("--save-every")) b.save_every = a.save_every;
  if (given("--data")) b.data = a.data;  // checked against the run's data fingerprint once loaded
  b.allow_data_change = a.allow_data_change;
  b.out = a.resume;
  b.resume = a.resume;
  b.overwrite = false;
  b.progress = a.progress;
  b.memory_check = a.memory_check;
  b.max_minutes = a.max_minutes;
  b.stop_after_epoch = a.stop_after_epoch;
  b.workers = a.workers;    // the loader's threads change no bit (loader.h): this process's choice
  b.prefetch = a.prefetch;
  b.gpus = a.gpus;
  b.cuda_graph = a.cuda_graph;  // how this process runs the step, not the run's state
  return b;
}

}  // namespace unet3d_app
