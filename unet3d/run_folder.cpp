#include "unet3d/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "nn/checkpoint.h"

namespace unet3d_app {

namespace fs = std::filesystem;

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

static uint64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<uint64_t>(n);
}

RunFolderContents inspect_run_folder(const std::string& dir) {
  RunFolderContents c;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return c;
  // symlink_status: a link counts as the entry it is, dangling or not (never followed out of the folder).
  const auto present = [&](const std::string& name) { return fs::exists(fs::symlink_status(fs::path(dir) / name, ec)); };
  for (const std::string& name : run_file_names()) {
    if (present(name)) c.run_files.push_back(name);
    if (present(name + ".tmp")) c.stale_temps.push_back(name + ".tmp");
  }
  const fs::path ckpt = fs::path(dir) / "model.safetensors";
  if (fs::exists(ckpt, ec)) {
    std::ostringstream os;
    os << "model.safetensors (";
    try {
      const nlohmann::json meta = halfgrad::nn::read_checkpoint_metadata(ckpt.string());
      if (meta.is_object() && meta.contains("epoch")) os << "epoch " << meta.at("epoch").dump();
      else os << "no epoch in its metadata";
      if (meta.is_object() && meta.contains("recipe")) os << " of recipe " << meta.at("recipe").dump();
    } catch (const halfgrad::Error&) {
      os << "unreadable";  // the folder is refused all the same: it is somebody's file
    }
    os << ", " << human_bytes(file_size_or_zero(ckpt)) << ")";
    c.checkpoint_summary = os.str();
  }
  const fs::path csv = fs::path(dir) / "metrics.csv";
  if (fs::exists(csv, ec)) {
    try {  // read without blocking: a FIFO of that name is reported, not waited on
      std::istringstream in(halfgrad::read_regular_file(csv.string(), size_t{64} << 20, csv.string(), "a metrics.csv"));
      std::string line;
      int64_t rows = -1;  // the header is not a row
      while (std::getline(in, line))
        if (!line.empty()) ++rows;
      c.metrics_summary = "metrics.csv (" + std::to_string(std::max<int64_t>(rows, 0)) + " epoch rows)";
    } catch (const halfgrad::Error&) {
      c.metrics_summary = "metrics.csv (unreadable)";  // refused all the same: it is somebody's file
    }
  }
  return c;
}

// "model.safetensors (epoch 12 of recipe "cpu", 12.7 MiB), metrics.csv (12 epoch rows), loss_scale.csv"
static std::string describe_contents(const RunFolderContents& c) {
  std::vector<std::string> parts;
  if (!c.checkpoint_summary.empty()) parts.push_back(c.checkpoint_summary);
  if (!c.metrics_summary.empty()) parts.push_back(c.metrics_summary);
  for (const std::string& f : c.run_files)
    if (f != "model.safetensors" && f != "metrics.csv") parts.push_back(f);
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s;
}

void check_run_folder(const std::string& dir, bool overwrite) {
  std::error_code ec;
  HG_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec),
           "halfgrad-unet3d train: --out " << dir << " exists and is not a directory; expected a run folder");
  if (!fs::exists(dir, ec)) {  // made once the data has loaded: its nearest existing parent must take it
    fs::path parent = fs::absolute(dir, ec).lexically_normal();
    while (parent.has_parent_path() && parent != parent.parent_path() && !fs::exists(parent, ec)) parent = parent.parent_path();
    const bool is_dir = fs::is_directory(parent, ec);
    const bool writable = is_dir && ::access(parent.c_str(), W_OK | X_OK) == 0;
    const int err = errno;
    HG_CHECK(writable, "halfgrad-unet3d train: --out " << dir << ": cannot create the run folder in " << parent.string()
                                                       << " (" << (is_dir ? std::strerror(err) : "not a directory")
                                                       << "); expected a writable directory path");
  }
  if (overwrite) return;
  const RunFolderContents c = inspect_run_folder(dir);
  HG_CHECK(c.run_files.empty(), "halfgrad-unet3d train: --out " << dir << " already holds a run: "
                                    << describe_contents(c)
                                    << "; refusing to overwrite it. Pass --overwrite to replace it, or choose "
                                       "another --out folder");
}

