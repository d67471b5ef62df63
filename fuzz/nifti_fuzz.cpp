// nifti_fuzz.cpp - libFuzzer harness of the NIfTI reader (io/nifti.h): the input is a whole file,
// plain .nii bytes or a .nii.gz gzip stream (told apart by the gzip magic, as the reader does). Each
// input is read as an image and as a label map (classes [0, 4)), from memory and, through a file in
// the temp folder, by path. The reader may only throw halfgrad::Error: any other exception, a
// sanitizer report, a leak or a crash is a finding. Build and run: tools/fuzz.sh.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/nifti.h"

using namespace halfgrad;

namespace {

// 2^22 voxels (16 MiB of float32) bound each run's memory; the default limit is tested in
// tests/io/nifti_test.cpp.
io::NiftiReadOptions fuzz_options() {
  io::NiftiReadOptions o;
  o.max_voxels = int64_t{1} << 22;
  return o;
}

std::string temp_path(const char* ext) {
  return (std::filesystem::temp_directory_path() / ("halfgrad_nifti_fuzz_" + std::to_string(::getpid()) + ext)).string();
}

template <typename F>
void expect_only_errors(F f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const std::string name = gz ? "fuzz.nii.gz" : "fuzz.nii";
  const io::NiftiReadOptions o = fuzz_options();
  expect_only_errors([&] { io::read_nifti_buffer(data, size, name, o); });
  expect_only_errors([&] { io::read_label_nifti_buffer(data, size, name, 4, o); });

  static const std::string path = temp_path(".nii"), path_gz = temp_path(".nii.gz");
  const std::string& p = gz ? path_gz : path;
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) return 0;
  const bool written = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (written) expect_only_errors([&] { io::read_nifti(p, o); });
  return 0;
}
