// write_training_curves (examples/05_unet3d/curves.h): curves.gp is written for metrics.csv's columns
// and, where gnuplot is on the PATH, renders curves.png: a real PNG (signature, IHDR) of 900 x 1000.
#include "examples/05_unet3d/curves.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "amp/precision_report.h"
#include "examples/05_unet3d/metrics.h"
#include "unet3d/run_folder.h"

using namespace unet3d_app;
namespace fs = std::filesystem;

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}
}  // namespace

TEST_CASE("unet3d curves: curves.gp reads metrics.csv's columns; with gnuplot curves.png is a 900x1000 PNG") {
  const fs::path dir = fs::temp_directory_path() / ("hg_curves_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<std::string> names = {"background", "Anterior", "Posterior"};
  MetricsTable table(names);
  for (int64_t e = 1; e <= 4; ++e) {
    EpochMetrics m;
    m.epoch = e;
    m.train_loss = 1.0 / static_cast<double>(e);
    m.loss_scale = 65536.0 / static_cast<double>(1 << e);
    m.skipped_steps = e;
    m.lr = 1e-3;
    if (e % 2 == 0) {  // epochs 1 and 3 did not validate: empty Dice fields
      m.dice = {0.1 * static_cast<double>(e), 0.2 * static_cast<double>(e)};
      m.mean_dice = 0.15 * static_cast<double>(e);
    }
    table.add(m);
  }
  write_file_atomic((dir / "metrics.csv").string(), table.csv());

  const CurvesFiles res = write_training_curves(dir.string(), names);
  const std::string gp = slurp((dir / "curves.gp").string());
  CHECK(gp.find("set output 'curves.png'") != std::string::npos);
  CHECK(gp.find("using 1:2 ") != std::string::npos);                     // train_loss
  CHECK(gp.find("using 1:7 with linespoints pt 7 title 'Anterior'") != std::string::npos);
  CHECK(gp.find("using 1:8 with linespoints pt 7 title 'Posterior'") != std::string::npos);
  CHECK(gp.find("using 1:9 with linespoints lw 3") != std::string::npos);  // mean_dice
  CHECK(gp.find("using 1:5 with linespoints") != std::string::npos);             // loss_scale
  for (const char* f : {"curves.gp", "curves.png"})
    CHECK(std::find(run_file_names().begin(), run_file_names().end(), f) != run_file_names().end());
  if (!halfgrad::amp::gnuplot_available()) {
    CHECK_FALSE(res.plotted);
    CHECK(res.note.find("gnuplot is not installed") != std::string::npos);
    std::cout << "skipped: curves.png rendering: gnuplot not on the PATH\n";
  } else {
    REQUIRE_MESSAGE(res.plotted, res.note);
    const std::string png = slurp((dir / "curves.png").string());
    REQUIRE(png.size() > 33);
    CHECK(png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
    CHECK(png.compare(12, 4, "IHDR") == 0);
    CHECK(be32(png, 16) == 900);
    CHECK(be32(png, 20) == 1000);
    CHECK_FALSE(fs::exists(dir / "curves.gnuplot.log"));
  }
  fs::remove_all(dir);
}
