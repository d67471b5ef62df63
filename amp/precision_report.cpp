// precision_report.cpp - the precision report of a training run (see precision_report.h).
#include "amp/precision_report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/node.h"
#include "core/error.h"
#include "core/file_io.h"

namespace halfgrad::amp {

namespace {

constexpr CastPass kPasses[] = {CastPass::Forward, CastPass::Backward};

const char* pass_name(CastPass p) { return p == CastPass::Forward ? "forward" : "backward"; }

double mb(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A CSV field: quoted, with inner quotes doubled.
std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::ofstream open_for_writing(const std::string& path) {
  std::ofstream out(path);
  HG_CHECK(out.good(), "PrecisionRecorder::write: cannot open '" << path << "' for writing");
  return out;
}

void finish(std::ofstream& out, const std::string& path, std::vector<std::string>& written) {
  out.flush();
  HG_CHECK(out.good(), "PrecisionRecorder::write: writing '" << path << "' failed");
  written.push_back(path);
}

std::string row_label(const OpPrecisionRow& r) {
  return r.op + (r.autocast ? "" : " (autocast off)") + " " + dtype_name(r.dtype);
}

}  // namespace

bool gnuplot_available() {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) dir = ".";
    if (::access((dir + "/gnuplot").c_str(), X_OK) == 0) return true;
  }
  return false;
}

bool run_gnuplot(const std::string& dir, const std::string& script, const std::string& log) {
  const std::string where = "gnuplot " + script;
  const UniqueFd out = create_fresh_file((std::filesystem::path(dir) / log).string(), where);
  // posix_spawn rather than fork: the process has OpenMP, loader and CUDA threads, and the spawn runs
  // nothing of this process in the child. chdir, not `cd` in a shell: no character of `dir` is read.
  posix_spawn_file_actions_t actions;
  HG_CHECK(::posix_spawn_file_actions_init(&actions) == 0, where << ": cannot prepare the process");
  ::posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  ::posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out.fd, STDOUT_FILENO);
  ::posix_spawn_file_actions_adddup2(&actions, out.fd, STDERR_FILENO);
  char* const argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;  // gnuplot_available() said it is there; the caller reports the failure
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string OpPrecisionRow::why() const {
  if (!autocast) return std::string("autocast off: runs in its inputs' dtype (") + dtype_name(dtype) + ")";
  if (!kind) return "asks no autocast list (not in the table): runs in its inputs' dtype";
  switch (*list) {
    case CastPolicy::Lower:
      if (dtype == kFloat16) return std::string("FP16 list: ") + op_record(*kind).why + "; half the bytes of FP32";
      if (dtype == kBFloat16)  // an AutocastOptions().dtype(kBFloat16) region: the same list, lowered to BF16
        return std::string("FP16 list, lowered to bfloat16 in this region: ") + op_record(*kind).why +
               "; half the bytes of FP32";
      return std::string("FP16 list, but ran in ") + dtype_name(dtype) +
             ": float64 inputs, or a HALFGRAD_FORCE_FP32 build (autocast_lower_dtype is float32)";
    case CastPolicy::Fp32:
      if (default_policy(*kind) != CastPolicy::Fp32) return "moved to the FP32 list on this thread (amp::set_op_fp32)";
      return std::string("FP32 list: ") + op_record(*kind).why;
    case CastPolicy::Promote:
      return std::string("promote: runs in its widest floating input dtype (") + dtype_name(dtype) + ")";
    case CastPolicy::None: return std::string("on no list, runs in its inputs' dtype: ") + op_record(*kind).why;
  }
  return "";
}

// ---- observing --------------------------------------------------------------------------------------

