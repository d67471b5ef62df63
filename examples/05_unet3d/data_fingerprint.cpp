// data_fingerprint.cpp - see data_fingerprint.h.
#include "examples/05_unet3d/data_fingerprint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"
#include "core/file_io.h"
#include "unet3d/run_folder.h"

namespace unet3d_app {

using namespace halfgrad;
namespace fs = std::filesystem;

nlohmann::json DataFingerprint::to_json() const {
  nlohmann::json files_json = nlohmann::json::array();
  for (const FilePrint& f : files)
    files_json.push_back({{"path", f.path}, {"bytes", std::to_string(f.bytes)}, {"xxh3", hex64(f.xxh3)}});
  return {{"root", root}, {"files", files_json}};
}

DataFingerprint DataFingerprint::from_json(const json_checked::Field& f) {
  f.require_object("{\"root\", \"files\"}");
  DataFingerprint d;
  d.root = f["root"].as_string();
  const json_checked::Field files = f["files"];
  files.require_array("an array of {\"path\", \"bytes\", \"xxh3\"}");
  for (size_t i = 0; i < files.size(); ++i) {
    const json_checked::Field e = files[i];
    FilePrint p;
    p.path = e["path"].as_string();
    const std::string bytes = e["bytes"].as_string();  // a string: JSON readers differ past 2^53
    if (bytes.empty() || bytes.size() > 19 || !std::all_of(bytes.begin(), bytes.end(), [](char c) { return c >= '0' && c <= '9'; }))
      e["bytes"].fail("is not a decimal byte count");
    p.bytes = std::stoull(bytes);
    if (!parse_hex64(e["xxh3"].as_string(), &p.xxh3)) e["xxh3"].fail("is not 16 hex digits (an XXH3-64 checksum)");
    d.files.push_back(p);
  }
  return d;
}

DataFingerprint fingerprint_data(const std::string& root, const std::vector<std::string>& files) {
  DataFingerprint d;
  d.root = fs::absolute(root).lexically_normal().string();
  if (d.root.size() > 1 && d.root.back() == '/') d.root.pop_back();
  std::vector<char> buf(size_t{1} << 20);
  for (const std::string& rel : files) {
    const std::string path = (fs::path(d.root) / rel).string();
    const std::string where = "halfgrad-unet3d train: data fingerprint: " + path;
    UniqueFd f = open_regular_file(path, where, "a data file the run reads");
    Xxh3Hasher h;
    FilePrint p;
    p.path = fs::path(rel).lexically_normal().string();
    for (;;) {
      const ssize_t r = ::read(f.fd, buf.data(), buf.size());
      if (r < 0 && errno == EINTR) continue;
      HG_CHECK(r >= 0, where << ": read failed (" << std::strerror(errno) << ")");
      if (r == 0) break;
      h.update(buf.data(), static_cast<size_t>(r));
      p.bytes += static_cast<uint64_t>(r);
    }
    p.xxh3 = h.digest();
    d.files.push_back(p);
  }
  std::sort(d.files.begin(), d.files.end(), [](const FilePrint& a, const FilePrint& b) { return a.path < b.path; });
  return d;
}

std::vector<std::string> data_differences(const DataFingerprint& saved, const DataFingerprint& now) {
  std::vector<std::string> out;
  if (saved.root != now.root) out.push_back("the data folder was " + saved.root + ", now " + now.root);
  std::map<std::string, const FilePrint*> before, after;
  for (const FilePrint& f : saved.files) before[f.path] = &f;
  for (const FilePrint& f : now.files) after[f.path] = &f;
  std::vector<std::string> added, removed;
  for (const auto& [path, f] : after)
    if (!before.count(path)) added.push_back(path);
  for (const auto& [path, f] : before) {
    const auto it = after.find(path);
    if (it == after.end()) removed.push_back(path);
    else if (it->second->bytes != f->bytes || it->second->xxh3 != f->xxh3)
      out.push_back(path + " changed (" + human_bytes(f->bytes) + ", xxh3 " + hex64(f->xxh3) + " -> " +
                    human_bytes(it->second->bytes) + ", xxh3 " + hex64(it->second->xxh3) + ")");
  }
  const auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 5) s += ", ... (" + std::to_string(v.size() - 5) + " more)";
    return s;
  };
  if (!added.empty()) out.push_back(std::to_string(added.size()) + " file(s) added: " + list(added));
  if (!removed.empty()) out.push_back(std::to_string(removed.size()) + " file(s) gone: " + list(removed));
  return out;
}

bool data_changed(const DataFingerprint& saved, const DataFingerprint& now) {
  if (saved.files.size() != now.files.size()) return true;
  for (size_t i = 0; i < saved.files.size(); ++i) {
    const FilePrint &a = saved.files[i], &b = now.files[i];
    if (a.path != b.path || a.bytes != b.bytes || a.xxh3 != b.xxh3) return true;
  }
  return false;
}

}  // namespace unet3d_app
