#include "nn/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/json_checked.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "nn/checkpoint.cpp writes tensor bytes in host order and assumes a little-endian host"
#endif

namespace halfgrad::nn {

namespace {

constexpr unsigned char kMagic[8] = {0x89, 'H', 'G', 'C', 'K', 'P', 'T', '\n'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxNameLen = 4096;
constexpr uint8_t kMaxDims = 8;  // Tensor's own limit

enum class Kind : uint8_t { Parameter = 0, Buffer = 1, Extra = 2 };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Parameter: return "parameter";
    case Kind::Buffer: return "buffer";
    case Kind::Extra: return "extra tensor";
  }
  return "?";
}

// The file's dtype codes are fixed here, independent of the Dtype enum's order.
uint8_t dtype_code(Dtype d) {
  switch (d) {
    case kFloat32: return 0;
    case kFloat16: return 1;
    case kFloat64: return 2;
    case kInt64: return 3;
  }
  return 255;
}
bool dtype_from_code(uint8_t c, Dtype* d) {
  static const Dtype kByCode[] = {kFloat32, kFloat16, kFloat64, kInt64};
  if (c >= 4) return false;
  *d = kByCode[c];
  return true;
}

// FNV-1a 64 over 8-byte little-endian words (8x fewer multiply steps than byte-wise FNV-1a, so a
// 22 MB checkpoint hashes in a few ms); bytes that do not fill a word are folded in one at a time by
// digest(). Streaming: update() may be called with any split of the data and gives the same result.
class Fnv64 {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0 && pending_ > 0) { add_pending(*p++); --n; }
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    while (n > 0) { add_pending(*p++); --n; }
  }
  uint64_t digest() const {
    uint64_t h = h_;
    for (size_t i = 0; i < pending_; ++i) h = (h ^ buf_[i]) * kPrime;
    return h;
  }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  void mix(uint64_t w) { h_ = (h_ ^ w) * kPrime; }
  void add_pending(unsigned char b) {
    buf_[pending_ & 7] = b;  // the mask only tells the compiler what the reset below guarantees
    if (++pending_ == 8) {
      uint64_t w;
      std::memcpy(&w, buf_, 8);
      mix(w);
      pending_ = 0;
    }
  }
  uint64_t h_ = 0xcbf29ce484222325ULL;  // FNV offset basis
  unsigned char buf_[8] = {};
  size_t pending_ = 0;
};

// ---- writing ----------------------------------------------------------------------------------------

class FileWriter {
 public:
  FileWriter(const std::string& path, const std::string& final_path) : path_(path), final_(final_path) {
    f_ = std::fopen(path.c_str(), "wb");
    HG_CHECK(f_ != nullptr, "write_checkpoint: " << final_ << ": cannot create " << path_ << " ("
                                                 << std::strerror(errno) << ")");
  }
  ~FileWriter() {
    if (f_) std::fclose(f_);
  }
  void bytes(const void* p, size_t n) {
    hash_.update(p, n);
    HG_CHECK(n == 0 || std::fwrite(p, 1, n, f_) == n,
             "write_checkpoint: " << final_ << ": write to " << path_ << " failed (" << std::strerror(errno) << ")");
  }
  template <typename T>
  void pod(T v) { bytes(&v, sizeof(T)); }
  uint64_t digest() const { return hash_.digest(); }
  // fflush moves the data to the kernel; fsync to the disk, so the rename below never publishes a
  // file whose blocks are still only in the page cache.
  void finish() {
    HG_CHECK(std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0,
             "write_checkpoint: " << final_ << ": flushing " << path_ << " failed (" << std::strerror(errno) << ")");
    const int rc = std::fclose(f_);
    f_ = nullptr;
    HG_CHECK(rc == 0, "write_checkpoint: " << final_ << ": closing " << path_ << " failed (" << std::strerror(errno)
                                           << ")");
  }

 private:
  std::string path_, final_;
  std::FILE* f_ = nullptr;
  Fnv64 hash_;
};

void check_unique(const char* fn, const std::string& path, Kind kind, const NamedTensors& ts) {
  std::set<std::string> seen;
  for (const auto& [name, t] : ts)
    HG_CHECK(seen.insert(name).second, fn << ": " << path << ": " << kind_name(kind) << " '" << name
                                          << "' appears twice");
}

// Best effort: make the rename itself durable by syncing the directory that holds the file.
void sync_parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// ---- reading ----------------------------------------------------------------------------------------

