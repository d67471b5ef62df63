// cli.h - the command line of halfgrad-unet3d (CLI11), kept apart from main() so that tests can
// parse argument lists through exactly the options the program has.
//
// Every number is read strictly, and a bad one is a CLI::ValidationError naming the option:
//   integers  decimal digits only ("010" is ten, not octal eight; no sign, no "0x", no "1e3"), in
//             the option's range (e.g. --epochs in [1, 1000000]); a value past the range, however
//             many digits it has, is refused instead of being clamped to INT64_MAX.
//   floats    finite (no nan/inf), and > 0 (--lr), >= 0 (--max-minutes) or in [0, 0.9] (--overlap).
// After parsing, `check_train_args` refuses combinations that would be silently ignored
// (`--memory-format ndhwc` with `--device cpu`: the CPU ops run NCDHW only).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "examples/05_unet3d/plan.h"
#include "examples/05_unet3d/predict.h"
#include "examples/05_unet3d/train.h"

namespace unet3d_app {

// Ranges of the integer options (inclusive).
constexpr uint64_t kMaxEpochs = 1000000;
constexpr uint64_t kMaxBatch = 1000000;        // the memory check refuses most of these long before
constexpr uint64_t kMaxEvery = 1000000000;     // --val-every, --save-every, --grad-stats-every
constexpr uint64_t kMaxWorkers = 64;           // --workers, --prefetch
constexpr uint64_t kMaxGpus = 64;              // --gpus: the ranks of one host

/// A CLI11 transform for an integer option: `s` must be decimal digits whose value lies in [lo, hi];
/// it is rewritten without leading zeros, so CLI11's own conversion (which reads "010" as octal) sees
/// plain decimal. The error names the value and the range.
CLI::Validator decimal_integer(uint64_t lo, uint64_t hi);
/// A CLI11 transform for a floating option: a finite number, > lo when `strict`, else >= lo, and
/// <= hi; rewritten as "%.17g" so that the value CLI11 stores is the one checked. A value too
/// small for a double ("1e-400") is read as what it rounds to (0) and accepted when that is in
/// range, else refused saying it underflows; one too large ("1e400") is refused as an overflow.
CLI::Validator finite_number(double lo, bool strict, double hi = std::numeric_limits<double>::infinity());

/// The whole command line: `app` with its subcommands, bound to `train_args`, `eval_args`,
/// `predict_args` and `plan_args`.
/// Not copyable (CLI11 keeps pointers to the fields).
struct CommandLine {
  CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  /// Parses `args` (without the program name, e.g. {"train", "--out", "x"}); throws CLI::ParseError
  /// (CLI::CallForHelp for --help) as app.parse does, then check_train_args's halfgrad::Error.
  void parse(const std::vector<std::string>& args);

  CLI::App app;
  CLI::App* train = nullptr;
  CLI::App* eval = nullptr;
  CLI::App* predict = nullptr;
  CLI::App* cv = nullptr;
  CLI::App* plan = nullptr;
  std::vector<std::string> cv_runs;  // cv RUN_DIR...: the run folders of train --fold K
  TrainArgs train_args;
  EvalArgs eval_args;
  PredictArgs predict_args;
  PlanArgs plan_args;
};

/// What the parser cannot see; throws halfgrad::Error naming the options: the precision words that
/// disagree (precision_plan: --amp with --opt-level O2, --amp-dtype bf16 without --amp, an unknown
/// --opt-level or --fp32-op, --fp32-op without O1), --memory-format ndhwc
/// with --device cpu (an explicit request the CPU ops cannot honour: they run NCDHW only; the
/// default, --memory-format unset, means ndhwc on cuda and NCDHW on the CPU without a word), and
/// --augment-device cuda without --device cuda, --gpus without --device cuda (the ranks are GPUs talking through NCCL), --plan without --data.
void check_train_args(const TrainArgs& a);

}  // namespace unet3d_app
