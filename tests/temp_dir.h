// temp_dir.h - a fresh directory per test case under the system's temp folder, removed at the end.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace halfgrad::testing {

struct TempDir {
  /// TEMP/<prefix>_<pid>_<n>, created now; `prefix` names the test file's subject.
  explicit TempDir(const std::string& prefix) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::filesystem::path path;
};

}  // namespace halfgrad::testing
