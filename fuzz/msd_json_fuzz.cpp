// msd_json_fuzz.cpp - libFuzzer harness of the MSD dataset.json parser (io/msd.h load_msd): the
// input is written as <dir>/dataset.json in a temp folder that also holds imagesTr/{a,b}.nii.gz and
// labelsTr/{a,b}.nii.gz (tiny valid volumes), so that entries naming them get past the existence
// check; the pairs found are split and loaded with load_msd_case. Only halfgrad::Error may come out.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/msd.h"

using namespace halfgrad;
namespace fs = std::filesystem;

namespace {

std::string make_root() {
  const fs::path root = fs::temp_directory_path() / ("halfgrad_msd_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(root / "imagesTr");
  fs::create_directories(root / "labelsTr");
  std::vector<int64_t> lab(8);
  for (int i = 0; i < 8; ++i) lab[i] = i % 3;
  for (const char* n : {"a.nii.gz", "b.nii.gz"}) {
    io::write_nifti((root / "imagesTr" / n).string(), io::Volume{Tensor::full({2, 2, 2}, 1.5f), {1, 1, 1}, {}, {}});
    io::write_nifti((root / "labelsTr" / n).string(), io::Volume{Tensor::from_labels(lab, {2, 2, 2}), {1, 1, 1}, {}, {}});
  }
  return root.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = make_root();
  const std::string json_path = root + "/dataset.json";
  std::FILE* f = std::fopen(json_path.c_str(), "wb");
  if (!f) return 0;
  const bool written = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!written) return 0;
  try {
    const io::MsdDataset ds = io::load_msd(root);
    const io::MsdSplit split = io::split_every_fifth(ds.pairs);
    for (const io::MsdPair& p : ds.pairs) io::load_msd_case(p, ds.num_classes);
    (void)split;
  } catch (const Error&) {
  }
  return 0;
}