// Bounds-checked cursor over the file's bytes; every read names what it was reading when it runs out.
class Reader {
 public:
  Reader(const std::string& path, const std::vector<unsigned char>& data) : path_(path), data_(data) {}
  const unsigned char* take(size_t n, const std::string& what) {
    HG_CHECK(n <= data_.size() - pos_, "read_checkpoint: " << path_ << ": file is truncated: it ends at byte "
                                                           << data_.size() << " while reading " << what << " ("
                                                           << n << " bytes at offset " << pos_ << ")");
    const unsigned char* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T pod(const std::string& what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  const std::string& path_;
  const std::vector<unsigned char>& data_;
  size_t pos_ = 0;
};

std::vector<unsigned char> read_file(const std::string& path) {
  struct stat st;
  HG_CHECK(::stat(path.c_str(), &st) == 0, "read_checkpoint: " << path << ": cannot open (" << std::strerror(errno) << ")");
  HG_CHECK(S_ISREG(st.st_mode), "read_checkpoint: " << path << ": not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  HG_CHECK(in.is_open(), "read_checkpoint: " << path << ": cannot open (" << std::strerror(errno) << ")");
  const std::streamoff size = in.tellg();
  HG_CHECK(size >= 0, "read_checkpoint: " << path << ": cannot read its size");
  std::vector<unsigned char> data(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(data.data()), size);
  HG_CHECK(in.good() || size == 0, "read_checkpoint: " << path << ": read failed after " << in.gcount() << " of "
                                                       << size << " bytes");
  return data;
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------------

void write_checkpoint(const std::string& path, const CheckpointState& state) {
  const std::pair<Kind, const NamedTensors*> sections[] = {
      {Kind::Parameter, &state.parameters}, {Kind::Buffer, &state.buffers}, {Kind::Extra, &state.extra_tensors}};
  // Validate everything before creating the temporary file.
  size_t count = 0;
  for (const auto& [kind, ts] : sections) {
    check_unique("write_checkpoint", path, kind, *ts);
    for (const auto& [name, t] : *ts) {
      HG_CHECK(!name.empty() && name.size() <= kMaxNameLen, "write_checkpoint: " << path << ": " << kind_name(kind)
                                                                                 << " name '" << name << "' must be 1 to "
                                                                                 << kMaxNameLen << " bytes");
      HG_CHECK(t.defined(), "write_checkpoint: " << path << ": " << kind_name(kind) << " '" << name << "' is undefined");
    }
    count += ts->size();
  }
  HG_CHECK(count <= std::numeric_limits<uint32_t>::max(), "write_checkpoint: " << path << ": too many tensors");
  const std::string json_text = state.extra.is_null() ? std::string() : state.extra.dump();
  // The reader refuses metadata beyond its limit: never write a checkpoint that cannot be read back.
  HG_CHECK(json_text.size() <= kMaxMetadataBytes,
           "write_checkpoint: " << path << ": the extra JSON is " << json_text.size() << " bytes; at most "
                                << kMaxMetadataBytes << " can be read back (nn/checkpoint.h kMaxMetadataBytes)");

  const std::string tmp = path + ".tmp";
  try {
    FileWriter w(tmp, path);
    w.bytes(kMagic, sizeof(kMagic));
    w.pod<uint32_t>(kVersion);
    w.pod<uint32_t>(static_cast<uint32_t>(count));
    for (const auto& [kind, ts] : sections) {
      for (const auto& [name, t_any] : *ts) {
        // Device tensors are written from a host copy, in the logical (NCDHW) order.
        const Tensor t = t_any.copy_to(Device::CPU).format_copy(MemoryFormat::Contiguous);
        w.pod<uint8_t>(static_cast<uint8_t>(kind));
        w.pod<uint8_t>(dtype_code(t.dtype()));
        w.pod<uint8_t>(static_cast<uint8_t>(t.dim()));
        w.pod<uint8_t>(0);
        w.pod<uint32_t>(static_cast<uint32_t>(name.size()));
        w.bytes(name.data(), name.size());
        for (int64_t e : t.shape()) w.pod<int64_t>(e);
        w.pod<uint64_t>(t.nbytes());
        w.bytes(t.raw_data(), t.nbytes());
      }
    }
    w.pod<uint64_t>(json_text.size());
    w.bytes(json_text.data(), json_text.size());
    w.pod<uint64_t>(w.digest());
    w.finish();
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    HG_FAIL("write_checkpoint: " << path << ": renaming " << tmp << " failed (" << std::strerror(err) << ")");
  }
  sync_parent_dir(path);
}

CheckpointState read_checkpoint(const std::string& path) {
  const std::vector<unsigned char> data = read_file(path);
  Reader r(path, data);
  const std::string fn = "read_checkpoint: " + path + ": ";

  HG_CHECK(data.size() >= sizeof(kMagic) && std::memcmp(data.data(), kMagic, sizeof(kMagic)) == 0,
           fn << "not a halfgrad checkpoint (the first 8 bytes are not the magic \\x89HGCKPT\\n; file size "
              << data.size() << " bytes)");
  r.take(sizeof(kMagic), "the magic");
  const uint32_t version = r.pod<uint32_t>("the version");
  HG_CHECK(version == kVersion, fn << "format version " << version << " is not supported (this build reads version "
                                   << kVersion << ")");
  const uint32_t count = r.pod<uint32_t>("the tensor count");

  CheckpointState state;
  std::set<std::pair<uint8_t, std::string>> seen;
  for (uint32_t i = 0; i < count; ++i) {
    const std::string rec = "tensor record " + std::to_string(i) + " of " + std::to_string(count);
    const uint8_t kind_code = r.pod<uint8_t>(rec + " (kind)");
    const uint8_t dcode = r.pod<uint8_t>(rec + " (dtype)");
    const uint8_t ndim = r.pod<uint8_t>(rec + " (ndim)");
    r.pod<uint8_t>(rec + " (reserved byte)");
    const uint32_t name_len = r.pod<uint32_t>(rec + " (name length)");
    HG_CHECK(kind_code <= 2, fn << rec << ": kind code " << int(kind_code) << " is not 0, 1 or 2 (corrupt file)");
    HG_CHECK(name_len >= 1 && name_len <= kMaxNameLen, fn << rec << ": name length " << name_len
                                                          << " is outside 1.." << kMaxNameLen << " (corrupt file)");
    const auto* np = r.take(name_len, rec + " (name)");
    const std::string name(reinterpret_cast<const char*>(np), name_len);
    const std::string what = std::string(kind_name(static_cast<Kind>(kind_code))) + " '" + name + "'";
    Dtype dtype;
    HG_CHECK(dtype_from_code(dcode, &dtype), fn << what << ": dtype code " << int(dcode) << " is unknown (corrupt file)");
    HG_CHECK(ndim <= kMaxDims, fn << what << ": " << int(ndim) << " dimensions (at most " << int(kMaxDims) << ")");
    Shape shape(ndim);
    // The product of the non-zero extents must stay below 2^63 / 8 (bytes of the largest dtype),
    // even when an extent is 0: shape_numel and the kernels multiply the extents in any order.
    // Checked before each multiplication, which would otherwise overflow (found by checkpoint_fuzz).
    int64_t numel_nonzero = 1;
    bool overflow = false, has_zero = false;
    for (auto& e : shape) {
      e = r.pod<int64_t>(what + " (shape)");
      HG_CHECK(e >= 0, fn << what << ": negative extent " << e << " (corrupt file)");
      if (e == 0) has_zero = true;
      else if (overflow || numel_nonzero > std::numeric_limits<int64_t>::max() / 8 / e) overflow = true;
      else numel_nonzero *= e;
    }
    HG_CHECK(!overflow, fn << what << ": shape " << shape_str(shape) << " is too large (corrupt file)");
    const int64_t numel = has_zero ? 0 : numel_nonzero;
    const uint64_t nbytes = r.pod<uint64_t>(what + " (byte count)");
    HG_CHECK(nbytes == static_cast<uint64_t>(numel) * dtype_size(dtype),
             fn << what << ": " << nbytes << " data bytes for shape " << shape_str(shape) << " of " << dtype_name(dtype)
                << " (expected " << numel * dtype_size(dtype) << "; corrupt file)");
    const auto* bytes = r.take(nbytes, what + " (data)");  // checks bounds before the allocation below
    HG_CHECK(seen.insert({kind_code, name}).second, fn << what << " appears twice");
    Tensor t = Tensor::empty(shape, dtype);
    if (nbytes) std::memcpy(t.raw_data(), bytes, nbytes);
    NamedTensors& dst = kind_code == 0 ? state.parameters : kind_code == 1 ? state.buffers : state.extra_tensors;
    dst.emplace_back(name, t);
  }
  const uint64_t json_len = r.pod<uint64_t>("the extra JSON length");
  HG_CHECK(json_len <= kMaxMetadataBytes, fn << "the extra JSON is " << json_len << " bytes; the limit is "
                                             << kMaxMetadataBytes << " (corrupt file?)");
  HG_CHECK(json_len <= r.remaining(), fn << "file is truncated: the extra JSON needs " << json_len << " bytes but "
                                        << r.remaining() << " remain");
  const auto* jp = r.take(json_len, "the extra JSON");
  const size_t hashed = r.pos();
  const uint64_t stored = r.pod<uint64_t>("the checksum");
  HG_CHECK(r.remaining() == 0, fn << r.remaining() << " unexpected bytes after the checksum (corrupt file?)");
  Fnv64 h;
  h.update(data.data(), hashed);
  HG_CHECK(h.digest() == stored, fn << "checksum mismatch: the file is corrupt (its structure parses, but its "
                                       "bytes differ from what was written)");
  if (json_len > 0) {
    json_checked::ParseLimits limits;
    limits.max_bytes = kMaxMetadataBytes;
    limits.max_depth = kMaxMetadataDepth;
    state.extra = json_checked::parse(reinterpret_cast<const char*>(jp), json_len,
                                      "read_checkpoint: " + path + ": the extra JSON", limits);
  }
  return state;
}

nlohmann::json read_checkpoint_metadata(const std::string& path) { return read_checkpoint(path).extra; }

uint64_t checkpoint_checksum(const void* data, size_t n) {
  Fnv64 h;
  h.update(data, n);
  return h.digest();
}

void save_checkpoint(const std::string& path, const Module& module, const nlohmann::json& extra,
                     const NamedTensors& extra_tensors) {
  CheckpointState s;
  s.parameters = module.named_parameters();
  s.buffers = module.named_buffers();
  s.extra_tensors = extra_tensors;
  s.extra = extra;
  write_checkpoint(path, s);
}

CheckpointState load_checkpoint(const std::string& path, Module& module) {
  CheckpointState file = read_checkpoint(path);
  const std::string fn = "load_checkpoint: " + path + ": ";

  // Pair every module tensor with its file tensor, collecting every problem before touching anything.
  std::vector<std::string> problems;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (module tensor, file tensor)
  auto match = [&](Kind kind, const NamedTensors& mine, const NamedTensors& theirs, const NamedTensors& other_kind) {
    std::map<std::string, const Tensor*> by_name;
    for (const auto& [n, t] : theirs) by_name[n] = &t;
    std::set<std::string> other;
    for (const auto& [n, t] : other_kind) other.insert(n);
    std::set<std::string> used;
    for (const auto& [n, t] : mine) {
      auto it = by_name.find(n);
      if (it == by_name.end()) {
        problems.push_back(std::string(kind_name(kind)) + " '" + n + "' of the module is missing from the file" +
                           (other.count(n) ? " (the file has it as a " +
                                                 std::string(kind_name(kind == Kind::Parameter ? Kind::Buffer : Kind::Parameter)) + ")"
                                           : ""));
        continue;
      }
      used.insert(n);
      const Tensor& f = *it->second;
      if (f.shape() != t.shape()) {
        problems.push_back(std::string(kind_name(kind)) + " '" + n + "': shape " + shape_str(f.shape()) +
                           " in the file, " + shape_str(t.shape()) + " in the module");
      } else if (f.dtype() != t.dtype()) {
        problems.push_back(std::string(kind_name(kind)) + " '" + n + "': dtype " + dtype_name(f.dtype()) +
                           " in the file, " + dtype_name(t.dtype()) + " in the module (cast the module with to() first)");
      } else {
        copies.emplace_back(t, f);
      }
    }
    for (const auto& [n, t] : theirs)
      if (!used.count(n)) problems.push_back("the file has " + std::string(kind_name(kind)) + " '" + n +
                                             "', which the module (" + module.name() + ") does not");
  };
  const NamedTensors my_params = module.named_parameters();
  const NamedTensors my_buffers = module.named_buffers();
  match(Kind::Parameter, my_params, file.parameters, file.buffers);
  match(Kind::Buffer, my_buffers, file.buffers, file.parameters);

  if (!problems.empty()) {
    std::ostringstream os;
    os << fn << problems.size() << " mismatch" << (problems.size() > 1 ? "es" : "") << " with the module; nothing was loaded:";
    constexpr size_t kShown = 10;
    for (size_t i = 0; i < problems.size() && i < kShown; ++i) os << "\n  " << problems[i];
    if (problems.size() > kShown) os << "\n  ... and " << problems.size() - kShown << " more";
    throw Error(os.str());
  }
  for (auto& [dst, src] : copies) dst.copy_from(src);  // host -> host or device, same dtype (checked above)
  return file;
}

}  // namespace halfgrad::nn