PrecisionRecorder::Observe::Observe(PrecisionRecorder* recorder) : r_(recorder) {
  if (!r_) return;
  HG_CHECK(!r_->observing_, "PrecisionRecorder::Observe: this recorder is already being observed (scopes must not nest)");
  r_->observing_ = true;
  counting_.emplace(true);
  take_pending();  // drop anything counted before the scope
  for (CastPass p : kPasses)
    for (Dtype a : kAllDtypes)
      for (Dtype b : kAllDtypes) start_totals_[{a, b, p}] = cast_total(a, b, p);
  PrecisionRecorder* r = r_;
  hook_ = autograd::add_forward_hook(
      [r](const char* op, const Tensor& output, const std::vector<Tensor>&) { r->on_op(op, output); });
}

PrecisionRecorder::Observe::~Observe() {
  if (!r_) return;
  autograd::remove_forward_hook(hook_);
  for (const auto& [key, start] : start_totals_) {
    const auto& [a, b, p] = key;
    const CastTally now = cast_total(a, b, p);
    if (now.casts == start.casts) continue;
    CastTally d;
    d.casts = now.casts - start.casts;
    d.elements = now.elements - start.elements;
    d.bytes_read = now.bytes_read - start.bytes_read;
    d.bytes_written = now.bytes_written - start.bytes_written;
    r_->by_dtype_[key] += d;
  }
  counting_.reset();
  ++r_->scopes_;
  r_->observing_ = false;
}

void PrecisionRecorder::on_op(const char* op, const Tensor& output) {
  // The cast op: its conversion is already counted, and is charged to the op that asked for it.
  if (std::strcmp(op, "to") == 0) return;
  const PendingCasts pending = take_pending();
  const bool on = autocast_enabled();
  const Dtype dt = output.defined() ? output.dtype() : kFloat32;
  std::optional<CastPolicy> list;
  if (pending.requested) list = policy(*pending.requested);
  const Key key{op, pending.requested ? static_cast<int>(*pending.requested) : -1, on, dt,
                list ? static_cast<int>(*list) : -1};
  auto it = rows_.find(key);
  if (it == rows_.end()) {
    OpPrecisionRow row;
    row.op = op;
    row.kind = pending.requested;
    row.autocast = on;
    row.dtype = dt;
    row.list = list;
    it = rows_.emplace(key, row).first;
  }
  ++it->second.calls;
  it->second.casts += pending.casts;
}

void PrecisionRecorder::record_step(int64_t step, double scale, bool skipped, double scale_after) {
  timeline_.push_back({step, scale, skipped, scale_after});
}

std::vector<OpPrecisionRow> PrecisionRecorder::op_rows() const {
  std::vector<OpPrecisionRow> rows;
  for (const auto& [key, row] : rows_) rows.push_back(row);
  std::stable_sort(rows.begin(), rows.end(), [](const OpPrecisionRow& a, const OpPrecisionRow& b) {
    if (a.casts.bytes_moved() != b.casts.bytes_moved()) return a.casts.bytes_moved() > b.casts.bytes_moved();
    return a.op < b.op;
  });
  return rows;
}

// ---- text -------------------------------------------------------------------------------------------