namespace {

void remove_run_file(const std::string& dir, const std::string& name) {
  std::error_code ec;
  const fs::path p = fs::path(dir) / name;
  fs::remove(p, ec);
  HG_CHECK(!ec, "halfgrad-unet3d train: cannot remove " << p.string() << " (" << ec.message() << "); remove it by hand");
}

}  // namespace

std::vector<std::string> remove_stale_temps(const std::string& dir) {
  std::vector<std::string> notes;
  for (const std::string& tmp : inspect_run_folder(dir).stale_temps) {
    const uint64_t n = file_size_or_zero(fs::path(dir) / tmp);
    remove_run_file(dir, tmp);
    notes.push_back("removed " + (fs::path(dir) / tmp).string() + " (" + human_bytes(n) +
                    "), left by an interrupted write");
  }
  return notes;
}

std::vector<std::string> prepare_run_folder(const std::string& dir, bool overwrite) {
  check_run_folder(dir, overwrite);
  const RunFolderContents c = inspect_run_folder(dir);
  std::vector<std::string> notes = remove_stale_temps(dir);
  if (!c.run_files.empty()) {
    for (const std::string& f : c.run_files) remove_run_file(dir, f);
    notes.push_back("--overwrite: removed the earlier run in " + dir + ": " + describe_contents(c));
  }
  return notes;
}

RunFolderLock::RunFolderLock(const std::string& dir) {
  const std::string path = (fs::path(dir) / kFileName).string();
  // O_NONBLOCK: a FIFO planted under the lock's name must not hang the open (core/file_io.h).
  // O_NOFOLLOW: a symbolic link planted under the lock's name is refused, never truncated through.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    struct stat lst;
    const bool exists = ::lstat(path.c_str(), &lst) == 0;
    HG_CHECK(!exists, "halfgrad-unet3d train: " << path << " is " << halfgrad::file_type_name(lst.st_mode)
                                                << ", not the run folder's lock file; remove it");
    HG_FAIL("halfgrad-unet3d train: cannot write into the run folder " << dir << " (creating " << path << ": "
                                                                       << std::strerror(err)
                                                                       << "); expected a writable folder");
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    HG_FAIL("halfgrad-unet3d train: " << path << " is " << halfgrad::file_type_name(st.st_mode)
                                      << ", not the run folder's lock file; remove it");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (err == EWOULDBLOCK)
      HG_FAIL("halfgrad-unet3d train: " << dir << " is in use by process " << (pid.empty() ? "(unknown)" : pid)
                                        << " (it holds the lock " << path
                                        << "); wait for that run to finish, or choose another --out");
    HG_FAIL("halfgrad-unet3d train: cannot lock the run folder " << dir << " (flock " << path << ": " << std::strerror(err) << ")");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    HG_FAIL("halfgrad-unet3d train: cannot write into the run folder " << dir << " (" << path << ": " << std::strerror(err)
                                                                     << "); expected a writable folder");
  }
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

void write_file_atomic(const std::string& path, const std::string& text) {
  // As core/safetensors.cpp's writer: temp file, fsync, rename, fsync of the folder, so that after a kill
  // or a power cut the file holds either its old text or the new one.
  const std::string tmp = path + ".tmp";
  // A fresh file (core/file_io.h): a link planted under the temp file's name is removed, not followed.
  halfgrad::UniqueFd fd = halfgrad::create_fresh_file(tmp, "halfgrad-unet3d: cannot write " + path);
  std::FILE* f = ::fdopen(fd.fd, "wb");
  HG_CHECK(f != nullptr, "halfgrad-unet3d: cannot write " << tmp << " (" << std::strerror(errno)
                                                          << "); expected a writable run folder");
  fd.release();
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                       ::fsync(::fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    HG_FAIL("halfgrad-unet3d: writing " << tmp << " failed (" << std::strerror(written ? errno : err) << ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    HG_FAIL("halfgrad-unet3d: renaming " << tmp << " to " << path << " failed (" << std::strerror(rename_err) << ")");
  }
  const std::string folder = fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : ".";
  const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {  // the rename is durable once the folder's entry is on disk
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace unet3d_app
