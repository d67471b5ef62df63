// curves.cpp - write_training_curves (curves.h).
#include "examples/05_unet3d/curves.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "amp/precision_report.h"
#include "core/error.h"
#include "unet3d/run_folder.h"

namespace unet3d_app {

namespace fs = std::filesystem;

// A gnuplot single-quoted string: ' is doubled, and a control character (a newline would end the
// string and start a command: gnuplot has system()) becomes '?'. load_msd refuses such class names
// already; this keeps the script safe whatever the caller passes.
static std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += c == '\'' ? std::string("''") : (u < 0x20 || u == 0x7f) ? std::string("?") : std::string(1, c);
  }
  return out + "'";
}

CurvesFiles write_training_curves(const std::string& dir, const std::vector<std::string>& class_names, bool render) {
  HG_CHECK(!class_names.empty(), "write_training_curves: expected class names (background first)");
  // metrics.csv's columns (metrics.h), 1-based as gnuplot counts them.
  constexpr int kEpoch = 1, kLoss = 2, kScale = 5, kFirstDice = 7;
  const int nfg = static_cast<int>(class_names.size()) - 1;
  const int mean_col = kFirstDice + nfg;

  std::ostringstream gp;
  gp << "# Training curves of a halfgrad-unet3d run, from metrics.csv. Render: cd RUN_DIR && gnuplot curves.gp\n"
        "# metrics.csv columns: 1 epoch, 2 train_loss, 5 loss_scale, "
     << kFirstDice << ".." << mean_col - 1 << " dice per class, " << mean_col
     << " mean_dice (empty: no validation that epoch)\n"
        "set terminal pngcairo noenhanced size 900,1000\n"
        "set output 'curves.png'\n"
        "set datafile separator ','\n"
        "set datafile missing ''\n"
        "set key top right\n"
        "set grid\n"
        "set xlabel 'epoch'\n"
        "set xrange [0:*]\n"
        "set format x '%g'\n"
        "set multiplot layout 3,1\n"
        "set title 'training loss (mean over the epoch, finite steps)'\n"
        "set ylabel 'loss'\n"
        "plot 'metrics.csv' skip 1 using "
     << kEpoch << ":" << kLoss
     << " with linespoints lw 2 pt 7 title 'train loss'\n"
        "set title 'validation Dice'\n"
        "set ylabel 'Dice'\n"
        "set yrange [0:1]\n"
        "set key bottom right\n"
        "plot ";
  for (int c = 0; c < nfg; ++c)
    gp << "'metrics.csv' skip 1 using " << kEpoch << ":" << kFirstDice + c << " with linespoints pt 7 title "
       << gp_quote(class_names[static_cast<size_t>(c) + 1]) << ", \\\n     ";
  gp << "'metrics.csv' skip 1 using " << kEpoch << ":" << mean_col
     << " with linespoints lw 3 pt 5 lc rgb 'black' title 'mean'\n"
        "set title 'GradScaler loss scale after each epoch'\n"
        "set ylabel 'loss scale'\n"
        "set autoscale y\n"
        "set logscale y 2\n"
        "set key top right\n"
        "plot 'metrics.csv' skip 1 using "
     << kEpoch << ":" << kScale
     << " with linespoints lw 2 pt 7 title 'loss scale'\n"
        "unset multiplot\n";

  CurvesFiles res;
  const std::string gp_path = dir + "/curves.gp";
  write_file_atomic(gp_path, gp.str());
  res.files.push_back(gp_path);
  if (!render) {
    res.note = "curves not rendered; render them with: cd " + dir + " && gnuplot curves.gp";
    return res;
  }
  if (!halfgrad::amp::gnuplot_available()) {
    res.note = "gnuplot is not installed (Debian: apt-get install gnuplot-nox); render the curves with: cd " + dir +
               " && gnuplot curves.gp";
    return res;
  }
  const std::string png = dir + "/curves.png", log = dir + "/curves.gnuplot.log";
  std::error_code ec;
  fs::remove(png, ec);
  if (halfgrad::amp::run_gnuplot(dir, "curves.gp", "curves.gnuplot.log") && fs::exists(png)) {
    fs::remove(log, ec);
    res.files.push_back(png);
    res.plotted = true;
  } else {
    res.note = "gnuplot failed on curves.gp (see " + log + ")";
  }
  return res;
}

}  // namespace unet3d_app
