// Tests of unet3d/run_folder.h and metrics.h's MetricsTable: a run folder holding an
// earlier run is refused unless --overwrite; stale temp files are removed with a note; metrics.csv's
// columns, and its atomic write.
#include "unet3d/run_folder.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "examples/05_unet3d/metrics.h"
#include "nn/checkpoint.h"
#include "nn/conv3d.h"
#include "tests/check_error.h"
#include "tests/io/io_test_util.h"

using halfgrad::io::test::TempDir;
using halfgrad::testing::check_error;
namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A run folder as halfgrad-unet3d train leaves it after `epochs` epochs: model.safetensors whose
// metadata says the epoch, and metrics.csv with that many rows.
void write_run(const TempDir& dir, int64_t epochs) {
  halfgrad::nn::Conv3d conv(halfgrad::nn::Conv3dOptions(1, 2, 3));
  halfgrad::nn::save_checkpoint(dir.file("model.safetensors"), conv, {{"epoch", epochs}, {"recipe", "cpu"}});
  unet3d_app::MetricsTable t({"background", "a"});
  for (int64_t e = 1; e <= epochs; ++e) {
    unet3d_app::EpochMetrics m;
    m.epoch = e;
    t.add(m);
  }
  write_text(dir.file("metrics.csv"), t.csv());
}

}  // namespace

TEST_CASE("unet3d run folder: an earlier run is refused, naming the folder, its checkpoint's epoch and --overwrite") {
  TempDir dir;
  write_run(dir, 3);
  const std::string before = read_text(dir.file("metrics.csv"));
  const std::string d = dir.file("");
  for (auto* f : {+[](const std::string& p) { unet3d_app::check_run_folder(p, false); },
                  +[](const std::string& p) { unet3d_app::prepare_run_folder(p, false); }})
    check_error([&] { f(d); }, {"halfgrad-unet3d train: --out " + d, "already holds a run",
                                "model.safetensors (epoch 3 of recipe \"cpu\"", "metrics.csv (3 epoch rows)",
                                "Pass --overwrite to replace it, or choose another --out folder"});
  CHECK(read_text(dir.file("metrics.csv")) == before);  // refusing changes nothing
  CHECK(fs::exists(dir.file("model.safetensors")));

  // A precision report alone is a run's file too; an unreadable checkpoint is still somebody's.
  TempDir other;
  write_text(other.file("loss_scale.csv"), "step,loss_scale\n");
  write_text(other.file("model.safetensors"), "not a checkpoint");
  check_error([&] { unet3d_app::check_run_folder(other.file(""), false); },
              {"already holds a run", "model.safetensors (unreadable, 16 B)", "loss_scale.csv"});
}

TEST_CASE("unet3d run folder: --overwrite removes the earlier run's files and says so") {
  TempDir dir;
  write_run(dir, 2);
  write_text(dir.file("notes.txt"), "mine");  // not a run file: stays
  const std::vector<std::string> notes = unet3d_app::prepare_run_folder(dir.file(""), true);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("--overwrite: removed the earlier run in") != std::string::npos);
  CHECK(notes[0].find("model.safetensors (epoch 2") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.file("model.safetensors")));
  CHECK_FALSE(fs::exists(dir.file("metrics.csv")));
  CHECK(read_text(dir.file("notes.txt")) == "mine");
}

TEST_CASE("unet3d run folder: stale model.safetensors.tmp / metrics.csv.tmp are removed with a one-line note") {
  TempDir dir;
  write_text(dir.file("model.safetensors.tmp"), std::string(3000, 'x'));
  write_text(dir.file("metrics.csv.tmp"), "epoch\n");
  unet3d_app::check_run_folder(dir.file(""), false);  // temp files alone are no run
  const std::vector<std::string> notes = unet3d_app::prepare_run_folder(dir.file(""), false);
  REQUIRE(notes.size() == 2);
  CHECK(notes[0] == "removed " + dir.file("model.safetensors.tmp") + " (2.9 KiB), left by an interrupted write");
  CHECK(notes[1] == "removed " + dir.file("metrics.csv.tmp") + " (6 B), left by an interrupted write");
  CHECK_FALSE(fs::exists(dir.file("model.safetensors.tmp")));
  CHECK_FALSE(fs::exists(dir.file("metrics.csv.tmp")));
  CHECK(unet3d_app::prepare_run_folder(dir.file("fresh/sub"), false).empty());  // absent: nothing to do
}

TEST_CASE("unet3d run folder: --out naming a file is refused") {
  TempDir dir;
  write_text(dir.file("f"), "x");
  check_error([&] { unet3d_app::check_run_folder(dir.file("f"), true); },
              {"--out " + dir.file("f"), "is not a directory"});
}

TEST_CASE("unet3d metrics.csv: columns with nonfinite_steps, rows, atomic write, JSON copy") {
  unet3d_app::MetricsTable t({"background", "anterior", "posterior"});
  unet3d_app::EpochMetrics m;
  m.epoch = 1;
  m.train_loss = 0.75;
  m.skipped_steps = 3;
  m.nonfinite_steps = 2;
  m.loss_scale = 32768;
  m.lr = 0.001;
  m.dice = {0.5, 0.25};
  m.mean_dice = 0.375;
  m.epoch_seconds = 9.126;
  m.elapsed_seconds = 9.126;
  t.add(m);
  m.epoch = 2;
  m.dice.clear();  // an epoch without validation: empty Dice cells
  m.elapsed_seconds = 18.25;
  t.add(m);
  const std::string csv = t.csv();
  CHECK(csv ==
        "epoch,train_loss,skipped_steps,nonfinite_steps,loss_scale,lr,dice_anterior,dice_posterior,mean_dice,"
        "epoch_seconds,elapsed_seconds\n"
        "1,0.75,3,2,32768,0.001,0.5000,0.2500,0.3750,9.13,9.13\n"
        "2,0.75,3,2,32768,0.001,,,,9.13,18.25\n");
  // The checkpoint's copy leaves out the two time columns: same seed, same checkpoint bytes.
  const nlohmann::json j = t.to_json();
  CHECK(j.at("header") == "epoch,train_loss,skipped_steps,nonfinite_steps,loss_scale,lr,dice_anterior,"
                          "dice_posterior,mean_dice");
  REQUIRE(j.at("rows").size() == 2);
  CHECK(j.at("rows")[0] == "1,0.75,3,2,32768,0.001,0.5000,0.2500,0.3750");
  CHECK(j.at("rows")[1] == "2,0.75,3,2,32768,0.001,,,");
  m.dice = {0.5};
  check_error([&] { t.add(m); }, {"metrics.csv: epoch 2 has 1 Dice values", "expected 2"});

  TempDir dir;
  unet3d_app::write_file_atomic(dir.file("metrics.csv"), csv);
  CHECK(read_text(dir.file("metrics.csv")) == csv);
  CHECK_FALSE(fs::exists(dir.file("metrics.csv.tmp")));
  check_error([&] { unet3d_app::write_file_atomic(dir.file("no/such/dir/metrics.csv"), csv); },
              {"cannot write", "no/such/dir/metrics.csv.tmp"});
}
