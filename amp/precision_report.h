// precision_report.h - what mixed precision did during a training run: per op, the dtype it ran in
// and why (the autocast list it is on, amp::policy), the casts autocast made for it and the bytes they
// moved; the casts per dtype pair; and the loss-scale timeline with the skipped steps.
//
//   amp::PrecisionRecorder report;
//   for (step ...) {
//     {
//       amp::PrecisionRecorder::Observe observe(&report);   // this thread's ops, in this scope
//       { amp::AutocastGuard autocast; loss = ...; }
//       scaler.scale(loss).backward();
//     }
//     const double s = scaler.get_scale();
//     const bool stepped = scaler.step(opt);
//     scaler.update();
//     report.record_step(step, s, !stepped, scaler.get_scale());
//   }
//   for (const std::string& f : report.write(run_dir).files) std::cout << f << "\n";
//
// How ops are seen: Observe installs a forward hook (autograd/node.h), which every op runs at its
// end, and turns on the cast counters of autocast/cast_stats.h. At each op the hook takes what was counted
// since the previous op: the OpKind the op asked autocast_dtype for (none for ops outside the table,
// such as relu), and the Tensor::to conversions it made of its inputs. The op's row is keyed by its
// recorded name, that kind, whether autocast was on, and its output dtype (the dtype it ran in). The
// cast op "to" itself is not a row: its conversions are charged to the op that asked for them.
// Conversions made in backward (each cast's gradient converted back to its input's dtype) are counted
// per dtype pair, not per op.
//
// Files (write): precision_ops.csv, precision_casts.csv, loss_scale.csv, precision_report.txt, and
// two gnuplot scripts, loss_scale.gp and cast_bytes.gp, rendered to loss_scale.png and cast_bytes.png
// when `gnuplot` is on the PATH (Debian: gnuplot-nox). Without it the scripts are written and the
// result says how to render them: `cd RUN_DIR && gnuplot loss_scale.gp`.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "autocast/autocast.h"
#include "autocast/cast_stats.h"

namespace halfgrad::amp {

/// One row of the op table: an op name seen with one (kind, autocast, dtype, list) combination.
struct OpPrecisionRow {
  std::string op;                   // the name the op recorded ("conv3d", "segmentation_loss")
  std::optional<OpKind> kind;       // the kind it asked autocast for; none if it did not ask
  bool autocast = false;            // autocast enabled on the thread when it ran
  Dtype dtype = kFloat32;           // its output dtype: the dtype it ran in
  std::optional<CastPolicy> list;   // amp::policy(kind) when it ran (none without a kind)
  int64_t calls = 0;                // times it ran while observed
  CastTally casts;                  // forward conversions of its inputs (Tensor::to), summed over calls
  /// Why the op ran in `dtype`, in words ("on the FP16 list: ...", "autocast off: ...").
  std::string why() const;
};

/// One optimizer step of the loss-scale timeline.
struct LossScalePoint {
  int64_t step = 0;          // the caller's step counter
  double scale = 1;          // the loss scale the step's backward used
  bool skipped = false;      // the scaler found inf/NaN and skipped optimizer.step()
  double scale_after = 1;    // the scale after update() (halved after a skip, doubled after growth)
};

/// What write() produced.
struct PrecisionReportFiles {
  std::vector<std::string> files;  // every file written (CSV, text, .gp, and .png when rendered)
  bool plotted = false;            // gnuplot ran and wrote the PNGs
  std::string note;                // how to render the plots when gnuplot was missing or failed
};

/// Whether an executable `gnuplot` is on the PATH.
bool gnuplot_available();
/// Runs `gnuplot SCRIPT` with `dir` as its working directory and its output and errors in
/// DIR/LOG; true when it exits 0. No shell is involved (posix_spawnp with a chdir), so no character of
/// `dir` is interpreted; the log is created fresh (core/file_io.h's create_fresh_file: a link or FIFO
/// under its name is removed, never written through or waited on). `script` and `log` are file names
/// inside `dir`. Throws halfgrad::Error when the log cannot be created or the process cannot start.
bool run_gnuplot(const std::string& dir, const std::string& script, const std::string& log);

/// Collects the precision report of a run (see the file comment). Not copyable: hooks point at it.
class PrecisionRecorder {
 public:
  /// A dtype conversion's (from, to, pass).
  using CastKey = std::tuple<Dtype, Dtype, CastPass>;

  PrecisionRecorder() = default;
  PrecisionRecorder(const PrecisionRecorder&) = delete;
  PrecisionRecorder& operator=(const PrecisionRecorder&) = delete;

  /// RAII: observe the ops run on this thread within the scope (a training step's forward and
  /// backward). A null recorder makes it a no-op, so a loop can write
  /// `PrecisionRecorder::Observe observe(report_enabled ? &report : nullptr);`. Throws halfgrad::Error
  /// if the recorder is already being observed (scopes of one recorder must not nest).
  class Observe {
   public:
    explicit Observe(PrecisionRecorder* recorder);
    ~Observe();
    Observe(const Observe&) = delete;
    Observe& operator=(const Observe&) = delete;

   private:
    PrecisionRecorder* r_;
    int hook_ = -1;
    std::optional<CastCountingGuard> counting_;
    std::map<CastKey, CastTally> start_totals_;  // cast_total(from, to, pass) at the start
  };

  /// Append a step to the loss-scale timeline: `scale` used by its backward, whether the step was
  /// skipped, and the scale after update(). Steps are kept in call order.
  void record_step(int64_t step, double scale, bool skipped, double scale_after);

  /// The op table, sorted by bytes moved by casts (largest first), then by op name.
  std::vector<OpPrecisionRow> op_rows() const;
  /// Conversions per (from, to, pass) while observed: forward casts and the backward conversions of
  /// their gradients. Pairs with no conversion are absent.
  const std::map<CastKey, CastTally>& casts_by_dtype() const { return by_dtype_; }
  const std::vector<LossScalePoint>& loss_scale_timeline() const { return timeline_; }
  /// Number of Observe scopes closed (training steps, when one scope wraps one step).
  int64_t observed_scopes() const { return scopes_; }

  /// The report as text: the op table (calls per observed scope, casts and MB per scope), the dtype
  /// pairs, and a summary of the loss-scale timeline (first / last / min scale, skipped steps).
  std::string summary_text() const;

  /// Write the report files into `dir` (created if missing) and, when `render` and gnuplot is on the
  /// PATH, render the PNGs. Throws halfgrad::Error if a file cannot be written; a gnuplot failure is
  /// not an error (it is reported in the result's note).
  PrecisionReportFiles write(const std::string& dir, bool render = true) const;

 private:
  void on_op(const char* op, const Tensor& output);

  using Key = std::tuple<std::string, int, bool, Dtype, int>;  // op, kind (-1 none), autocast, dtype, list (-1)
  std::map<Key, OpPrecisionRow> rows_;
  std::map<CastKey, CastTally> by_dtype_;
  std::vector<LossScalePoint> timeline_;
  int64_t scopes_ = 0;
  bool observing_ = false;
};

}  // namespace halfgrad::amp
