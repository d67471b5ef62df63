// safetensors.cpp - see safetensors.h.
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/nonfinite.h"
#include "core/json_checked.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "core/safetensors.cpp writes tensor bytes in host order; safetensors is little-endian"
#endif

namespace halfgrad::safetensors {

namespace {

constexpr int kMaxDims = 8;  // Tensor's own limit
const char* const kMetadataKey = "__metadata__";

// The spec's dtypes halfgrad cannot hold, to tell "not supported" from "not a dtype".
const char* const kOtherSpecDtypes[] = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "U64", "F8_E4M3", "F8_E5M2"};

bool dtype_from_code(const std::string& code, Dtype* d) {
  for (Dtype c : kAllDtypes)
    if (code == dtype_code(c)) {
      *d = c;
      return true;
    }
  return false;
}

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t n, const std::string& where) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    HG_CHECK(w > 0, where << ": write failed (" << errno_text() << ")");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, void* data, size_t n, uint64_t offset, const std::string& where) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    HG_CHECK(r > 0, where << ": read failed at byte " << offset << " ("
                          << (r == 0 ? std::string("the file ended early; was it truncated while being read?") : errno_text()) << ")");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// pwrite of all n bytes at `offset`.
void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& where) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    HG_CHECK(w > 0, where << ": write failed (" << errno_text() << ")");
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

// The metadata's checksum: XXH3-64 of its JSON text (nlohmann's dump of the sorted map, without
// kChecksumKey), so that writer and reader hash the same bytes whatever the header's spacing.
uint64_t metadata_checksum(const std::map<std::string, std::string>& metadata) {
  const std::string text = nlohmann::json(metadata).dump();
  return xxh3_64(text.data(), text.size());
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

}  // namespace

const char* dtype_code(Dtype d) {
  switch (d) {
    case kFloat32: return "F32";
    case kFloat16: return "F16";
    case kFloat64: return "F64";
    case kInt64: return "I64";
    case kBFloat16: return "BF16";
  }
  return "?";
}

// ---- writing ----------------------------------------------------------------------------------------

