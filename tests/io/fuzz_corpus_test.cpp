// The fuzzers' seed corpora (fuzz/corpus/, written by fuzz/make_corpus.cpp) read as valid files,
// and every input a fuzzer ever crashed on (tests/data/fuzz/<harness>/, one file each) now ends
// in a halfgrad::Error or a successful read - never another exception or a crash. tools/fuzz.sh
// keeps a finding as <work>/<harness>/crash-*; copy it into tests/data/fuzz/<harness>/.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/msd.h"
#include "io/nifti.h"
#include "tests/io/io_test_util.h"

using namespace halfgrad;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path().string());
  return out;
}

bool is_gzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

}  // namespace

TEST_CASE("io fuzz corpus: every NIfTI seed reads as an image and a label map; findings end in an Error") {
  const std::vector<std::string> seeds = files_in(HALFGRAD_SOURCE_DIR "/fuzz/corpus/nifti");
  CHECK(seeds.size() >= 4);
  for (const std::string& path : seeds) {
    CAPTURE(path);
    const std::string bytes = io::test::read_bytes(path);
    const std::string name = is_gzip(bytes) ? "seed.nii.gz" : "seed.nii";
    CHECK(io::read_nifti_buffer(bytes.data(), bytes.size(), name).data.numel() > 0);
    CHECK(io::read_nifti(path).data.numel() > 0);
  }
  CHECK(io::read_label_nifti(HALFGRAD_SOURCE_DIR "/fuzz/corpus/nifti/label_uint8_4x3x2.nii.gz", 3).data.numel() == 24);
  for (const std::string& path : files_in(HALFGRAD_SOURCE_DIR "/tests/data/fuzz/nifti_fuzz")) {
    CAPTURE(path);
    const std::string bytes = io::test::read_bytes(path);
    const std::string name = is_gzip(bytes) ? "finding.nii.gz" : "finding.nii";
    try {
      io::read_nifti_buffer(bytes.data(), bytes.size(), name);
    } catch (const Error&) {
    }
    try {
      io::read_label_nifti_buffer(bytes.data(), bytes.size(), name, 4);
    } catch (const Error&) {
    }
  }
}

TEST_CASE("io fuzz corpus: every dataset.json seed loads next to imagesTr/{a,b} and labelsTr/{a,b}") {
  io::test::TempDir dir;
  fs::create_directories(dir.file("imagesTr"));
  fs::create_directories(dir.file("labelsTr"));
  const std::vector<int64_t> lab = {0, 1, 0, 1, 0, 1, 0, 1};
  for (const char* n : {"a.nii.gz", "b.nii.gz"}) {
    io::write_nifti(dir.file(std::string("imagesTr/") + n), io::Volume{Tensor::full({2, 2, 2}, 1.5), {1, 1, 1}, {}, {}});
    io::write_nifti(dir.file(std::string("labelsTr/") + n), io::Volume{Tensor::from_labels(lab, {2, 2, 2}), {1, 1, 1}, {}, {}});
  }
  const std::vector<std::string> seeds = files_in(HALFGRAD_SOURCE_DIR "/fuzz/corpus/msd_json");
  CHECK(seeds.size() >= 2);
  for (const std::string& path : seeds) {
    CAPTURE(path);
    io::test::write_bytes(dir.file("dataset.json"), io::test::read_bytes(path));
    const io::MsdDataset ds = io::load_msd(dir.file(""));
    CHECK(!ds.pairs.empty());
    for (const io::MsdPair& p : ds.pairs) CHECK(io::load_msd_case(p, ds.num_classes).label.data.numel() == 8);
  }
  for (const std::string& path : files_in(HALFGRAD_SOURCE_DIR "/tests/data/fuzz/msd_json_fuzz")) {
    CAPTURE(path);
    io::test::write_bytes(dir.file("dataset.json"), io::test::read_bytes(path));
    try {
      io::load_msd(dir.file(""));
    } catch (const Error&) {
    }
  }
}
