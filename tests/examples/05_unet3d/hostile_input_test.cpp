// hostile_input_test.cpp - issue 30's table: inputs that used to give a silent wrong answer, replace
// a file or hang, each now a clear error that loses nothing (or, where the input is fine, the right
// answer). One TEST_CASE per row of the issue, on a tiny synthetic MSD dataset and the tiny recipe;
// the rows that need a process boundary (exit statuses, a FIFO that would hang, two processes in one
// run folder) are in cli_test.sh.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/allocator.h"
#include "core/safetensors.h"
#include "examples/05_unet3d/cli.h"
#include "examples/05_unet3d/distributed.h"
#include "examples/05_unet3d/predict.h"
#include "unet3d/run_folder.h"
#include "examples/05_unet3d/train.h"
#include "io/nifti.h"
#include "tests/check_error.h"
#include "tests/examples/05_unet3d/toy_msd.h"
#include "tests/temp_dir.h"

using namespace halfgrad;
using namespace unet3d_app;
using halfgrad::testing::check_error;
using halfgrad::testing::TempDir;
using namespace halfgrad::testing::toy_msd;
namespace fs = std::filesystem;

namespace {

// std::cerr collected for the life of the object (predict reports a volume's failure there).
struct CapturedStderr {
  std::ostringstream buf;
  std::streambuf* saved = std::cerr.rdbuf(buf.rdbuf());
  ~CapturedStderr() { std::cerr.rdbuf(saved); }
  std::string text() const { return buf.str(); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A trained tiny model in DIR/run (2 epochs on DIR/data), made once per test case.
struct Trained {
  TempDir dir{"halfgrad_hostile"};
  std::string data = dir.file("data"), run_dir = dir.file("run");
  Trained() {
    make_dataset(data, 5);
    REQUIRE(run(tiny_train(data, run_dir)) == 0);
  }
};

// Rewrites a safetensors file with tensor `name`'s element 0 set to `value`, through halfgrad's
// writer (so its checksums are right: only the finite check can refuse it).
void rewrite_with(const std::string& path, const std::string& name, float value) {
  safetensors::ReadLimits no_finite_check;
  no_finite_check.check_finite = false;  // the file may hold the last iteration's NaN
  safetensors::Contents c = safetensors::read_file(path, no_finite_check);
  bool found = false;
  for (auto& [n, t] : c.tensors)
    if (n == name) {
      t.data<float>()[0] = value;
      found = true;
    }
  REQUIRE(found);
  safetensors::write_file(path, c.tensors, c.metadata);
}

}  // namespace

TEST_CASE("hostile 1: a checkpoint with a NaN or inf weight is refused by eval and predict, naming the tensor; nothing is written") {
  Trained t;
  const std::string ckpt = t.run_dir + "/model.safetensors";
  for (const float bad : {NAN, INFINITY}) {
    rewrite_with(ckpt, "enc.0.0.weight", bad);
    check_error([&] { run({"eval", "--checkpoint", ckpt, "--data", t.data}); },
                {ckpt, "tensor 'enc.0.0.weight'", bad != bad ? "holds nan" : "holds inf", "expected finite values"});
    const std::string out = t.dir.file("pred.nii.gz"), probs = t.dir.file("probs.nii.gz");
    check_error([&] {
      run({"predict", "--checkpoint", ckpt, "--input", t.data + "/imagesTr/case_0.nii.gz", "--output", out,
           "--probabilities", probs, "--no-progress"});
    }, {ckpt, "tensor 'enc.0.0.weight'"});
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(probs));
  }
}

TEST_CASE("hostile 2: --resume refuses data that changed since the run trained, naming what changed") {
  TempDir dir("halfgrad_hostile");
  const std::string data = dir.file("d10"), run_dir = dir.file("run");
  make_dataset(data, 5);
  std::vector<std::string> first = tiny_train(data, run_dir);
  first.insert(first.end(), {"--stop-after-epoch", "1"});
  REQUIRE(run(first) == 0);
  const std::vector<std::string> resume = {"train", "--resume", run_dir, "--no-progress"};

  SUBCASE("an image replaced") {
    write_pair(data, "case_2.nii.gz", 999);
    check_error([&] { run(resume); }, {"the data is not what the run trained on", "imagesTr/case_2.nii.gz changed",
                                       "--allow-data-change"});
    CHECK(run({"train", "--resume", run_dir, "--no-progress", "--allow-data-change"}) == 0);
  }
  SUBCASE("five pairs added") {
    for (int i = 5; i < 10; ++i) write_pair(data, "case_" + std::to_string(i) + ".nii.gz", 100 + i);
    write_dataset_json(data, 10);
    check_error([&] { run(resume); }, {"dataset.json changed", "10 file(s) added: imagesTr/case_5.nii.gz"});
  }
  SUBCASE("another folder of the same name, from another working directory") {
    // The run was started with an absolute path; a relative one is made absolute when the run starts.
    const fs::path cwd = fs::current_path();
    TempDir elsewhere("halfgrad_hostile_cwd");
    make_dataset(elsewhere.file("d10"), 7);
    fs::current_path(elsewhere.path);
    const int status = run(resume);  // reads dir/d10, the run's, not ./d10
    fs::current_path(cwd);
    CHECK(status == 0);
  }
  SUBCASE("a relative --data is saved as an absolute path") {
    const fs::path cwd = fs::current_path();
    fs::current_path(dir.path);
    std::vector<std::string> rel = tiny_train("d10", "run_rel");
    rel.insert(rel.end(), {"--stop-after-epoch", "1"});
    const int status = run(rel);
    fs::current_path(cwd);
    REQUIRE(status == 0);
    const std::string meta = safetensors::read_header(dir.file("run_rel/training_state.safetensors")).metadata.at("halfgrad");
    CHECK(meta.find("\"data\":\"" + fs::absolute(data).lexically_normal().string() + "\"") != std::string::npos);
  }
  SUBCASE("the same files in a moved folder, named with --data") {
    fs::rename(data, dir.file("moved"));
    CHECK(run({"train", "--resume", run_dir, "--no-progress", "--data", dir.file("moved")}) == 0);
  }
}

TEST_CASE("hostile 3: a label map whose affine or spacing differs from its image's is refused by train, eval and predict --labels") {
  TempDir dir("halfgrad_hostile");
  const std::string data = dir.file("data");
  make_dataset(data, 5);
  const std::string label = data + "/labelsTr/case_1.nii.gz";
  const io::Volume lab = io::read_label_nifti(label);
  SUBCASE("flipped in x and y, shifted by 100 mm") {
    io::write_nifti(label, volume(lab.data, {-1, 0, 0, 100, 0, -1, 0, 100, 0, 0, 1, 0, 0, 0, 0, 1}));
  }
  SUBCASE("another voxel size") { io::write_nifti(label, volume(lab.data, {1.2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, {1, 1, 1.2})); }
  std::vector<std::string> parts = {"case_1.nii.gz", "are not on the same grid", "affine (voxel -> mm"};
  std::string predict_input = data + "/imagesTr/case_1.nii.gz", grid_text = "are not on the same grid";
  SUBCASE("the same sform, but a qform flipped in z (qfac -1) and shifted by 49 mm") {
    io::write_nifti(dir.file("plain.nii"), volume(lab.data));
    std::string bytes = slurp(dir.file("plain.nii"));
    float qfac, qoffset_x;
    std::memcpy(&qfac, &bytes[76], 4);  // pixdim[0]
    std::memcpy(&qoffset_x, &bytes[268], 4);
    qfac = -1;
    qoffset_x += 49;
    std::memcpy(&bytes[76], &qfac, 4);
    std::memcpy(&bytes[268], &qoffset_x, 4);
    fs::remove(label);
    const std::string label_nii = data + "/labelsTr/case_1.nii";
    std::ofstream(label_nii, std::ios::binary) << bytes;
    std::string text = slurp(data + "/dataset.json");
    text.replace(text.find("./labelsTr/case_1.nii.gz"), 24, "./labelsTr/case_1.nii");
    std::ofstream(data + "/dataset.json") << text;
    parts = {"case_1.nii", "agree in their sforms but not in their qforms", "ITK"};
    grid_text = "not in their qforms";
    fs::create_directories(dir.file("in"));
    predict_input = dir.file("in/case_1.nii");  // predict --labels looks for the input's file name
    io::write_nifti(predict_input, io::read_nifti(data + "/imagesTr/case_1.nii.gz"));
  }
  check_error([&] { run(tiny_train(data, dir.file("run"))); }, parts);
  CHECK_FALSE(fs::exists(dir.file("run")));
  Trained t;
  check_error([&] { run({"eval", "--checkpoint", t.run_dir, "--data", data}); }, parts);
  const std::string out = dir.file("case_1.nii.gz");
  const CapturedStderr err;
  const int status = run({"predict", "--checkpoint", t.run_dir, "--input", predict_input, "--output",
                          out, "--labels", data + "/labelsTr", "--no-progress"});
  CHECK(status == 1);  // that volume failed, and wrote nothing
  CHECK_FALSE(fs::exists(out));
  CHECK_MESSAGE(err.text().find(grid_text) != std::string::npos, err.text());
}

TEST_CASE("hostile 4: --grad-stats naming an existing file is refused unless --overwrite, and never a run file") {
  TempDir dir("halfgrad_hostile");
  const std::string data = dir.file("data");
  make_dataset(data, 5);
  const std::string other = dir.file("other.csv");
  std::ofstream(other) << "somebody's file\n";
  std::vector<std::string> args = tiny_train(data, dir.file("run"));
  args.insert(args.end(), {"--grad-stats", other});
  check_error([&] { run(args); }, {"--grad-stats " + other + " exists already", "--overwrite"});
  CHECK(slurp(other) == "somebody's file\n");
  CHECK_FALSE(fs::exists(dir.file("run")));
  std::vector<std::string> own = tiny_train(data, dir.file("run"));
  own.insert(own.end(), {"--grad-stats", dir.file("run/metrics.csv"), "--overwrite"});
  check_error([&] { run(own); }, {"is the run's own metrics.csv"});
  args.push_back("--overwrite");
  CHECK(run(args) == 0);
  CHECK(slurp(other).rfind("step,param", 0) == 0);
  // A folder that cannot take the file is found at start, before the data loads and the run folder is made.
  std::vector<std::string> nowhere = tiny_train("/nonexistent/data", dir.file("run2"));
  nowhere.insert(nowhere.end(), {"--grad-stats", dir.file("no_such_folder/gs.csv")});
  check_error([&] { run(nowhere); }, {"--grad-stats", "cannot write into", "no such folder"});
  CHECK_FALSE(fs::exists(dir.file("run2")));
}

TEST_CASE("hostile 5: a run folder in use by another process is refused at start, naming the process") {
  TempDir dir("halfgrad_hostile");
  const std::string data = dir.file("data"), run_dir = dir.file("run");
  make_dataset(data, 5);
  fs::create_directories(run_dir);
  {
    const RunFolderLock held(run_dir);  // as the other process would hold it (flock is per open file)
    check_error([&] { run(tiny_train(data, run_dir)); },
                {run_dir + " is in use by process " + std::to_string(::getpid()), "choose another --out"});
    CHECK_FALSE(fs::exists(run_dir + "/metrics.csv"));
  }
  CHECK(run(tiny_train(data, run_dir)) == 0);  // released: the lock file left behind blocks nothing
  std::vector<std::string> stop = tiny_train(data, dir.file("run2"));
  stop.insert(stop.end(), {"--stop-after-epoch", "1"});
  REQUIRE(run(stop) == 0);
  const RunFolderLock held(dir.file("run2"));
  check_error([&] { run({"train", "--resume", dir.file("run2"), "--no-progress"}); }, {"is in use by process"});
}

TEST_CASE("hostile 6: a training state with a weight edited to 1e30 is refused on resume by its checksum") {
  TempDir dir("halfgrad_hostile");
  const std::string data = dir.file("data"), run_dir = dir.file("run");
  make_dataset(data, 5);
  std::vector<std::string> args = tiny_train(data, run_dir);
  args.insert(args.end(), {"--stop-after-epoch", "1"});
  REQUIRE(run(args) == 0);
  const std::string state = run_dir + "/training_state.safetensors";
  const safetensors::Header h = safetensors::read_header(state);
  CHECK(h.has_checksums);
  const safetensors::Entry* e = nullptr;
  for (const auto& entry : h.entries)
    if (entry.name == "model.enc.0.0.weight") e = &entry;
  REQUIRE(e != nullptr);
  std::string bytes = slurp(state);
  const float big = 1e30f;
  std::memcpy(&bytes[h.buffer_offset + e->begin], &big, 4);  // in place: the checksum is now stale
  std::ofstream(state, std::ios::binary) << bytes;
  check_error([&] { run({"train", "--resume", run_dir, "--no-progress"}); },
              {state, "tensor 'model.enc.0.0.weight'", "the file's checksum says", "corrupt or was changed"});
}

TEST_CASE("hostile 6b: a checksum that does not match, or a metadata edit, is named; a file without checksums still loads") {
  TempDir dir("halfgrad_hostile");
  const std::string path = dir.file("t.safetensors");
  safetensors::write_file(path, {{"w", Tensor::ones({3})}}, {{"note", "a"}});
  CHECK(safetensors::read_file(path).checksummed);
  std::string bytes = slurp(path);
  const size_t at = bytes.find("\"note\":\"a\"");
  REQUIRE(at != std::string::npos);
  bytes[at + 8] = 'b';  // the same length: only the checksum can tell
  std::ofstream(path, std::ios::binary) << bytes;
  check_error([&] { safetensors::read_header(path); }, {path, "the metadata hashes to", "changed after it was written"});
  // A PyTorch-style file (no halfgrad_xxh3): loads, and says it was not verified.
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(&file[0], &n, 8);
  file += header;
  const float one = 1.0f;
  file.append(reinterpret_cast<const char*>(&one), 4);
  std::ofstream(dir.file("torch.safetensors"), std::ios::binary) << file;
  const safetensors::Contents c = safetensors::read_file(dir.file("torch.safetensors"));
  CHECK_FALSE(c.checksummed);
  CHECK(c.tensors.at(0).second.data<float>()[0] == 1.0f);
}

TEST_CASE("hostile 7: metadata claiming a larger model than the tensors hold is refused before the model is built") {
  Trained t;
  const std::string ckpt = t.run_dir + "/model.safetensors";
  safetensors::Contents c = safetensors::read_file(ckpt);
  nlohmann::json meta = nlohmann::json::parse(c.metadata.at("halfgrad"));
  meta["model"]["channels"] = {4096};
  meta["model"]["bottleneck"] = 4096;
  c.metadata["halfgrad"] = meta.dump();
  safetensors::write_file(ckpt, c.tensors, c.metadata);
  cpu_reset_peak_stats();
  const uint64_t before = cpu_allocator_stats().allocated_bytes;
  check_error([&] { run({"eval", "--checkpoint", ckpt, "--data", t.data}); },
              {ckpt, "the metadata describes a UNet3d with channels {4096}, bottleneck 4096",
               "but the file's tensors are those of channels {4, 8}, bottleneck 16"});
  CHECK(cpu_allocator_stats().peak_allocated_bytes - before < (uint64_t{64} << 20));  // no 11 GB model first
}

TEST_CASE("hostile 8: predict --overlap is capped at 0.9 on the command line") {
  for (const char* v : {"0.99", "0.999999999999", "1"}) {
    CommandLine cli;
    CHECK_THROWS_WITH_AS(cli.parse({"predict", "--checkpoint", "c", "--input", "i", "--output", "o", "--overlap", v}),
                         doctest::Contains("out of range; expected a finite number in [0, 0.9]"), CLI::ValidationError);
  }
  CommandLine cli;
  cli.parse({"predict", "--checkpoint", "c", "--input", "i", "--output", "o", "--overlap", "0.9"});
  CHECK(cli.predict_args.overlap == 0.9);
}

TEST_CASE("hostile 10: eval --overlay refuses to replace a PNG unless --overwrite") {
  Trained t;
  const std::string dir = t.dir.file("overlay");
  fs::create_directories(dir);
  const std::string png = dir + "/case_4.png";  // the validation volume of 5 pairs is the 5th
  std::ofstream(png) << "somebody's picture";
  check_error([&] { run({"eval", "--checkpoint", t.run_dir, "--overlay", dir, "--data", t.data}); },
              {png + " exists already", "--overwrite"});
  CHECK(slurp(png) == "somebody's picture");
  CHECK(run({"eval", "--checkpoint", t.run_dir, "--overlay", dir, "--data", t.data, "--overwrite"}) == 0);
  CHECK(slurp(png).substr(1, 3) == "PNG");
}

TEST_CASE("hostile 11: each message says what is true") {
  SUBCASE("the precision words are command-line errors (halfgrad::Error from parse: exit status 2)") {
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--opt-level", "O9"}, "--opt-level: unknown opt level 'O9'"},
        {{"--amp", "--opt-level", "O2"}, "--amp means --opt-level O1, but --opt-level O2 was given too"},
        {{"--amp-dtype", "bf16"}, "--amp-dtype bf16 chooses autocast's lower dtype, so it needs --amp"},
        {{"--amp", "--fp32-op", "bogus"}, "--fp32-op bogus"},
        {{"--amp", "--fp32-op", "relu"}, "relu cannot be moved to FP32"},
        {{"--fp32-module", "head"}, "need --opt-level O1"}};
    for (const auto& [words, text] : cases) {
      std::vector<std::string> args = {"train", "--out", "/nonexistent/x"};
      args.insert(args.end(), words.begin(), words.end());
      CommandLine cli;
      CHECK_THROWS_WITH_AS(cli.parse(args), doctest::Contains(text.c_str()), Error);
    }
  }
  SUBCASE("--overlap 1e-400 underflows to 0, which is in range; --lr 1e-400 underflows to 0, which is not") {
    CommandLine cli;
    cli.parse({"predict", "--checkpoint", "c", "--input", "i", "--output", "o", "--overlap", "1e-400"});
    CHECK(cli.predict_args.overlap == 0.0);
    CommandLine cli2;
    CHECK_THROWS_WITH_AS(cli2.parse({"train", "--out", "x", "--lr", "1e-400"}),
                         doctest::Contains("'1e-400' underflows to 0 in double precision"), CLI::ValidationError);
    CommandLine cli3;
    CHECK_THROWS_WITH_AS(cli3.parse({"train", "--out", "x", "--lr", "1e400"}),
                         doctest::Contains("'1e400' overflows double precision"), CLI::ValidationError);
  }
  SUBCASE("a 2-D image is called 2-D, not a channel count") {
    Trained t;
    const std::string img = t.dir.file("flat.nii");
    io::write_nifti(img, volume(Tensor::zeros({1, 16, 16})));
    std::string bytes = slurp(img);
    const int16_t two = 2;  // dim[0], at byte 40 of the NIfTI-1 header: a 2-D image
    std::memcpy(&bytes[40], &two, 2);
    std::ofstream(img, std::ios::binary) << bytes;
    const CapturedStderr err;
    const int status = run({"predict", "--checkpoint", t.run_dir, "--input", img, "--output", t.dir.file("out.nii.gz"),
                            "--no-progress"});
    CHECK(status == 1);
    CHECK_MESSAGE(err.text().find("is 2-D (extents 16x16); expected a 3-D volume") != std::string::npos, err.text());
  }
  SUBCASE("a bad recipe in a checkpoint's metadata is named as the file's field, not as --config") {
    Trained t;
    const std::string ckpt = t.run_dir + "/model.safetensors";
    safetensors::Contents c = safetensors::read_file(ckpt);
    nlohmann::json meta = nlohmann::json::parse(c.metadata.at("halfgrad"));
    meta["recipe"] = "bogus";
    c.metadata["halfgrad"] = meta.dump();
    safetensors::write_file(ckpt, c.tensors, c.metadata);
    check_error([&] { run({"eval", "--checkpoint", ckpt, "--data", t.data}); },
                {ckpt, "field 'recipe': unknown recipe 'bogus'"});
  }
  SUBCASE("a duplicate key in dataset.json is refused, as in a checkpoint's header") {
    TempDir dir("halfgrad_hostile");
    make_dataset(dir.file("data"), 5);
    std::string text = slurp(dir.file("data/dataset.json"));
    text.insert(1, "\"training\": [],");
    std::ofstream(dir.file("data/dataset.json")) << text;
    check_error([&] { run(tiny_train(dir.file("data"), dir.file("run"))); },
                {"dataset.json", "key \"training\" appears twice"});
  }
  SUBCASE("an --out that cannot be made is found at start, before the data loads") {
    TempDir dir("halfgrad_hostile");
    std::ofstream(dir.file("a_file")) << "x";
    check_error([&] { run(tiny_train("/nonexistent/data", dir.file("a_file/run"))); },
                {"cannot create the run folder in " + dir.file("a_file"), "not a directory"});
  }
}

// Found by trying to break the rows above (a fresh attacker's pass over the program, 2026-12-06).
TEST_CASE("hostile 12: a class name that would break out of a CSV column or a gnuplot string is refused") {
  TempDir dir("halfgrad_hostile");
  make_dataset(dir.file("data"), 5);
  const std::string evil = dir.file("pwned");
  for (const std::string& name : {std::string("a\nsystem(\"touch ") + evil + "\")\n#", std::string("dice,1"),
                                 std::string("q\"uote"), std::string()}) {
    nlohmann::json ds = nlohmann::json::parse(slurp(dir.file("data/dataset.json")));
    ds["labels"]["1"] = name;
    std::ofstream(dir.file("data/dataset.json")) << ds.dump(1);
    check_error([&] { run(tiny_train(dir.file("data"), dir.file("run"))); },
                {"dataset.json", "labels", "is not a class name"});
  }
  CHECK_FALSE(fs::exists(evil));
  CHECK_FALSE(fs::exists(dir.file("run/model.safetensors")));
}

TEST_CASE("hostile 13: symbolic links planted in a run folder are never written through") {
  TempDir dir("halfgrad_hostile");
  make_dataset(dir.file("data"), 5);
  const std::string run_dir = dir.file("run"), victim = dir.file("victim.txt");
  fs::create_directories(run_dir);
  std::ofstream(victim) << "somebody's file";
  SUBCASE("the lock file") {
    fs::create_symlink(victim, run_dir + "/" + RunFolderLock::kFileName);
    check_error([&] { run(tiny_train(dir.file("data"), run_dir)); }, {".halfgrad.lock is a symbolic link", "remove it"});
  }
  SUBCASE("a stale temp file (dangling) and the gnuplot log: removed with --overwrite, the targets untouched") {
    fs::create_symlink(dir.file("outside_model.bin"), run_dir + "/model.safetensors.tmp");
    fs::create_symlink(victim, run_dir + "/curves.gnuplot.log");
    std::vector<std::string> args = tiny_train(dir.file("data"), run_dir);
    check_error([&] { run(args); }, {"already holds a run", "curves.gnuplot.log"});  // a run file: refused
    args.push_back("--overwrite");
    REQUIRE(run(args) == 0);
    CHECK_FALSE(fs::exists(dir.file("outside_model.bin")));
    CHECK_FALSE(fs::is_symlink(run_dir + "/model.safetensors"));
    CHECK(fs::is_regular_file(run_dir + "/model.safetensors"));
  }
  CHECK(slurp(victim) == "somebody's file");
}

TEST_CASE("hostile 14: two volumes that would write one file are refused before either runs") {
  Trained t;
  const std::string in = t.dir.file("in");
  fs::create_directories(in);
  fs::copy_file(t.data + "/imagesTr/case_0.nii.gz", in + "/a.nii.gz");
  io::write_nifti(in + "/a.nii", io::read_nifti(in + "/a.nii.gz"));
  check_error([&] {
    run({"predict", "--checkpoint", t.run_dir, "--input", in, "--output", t.dir.file("out"), "--overlay",
         t.dir.file("ov"), "--no-progress"});
  }, {"would both be written to", "a.png", "one output file per input volume"});
  CHECK_FALSE(fs::exists(t.dir.file("out")));
}

TEST_CASE("hostile 15: an empty path is a command-line error, not an option left out") {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"train", "--data", "", "--out", "x"}, {"train", "--resume", ""},
        {"train", "--out", "x", "--grad-stats", ""}, {"eval", "--checkpoint", "c", "--overlay", ""},
        {"predict", "--checkpoint", "c", "--input", "i", "--output", "o", "--labels", ""}}) {
    CommandLine cli;
    CHECK_THROWS_WITH_AS(cli.parse(args), doctest::Contains("is empty; expected a path"), CLI::ValidationError);
  }
}