void write_file(const std::string& path, const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  const std::string fn = "safetensors: " + path;
  HG_CHECK(!metadata.count(kChecksumKey), fn << ": metadata key \"" << kChecksumKey << "\" is the writer's own (the checksums)");
  // Validate and lay out everything before creating the temporary file. The checksums start as
  // placeholders of their final length (16 hex digits), so the header's length is known now.
  nlohmann::json header = nlohmann::json::object();
  nlohmann::json sums = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HG_CHECK(!name.empty() && name != kMetadataKey, fn << ": tensor name '" << name << "' is empty or reserved");
    HG_CHECK(t.defined(), fn << ": tensor '" << name << "' is undefined");
    HG_CHECK(!header.contains(name), fn << ": tensor '" << name << "' appears twice");
    header[name] = {{"dtype", dtype_code(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    sums[name] = hex64(0);
    offset += t.nbytes();
  }
  sums[kMetadataKey] = hex64(metadata_checksum(metadata));
  const auto header_text = [&] {
    std::map<std::string, std::string> meta = metadata;
    meta[kChecksumKey] = sums.dump();
    header[kMetadataKey] = meta;
    std::string text = header.dump();
    text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the buffer starts 8-byte aligned (spec: pad with spaces)
    return text;
  };
  const std::string placeholder = header_text();
  const uint64_t n = placeholder.size();

  const std::string tmp = path + ".tmp";
  try {
    // A fresh file: a link or FIFO planted under the temp file's name is removed, never written through.
    UniqueFd f = create_fresh_file(tmp, fn);
    write_all(f.fd, &n, 8, fn);
    write_all(f.fd, placeholder.data(), placeholder.size(), fn);
    for (const auto& [name, t] : tensors) {
      // CPU NCDHW tensors are written from their own memory; others through one host copy.
      const bool direct = t.device() == Device::CPU && t.memory_format() == MemoryFormat::Contiguous;
      const Tensor host = direct ? t : t.copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous);
      if (host.nbytes() > 0) write_all(f.fd, host.raw_data(), host.nbytes(), fn + ": tensor '" + name + "'");
      sums[name] = hex64(xxh3_64(host.nbytes() > 0 ? host.raw_data() : nullptr, host.nbytes()));
    }
    // The header again, now with the tensors' checksums, over the placeholder (same length).
    const std::string text = header_text();
    HG_CHECK(text.size() == n, fn << ": the header changed length when its checksums were filled in ("
                                  << n << " -> " << text.size() << " bytes)");
    pwrite_all(f.fd, text.data(), text.size(), 8, fn);
    // fsync before the rename, so the rename never publishes a file whose blocks are still only
    // in the page cache (ext4's delayed allocation could otherwise leave a zero-length file).
    HG_CHECK(::fsync(f.fd) == 0, fn << ": fsync of " << tmp << " failed (" << errno_text() << ")");
    const int fd = f.release();
    HG_CHECK(::close(fd) == 0, fn << ": closing " << tmp << " failed (" << errno_text() << ")");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    std::remove(tmp.c_str());
    HG_FAIL(fn << ": renaming " << tmp << " over it failed (" << err << ")");
  }
  // The rename is durable once the folder's entry is on disk.
  UniqueFd dir(::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  HG_CHECK(dir.fd >= 0 && ::fsync(dir.fd) == 0, fn << ": fsync of the folder " << parent_dir(path) << " failed ("
                                                  << errno_text() << ")");
}

// ---- reading ----------------------------------------------------------------------------------------

namespace {

// Takes kChecksumKey out of h.metadata into h.checksums: a JSON object of 16-hex-digit strings, one
// per tensor and one for the metadata ("__metadata__"), no more and no fewer; checks the metadata's.
void parse_checksums(Header& h, const std::string& fn, const ReadLimits& limits) {
  const auto it = h.metadata.find(kChecksumKey);
  if (it == h.metadata.end()) return;
  const std::string where = fn + ": metadata \"" + kChecksumKey + "\"";
  json_checked::ParseLimits pl;
  pl.max_bytes = it->second.size();
  pl.max_depth = 2;
  const nlohmann::json doc = json_checked::parse(it->second.data(), it->second.size(), where, pl);
  const json_checked::Field root(doc, where);
  root.require_object("an object {\"<tensor name>\": \"<16 hex digits>\", \"__metadata__\": ...}");
  for (const auto& [name, v] : doc.items()) {
    uint64_t sum;
    if (!parse_hex64(root[name].as_string(), &sum)) root[name].fail("is not 16 hex digits (an XXH3-64 checksum)");
    h.checksums[name] = sum;
  }
  h.metadata.erase(it);
  for (const Entry& e : h.entries)
    HG_CHECK(h.checksums.count(e.name), where << " has no checksum for tensor '" << e.name
                                              << "'; expected one per tensor (a file halfgrad wrote has them all)");
  HG_CHECK(h.checksums.count(kMetadataKey), where << " has no \"" << kMetadataKey << "\" checksum; expected one");
  HG_CHECK(h.checksums.size() == h.entries.size() + 1,
           where << " holds " << h.checksums.size() - 1 << " tensor checksums for " << h.entries.size()
                 << " tensors; expected one per tensor (a checksum names a tensor the file lacks)");
  const uint64_t got = metadata_checksum(h.metadata), want = h.checksums[kMetadataKey];
  HG_CHECK(got == want, fn << ": the metadata hashes to xxh3 " << hex64(got) << " but its checksum says " << hex64(want)
                           << "; the file is corrupt or its metadata was changed after it was written");
  h.has_checksums = true;
}

}  // namespace

Header parse_header(const char* data, size_t n, uint64_t file_size, const std::string& path, const ReadLimits& limits) {
  const std::string fn = "safetensors: " + path;
  HG_CHECK(n >= 8 && file_size >= 8, fn << ": the file has " << file_size
                                        << " bytes; a safetensors file starts with an 8-byte header size");
  uint64_t header_bytes;
  std::memcpy(&header_bytes, data, 8);
  HG_CHECK(header_bytes <= limits.max_header_bytes,
           fn << ": the header size field says " << header_bytes << " bytes; at most " << limits.max_header_bytes
              << " are accepted (not a safetensors file, or a corrupt one)");
  HG_CHECK(header_bytes <= file_size - 8, fn << ": the header size field says " << header_bytes << " bytes but the file has only "
                                             << file_size - 8 << " after it (truncated or not a safetensors file)");
  HG_CHECK(header_bytes <= n - 8, fn << ": parse_header got " << n << " bytes; the header needs " << 8 + header_bytes);
  Header h;
  h.buffer_offset = 8 + header_bytes;
  const uint64_t buffer_size = file_size - h.buffer_offset;

  json_checked::ParseLimits pl;
  pl.max_bytes = static_cast<size_t>(header_bytes);
  pl.max_depth = limits.max_depth;
  pl.reject_duplicate_keys = true;
  const nlohmann::json doc = json_checked::parse(data + 8, static_cast<size_t>(header_bytes), fn + ": the header", pl);
  const json_checked::Field root(doc, fn + ": the header");
  root.require_object("an object {\"<tensor name>\": {\"dtype\", \"shape\", \"data_offsets\"}, \"__metadata__\": {...}}");

  for (const auto& [name, value] : doc.items()) {
    const json_checked::Field entry = root[name];
    if (name == kMetadataKey) {
      entry.require_object("an object of strings");
      for (const auto& [k, v] : value.items()) entry[k].as_string();  // throws naming the key unless a string
      for (const auto& [k, v] : value.items()) h.metadata[k] = v.get<std::string>();
      continue;
    }
    const std::string what = fn + ": tensor '" + name + "'";
    HG_CHECK(!name.empty(), fn << ": a tensor has an empty name");
    entry.require_object("an object {\"dtype\", \"shape\", \"data_offsets\"}");
    for (const auto& [k, v] : value.items())
      HG_CHECK(k == "dtype" || k == "shape" || k == "data_offsets",
               what << ": unexpected key " << json_checked::preview(nlohmann::json(k))
                    << "; expected only \"dtype\", \"shape\", \"data_offsets\"");
    Entry e;
    e.name = name;
    const std::string code = entry["dtype"].as_string();
    if (!dtype_from_code(code, &e.dtype)) {
      const bool in_spec = std::find_if(std::begin(kOtherSpecDtypes), std::end(kOtherSpecDtypes),
                                        [&](const char* c) { return code == c; }) != std::end(kOtherSpecDtypes);
      HG_FAIL(what << ": dtype " << json_checked::preview(nlohmann::json(code))
                   << (in_spec ? " is not one halfgrad holds" : " is not a safetensors dtype")
                   << "; expected F32, F16, BF16, F64 or I64");
    }
    const json_checked::Field shape = entry["shape"];
    shape.require_array("an array of extents");
    HG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims),
             what << ": " << shape.size() << " dimensions; at most " << kMaxDims << " are supported");
    // The product of the non-zero extents must stay below 2^63 / 8 (bytes of the widest dtype), even
    // when an extent is 0, since code elsewhere multiplies extents in any order.
    int64_t numel_nonzero = 1;
    bool has_zero = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const int64_t x = shape[i].as_int(0, std::numeric_limits<int64_t>::max());
      e.shape.push_back(x);
      if (x == 0) has_zero = true;
      else {
        HG_CHECK(numel_nonzero <= std::numeric_limits<int64_t>::max() / 8 / x,
                 what << ": shape " << shape_str(e.shape) << "... is too large");
        numel_nonzero *= x;
      }
    }
    const uint64_t nbytes = static_cast<uint64_t>(has_zero ? 0 : numel_nonzero) * dtype_size(e.dtype);
    const json_checked::Field offsets = entry["data_offsets"];
    offsets.require_array("[begin, end]");
    HG_CHECK(offsets.size() == 2, what << ": data_offsets has " << offsets.size() << " elements; expected [begin, end]");
    e.begin = static_cast<uint64_t>(offsets[size_t{0}].as_int(0, std::numeric_limits<int64_t>::max()));
    e.end = static_cast<uint64_t>(offsets[size_t{1}].as_int(0, std::numeric_limits<int64_t>::max()));
    HG_CHECK(e.begin <= e.end, what << ": data_offsets [" << e.begin << ", " << e.end << "] end before they begin");
    HG_CHECK(e.end <= buffer_size, what << ": data_offsets [" << e.begin << ", " << e.end << "] reach past the end of the "
                                        << buffer_size << "-byte buffer (truncated file?)");
    HG_CHECK(e.end - e.begin == nbytes, what << ": data_offsets [" << e.begin << ", " << e.end << "] hold " << e.end - e.begin
                                             << " bytes; " << dtype_code(e.dtype) << " " << shape_str(e.shape) << " needs "
                                             << nbytes);
    h.entries.push_back(std::move(e));
  }
  // The tensors must tile the buffer: sorted by offset, each begins where the previous one ends.
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    HG_CHECK(e.begin >= expected, fn << ": tensor '" << e.name << "' (bytes [" << e.begin << ", " << e.end
                                     << ")) overlaps tensor '" << prev->name << "' (bytes [" << prev->begin << ", "
                                     << prev->end << "))");
    HG_CHECK(e.begin == expected, fn << ": bytes [" << expected << ", " << e.begin << ") before tensor '" << e.name
                                     << "' belong to no tensor (a gap in the buffer)");
    expected = e.end;
    prev = &e;
  }
  HG_CHECK(expected == buffer_size, fn << ": the buffer has " << buffer_size << " bytes but its tensors end at byte "
                                       << expected << " (trailing bytes belong to no tensor)");
  parse_checksums(h, fn, limits);
  return h;
}

