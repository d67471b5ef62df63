// io_test_util.h - helpers shared by the io tests: a scratch directory, a nifticlib writer for any
// datatype (so the reader is tested against files it did not write itself), and a way to get an
// Error's message so a test can check that it names the file and says what was expected.
#pragma once
#include <doctest/doctest.h>
#include <nifti1_io.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace halfgrad::io::test {

/// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("halfgrad_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// "<dir>/<name>"
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// Writes a NIfTI-1 file with nifticlib: `dims` = {ndim, nx, ny, nz, nt, ...} (nifti's order, x
/// first), `datatype` a NIFTI_TYPE_* code, `bytes` the raw voxel buffer (x fastest), and the
/// header's scl_slope / scl_inter. nifticlib writes native byte order only.
inline void write_raw_nifti(const std::string& path, const std::vector<int>& dims, int datatype,
                            const void* bytes, float slope = 1.0f, float inter = 0.0f) {
  int d[8] = {0, 1, 1, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < dims.size() && i < 8; ++i) d[i] = dims[i];
  nifti_image* nim = nifti_make_new_nim(d, datatype, /*data_fill=*/1);
  REQUIRE(nim != nullptr);
  std::memcpy(nim->data, bytes, nim->nvox * nim->nbyper);
  nim->scl_slope = slope;
  nim->scl_inter = inter;
  nim->nifti_type = NIFTI_FTYPE_NIFTI1_1;
  REQUIRE(nifti_set_filenames(nim, path.c_str(), 0, 1) == 0);
  nifti_image_write(nim);
  nifti_image_free(nim);
  REQUIRE(std::filesystem::is_regular_file(path));
}

/// The message of the halfgrad::Error that fn() throws; fails the test (and returns "") when fn
/// returns normally or throws something else.
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const halfgrad::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("expected halfgrad::Error, got std::exception: " << e.what());
    return "";
  }
  FAIL_CHECK("expected halfgrad::Error, nothing was thrown");
  return "";
}

/// Checks that `msg` contains every one of `parts` (the file name, the expectation, ...).
inline void check_mentions(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, "\"" << msg << "\" lacks \"" << p << "\"");
}

/// Bytes of a file, and writing them back (to corrupt or truncate a valid file).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Writes `bytes` gzip-compressed (one member), as a .nii.gz writer would.
inline void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

/// The decompressed bytes of a .nii.gz file.
inline std::string read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[4096];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

/// Overwrites sizeof(T) bytes of a NIfTI header at byte `offset` with `value` (native order).
template <typename T>
void poke(std::string& bytes, size_t offset, T value) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

}  // namespace halfgrad::io::test
