// curves.h - the training curves of a run, drawn after training from its metrics.csv (metrics.h):
// RUN_DIR/curves.png, three panels over the epochs: the training loss, the validation Dice (each
// foreground class and the mean), and GradScaler's loss scale (log2 axis; 1 for a run without one).
//
// Drawn by gnuplot (Debian: gnuplot-nox, pngcairo terminal), like amp/precision_report.h's plots:
// curves.gp is written into the run folder and reads metrics.csv by relative name, so that
// `cd RUN_DIR && gnuplot curves.gp` redraws the figure (after editing it, or on another machine).
// When gnuplot is not on the PATH only curves.gp is written, and the result's note says how to render.
#pragma once
#include <string>
#include <vector>

namespace unet3d_app {

struct CurvesFiles {
  std::vector<std::string> files;  // paths written: curves.gp, and curves.png when rendered
  bool plotted = false;            // gnuplot ran and wrote curves.png
  std::string note;                // why there is no PNG and how to make it, when plotted is false
};

/// Writes `dir`/curves.gp for the metrics.csv columns of `class_names` (class_names[0] is the
/// background, without a column) and, when `render` and gnuplot is on the PATH, runs it to make
/// `dir`/curves.png (900 x 1000 pixels). Throws halfgrad::Error naming the file when curves.gp cannot
/// be written; a gnuplot failure is not an error (the note names curves.gnuplot.log, kept then).
CurvesFiles write_training_curves(const std::string& dir, const std::vector<std::string>& class_names,
                                  bool render = true);

}  // namespace unet3d_app
