#include "examples/05_unet3d/metrics.h"

#include <cmath>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace unet3d_app {

std::vector<double> dice_per_class(const halfgrad::Tensor& pred, const halfgrad::Tensor& target, int64_t num_classes) {
  HG_CHECK(pred.shape() == target.shape(), "dice: prediction " << halfgrad::shape_str(pred.shape())
                                                               << " and target " << halfgrad::shape_str(target.shape())
                                                               << " differ");
  std::vector<int64_t> inter(num_classes, 0), np(num_classes, 0), nt(num_classes, 0);
  const int64_t* p = pred.data<int64_t>();
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < pred.numel(); ++i) {
    ++np[p[i]];
    ++nt[t[i]];
    if (p[i] == t[i]) ++inter[p[i]];
  }
  std::vector<double> d;
  for (int64_t c = 1; c < num_classes; ++c) {
    const int64_t den = np[c] + nt[c];
    d.push_back(den == 0 ? 1.0 : 2.0 * static_cast<double>(inter[c]) / static_cast<double>(den));
  }
  return d;
}

}  // namespace unet3d_app

namespace unet3d_app {

static std::string fixed(double v, int prec) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(prec);
  os << v;
  return os.str();
}

MetricsTable::MetricsTable(std::vector<std::string> class_names) : class_names_(std::move(class_names)) {
  header_ = "epoch,train_loss,skipped_steps,nonfinite_steps,loss_scale,lr";
  for (size_t c = 1; c < class_names_.size(); ++c) header_ += ",dice_" + class_names_[c];
  header_ += ",mean_dice,epoch_seconds,elapsed_seconds";
}

void MetricsTable::add(const EpochMetrics& m) {
  const size_t nfg = class_names_.empty() ? 0 : class_names_.size() - 1;
  HG_CHECK(m.dice.empty() || m.dice.size() == nfg, "metrics.csv: epoch " << m.epoch << " has " << m.dice.size()
                                                                          << " Dice values; expected " << nfg
                                                                          << " (one per foreground class) or none");
  std::ostringstream os;
  os << m.epoch << "," << m.train_loss << "," << m.skipped_steps << "," << m.nonfinite_steps << "," << m.loss_scale
     << "," << m.lr;
  for (size_t c = 0; c < nfg; ++c) os << "," << (m.dice.empty() ? "" : fixed(m.dice[c], 4));
  os << "," << (m.dice.empty() ? "" : fixed(m.mean_dice, 4)) << "," << fixed(m.epoch_seconds, 2) << ","
     << fixed(m.elapsed_seconds, 2);
  rows_.push_back(os.str());
}

std::string MetricsTable::csv() const {
  std::string s = header_ + "\n";
  for (const std::string& r : rows_) s += r + "\n";
  return s;
}

// A metrics line without its last two fields (epoch_seconds, elapsed_seconds).
static std::string without_times(const std::string& line) {
  const size_t last = line.rfind(',');
  const size_t cut = last == std::string::npos || last == 0 ? std::string::npos : line.rfind(',', last - 1);
  return cut == std::string::npos ? line : line.substr(0, cut);
}

std::string read_metrics_csv(const std::string& path) {
  try {
    return halfgrad::read_regular_file(path, size_t{64} << 20, path, "a metrics.csv");
  } catch (const halfgrad::Error&) {
    return "";
  }
}

double MetricsTable::restore_untimed_rows(const std::vector<std::string>& rows, const std::string& csv_text) {
  std::map<std::string, std::string> timed;  // a metrics.csv line without its times -> the line
  std::istringstream in(csv_text);
  for (std::string line; std::getline(in, line);) timed[without_times(line)] = line;
  rows_.clear();
  double elapsed = 0;
  for (const std::string& r : rows) {
    const auto it = timed.find(r);
    if (it == timed.end()) {
      rows_.push_back(r + ",,");
      continue;
    }
    rows_.push_back(it->second);
    const std::string& line = it->second;
    const size_t last = line.rfind(',');
    try {
      const double e = std::stod(line.substr(last + 1));
      if (std::isfinite(e) && e >= 0) elapsed = e;
    } catch (const std::exception&) {  // an empty or hand-edited column: the earlier value stands
    }
  }
  return elapsed;
}

nlohmann::json MetricsTable::to_json() const {
  std::vector<std::string> rows;
  rows.reserve(rows_.size());
  for (const std::string& r : rows_) rows.push_back(without_times(r));
  return {{"header", without_times(header_)}, {"rows", rows}};
}

}  // namespace unet3d_app