namespace {

// Opens `path` (a regular file, without blocking on a FIFO) and reads its header; returns the
// descriptor for the tensor bytes.
Header open_and_parse(const std::string& path, const ReadLimits& limits, UniqueFd& f) {
  const std::string fn = "safetensors: " + path;
  f = open_regular_file(path, fn, "a .safetensors file");
  struct stat st;
  HG_CHECK(::fstat(f.fd, &st) == 0, fn << ": cannot stat (" << errno_text() << ")");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  HG_CHECK(file_size >= 8, fn << ": the file has " << file_size << " bytes; a safetensors file starts with an 8-byte header size");
  uint64_t header_bytes;
  read_all(f.fd, &header_bytes, 8, 0, fn);
  std::vector<char> head(8);
  std::memcpy(head.data(), &header_bytes, 8);
  // Checked again by parse_header; here so that no allocation follows a crafted size.
  if (header_bytes <= limits.max_header_bytes && header_bytes <= file_size - 8) {
    head.resize(8 + header_bytes);
    read_all(f.fd, head.data() + 8, header_bytes, 8, fn);
  }
  return parse_header(head.data(), head.size(), file_size, path, limits);
}

}  // namespace

Header read_header(const std::string& path, const ReadLimits& limits) {
  UniqueFd f;
  return open_and_parse(path, limits, f);
}