std::string PrecisionRecorder::summary_text() const {
  const double per = scopes_ > 0 ? 1.0 / static_cast<double>(scopes_) : 0.0;
  std::ostringstream os;
  os << "precision report: " << scopes_ << " observed step(s); per-step averages\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-20s %-16s %-8s %-4s %-8s %8s %8s %10s  %s\n", "op", "kind", "list", "ac", "dtype",
                "calls", "casts", "cast MB", "why");
  os << buf;
  for (const OpPrecisionRow& r : op_rows()) {
    std::snprintf(buf, sizeof buf, "%-20s %-16s %-8s %-4s %-8s %8.1f %8.1f %10.3f  %s\n", r.op.c_str(),
                  r.kind ? op_kind_name(*r.kind) : "-", r.list ? cast_policy_name(*r.list) : "-", r.autocast ? "on" : "off",
                  dtype_name(r.dtype), static_cast<double>(r.calls) * per, static_cast<double>(r.casts.casts) * per,
                  mb(r.casts.bytes_moved()) * per, r.why().c_str());
    os << buf;
  }
  os << "casts by dtype (per step):\n";
  if (by_dtype_.empty()) os << "  none (no op converted a tensor: an FP32 run, or every weight was already cast)\n";
  for (const auto& [key, c] : by_dtype_) {
    const auto& [a, b, p] = key;
    std::snprintf(buf, sizeof buf, "  %-8s %-7s -> %-7s %8.1f casts %12.0f elements %10.3f MB moved\n", pass_name(p),
                  dtype_name(a), dtype_name(b), static_cast<double>(c.casts) * per, static_cast<double>(c.elements) * per,
                  mb(c.bytes_moved()) * per);
    os << buf;
  }
  if (!timeline_.empty()) {
    int64_t skipped = 0;
    double lo = timeline_.front().scale;
    for (const LossScalePoint& p : timeline_) {
      skipped += p.skipped;
      lo = std::min(lo, p.scale);
    }
    os << "loss scale: " << timeline_.size() << " steps, first " << timeline_.front().scale << ", last "
       << timeline_.back().scale_after << ", min " << lo << ", skipped steps " << skipped << "\n";
  }
  return os.str();
}

// ---- files ------------------------------------------------------------------------------------------