Contents read_file(const std::string& path, const ReadLimits& limits) {
  UniqueFd f;
  Header h = open_and_parse(path, limits, f);
  const std::string fn = "safetensors: " + path;
  Contents c;
  c.metadata = std::move(h.metadata);
  c.checksummed = h.has_checksums;
  for (const Entry& e : h.entries) {
    const std::string what = fn + ": tensor '" + e.name + "'";
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) read_all(f.fd, t.raw_data(), e.end - e.begin, h.buffer_offset + e.begin, what);
    if (h.has_checksums) {
      const uint64_t got = xxh3_64(e.end > e.begin ? t.raw_data() : nullptr, e.end - e.begin);
      const uint64_t want = h.checksums.at(e.name);
      HG_CHECK(got == want, what << " (" << dtype_code(e.dtype) << " " << shape_str(e.shape) << "): its bytes hash to xxh3 "
                                 << hex64(got) << " but the file's checksum says " << hex64(want)
                                 << "; the file is corrupt or was changed after it was written");
    }
    if (limits.check_finite) {
      if (any_nonfinite(t)) {
        const NonFiniteSummary bad = nonfinite_summary(t);
        HG_FAIL(what << " (" << dtype_code(e.dtype) << " " << shape_str(e.shape) << ") holds " << bad.value
                     << " at flat index " << bad.first << " (" << bad.count << " non-finite of " << t.numel()
                     << "); expected finite values: every loaded floating tensor is checked, and a NaN or inf weight "
                        "would make every output NaN");
      }
    }
    c.tensors.emplace_back(e.name, std::move(t));
  }
  return c;
}

}  // namespace halfgrad::safetensors