PrecisionReportFiles PrecisionRecorder::write(const std::string& dir, bool render) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  HG_CHECK(!ec, "PrecisionRecorder::write: cannot create '" << dir << "': " << ec.message());
  PrecisionReportFiles res;
  const double per = scopes_ > 0 ? 1.0 / static_cast<double>(scopes_) : 0.0;
  const std::vector<OpPrecisionRow> rows = op_rows();

  const std::string ops_csv = dir + "/precision_ops.csv";
  {
    std::ofstream out = open_for_writing(ops_csv);
    out << "op,kind,list,autocast,dtype,calls,calls_per_step,casts,cast_elements,cast_bytes,cast_bytes_per_step,why\n";
    for (const OpPrecisionRow& r : rows)
      out << r.op << "," << (r.kind ? op_kind_name(*r.kind) : "") << "," << (r.list ? cast_policy_name(*r.list) : "")
          << "," << (r.autocast ? 1 : 0) << "," << dtype_name(r.dtype) << "," << r.calls << ","
          << static_cast<double>(r.calls) * per << "," << r.casts.casts << "," << r.casts.elements << ","
          << r.casts.bytes_moved() << "," << static_cast<double>(r.casts.bytes_moved()) * per << ","
          << csv_quote(r.why()) << "\n";
    finish(out, ops_csv, res.files);
  }
  const std::string casts_csv = dir + "/precision_casts.csv";
  {
    std::ofstream out = open_for_writing(casts_csv);
    out << "pass,from,to,casts,elements,bytes_read,bytes_written,bytes_per_step\n";
    for (const auto& [key, c] : by_dtype_) {
      const auto& [a, b, p] = key;
      out << pass_name(p) << "," << dtype_name(a) << "," << dtype_name(b) << "," << c.casts << "," << c.elements << ","
          << c.bytes_read << "," << c.bytes_written << "," << static_cast<double>(c.bytes_moved()) * per << "\n";
    }
    finish(out, casts_csv, res.files);
  }
  const std::string scale_csv = dir + "/loss_scale.csv";
  {
    std::ofstream out = open_for_writing(scale_csv);
    out << "step,loss_scale,skipped,scale_after\n";
    for (const LossScalePoint& p : timeline_)
      out << p.step << "," << p.scale << "," << (p.skipped ? 1 : 0) << "," << p.scale_after << "\n";
    finish(out, scale_csv, res.files);
  }
  const std::string text = dir + "/precision_report.txt";
  {
    std::ofstream out = open_for_writing(text);
    out << summary_text();
    finish(out, text, res.files);
  }

  // Plots: gnuplot scripts that read the CSVs by relative name, so `cd DIR && gnuplot X.gp` renders them.
  std::vector<std::string> scripts;
  if (!timeline_.empty()) {
    const std::string gp = dir + "/loss_scale.gp";
    std::ofstream out = open_for_writing(gp);
    out << "# Loss-scale timeline of a halfgrad run (PrecisionRecorder). Render: cd RUN_DIR && gnuplot loss_scale.gp\n"
           "set terminal pngcairo noenhanced size 900,450\n"
           "set output 'loss_scale.png'\n"
           "set datafile separator ','\n"
           "set title 'GradScaler loss scale (x: skipped step, found inf/NaN)'\n"
           "set xlabel 'step'\n"
           "set ylabel 'loss scale'\n"
           "set logscale y 2\n"
           "set format y '2^{%L}'\n"
           "set key top left\n"
           "set grid\n"
           "# columns of loss_scale.csv: 1 step, 2 loss_scale, 3 skipped, 4 scale_after\n"
           "plot 'loss_scale.csv' skip 1 using 1:2 with steps lw 2 title 'scale used', \\\n"
           "     '' skip 1 using 1:($3 > 0 ? $2 : 1/0) with points pt 2 ps 1.5 lc rgb 'red' title 'skipped step'\n";
    finish(out, gp, res.files);
    scripts.push_back("loss_scale");
  }
  std::vector<const OpPrecisionRow*> casting;
  for (const OpPrecisionRow& r : rows)
    if (r.casts.casts > 0) casting.push_back(&r);
  if (!casting.empty()) {
    const std::string data = dir + "/cast_bytes.csv";
    {
      std::ofstream out = open_for_writing(data);
      out << "op,cast_mb_per_step\n";
      for (const OpPrecisionRow* r : casting)
        out << csv_quote(row_label(*r)) << "," << fmt("%.6f", mb(r->casts.bytes_moved()) * per) << "\n";
      finish(out, data, res.files);
    }
    const std::string gp = dir + "/cast_bytes.gp";
    std::ofstream out = open_for_writing(gp);
    out << "# MB moved per step by autocast's casts, per op (PrecisionRecorder). Render: cd RUN_DIR && gnuplot "
           "cast_bytes.gp\n"
           "set terminal pngcairo noenhanced size 900,500\n"
           "set output 'cast_bytes.png'\n"
           "set datafile separator ','\n"
           "set title 'Bytes moved by autocast casts per step (read + write)'\n"
           "set ylabel 'MB per step'\n"
           "set style data histograms\n"
           "set style fill solid 0.8 border -1\n"
           "set boxwidth 0.8\n"
           "set xtics rotate by -30 left\n"
           "set bmargin 8\n"
           "set grid ytics\n"
           "plot 'cast_bytes.csv' skip 1 using 2:xtic(1) notitle lc rgb '#4472c4'\n";
    finish(out, gp, res.files);
    scripts.push_back("cast_bytes");
  }

  if (scripts.empty()) {
    res.note = "no plot: no step was recorded and no op cast a tensor";
    return res;
  }
  if (!render) {
    res.note = "plots not rendered; render them with: cd " + dir + " && gnuplot " + scripts.front() + ".gp";
    return res;
  }
  if (!gnuplot_available()) {
    res.note = "gnuplot is not installed (Debian: apt-get install gnuplot-nox); render the plots with: cd " + dir +
               " && for f in *.gp; do gnuplot \"$f\"; done";
    return res;
  }
  res.plotted = true;
  for (const std::string& s : scripts) {
    const std::string png = dir + "/" + s + ".png";
    fs::remove(png, ec);
    if (run_gnuplot(dir, s + ".gp", s + ".gnuplot.log") && fs::exists(png)) {
      res.files.push_back(png);
      fs::remove(dir + "/" + s + ".gnuplot.log", ec);
    } else {
      res.plotted = false;
      res.note += (res.note.empty() ? "" : "; ") + std::string("gnuplot failed on ") + s + ".gp (see " + dir + "/" + s +
                  ".gnuplot.log)";
    }
  }
  return res;
}

}  // namespace halfgrad::amp
