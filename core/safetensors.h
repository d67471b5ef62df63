// safetensors.h - read and write the safetensors format (https://github.com/huggingface/safetensors),
// the file PyTorch's `safetensors.torch.save_file` / `load_file` use, written here from its
// specification because Debian packages no C++ implementation.
//
// File layout (all integers little-endian):
//   N        u64           size of the header in bytes
//   header   N bytes       UTF-8 JSON object: for each tensor
//                            "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//                          and optionally "__metadata__": {"<key>": "<string value>", ...};
//                          may be padded at its end with spaces (0x20) so the buffer starts 8-byte aligned
//   buffer   the rest      every tensor's bytes, row-major (C order, the logical NCDHW order of a
//                          5-D tensor), little-endian; [begin, end) is relative to the buffer's start;
//                          the tensors are contiguous, do not overlap and cover the whole buffer.
// Dtype codes of the spec: BOOL U8 I8 I16 U16 I32 U32 I64 U64 F16 BF16 F32 F64 F8_E4M3 F8_E5M2.
// halfgrad holds F32, F16, BF16, F64 and I64 (core/dtype.h); a file with any other dtype is refused by name.
//
// Writing is crash-safe: the bytes go to "<path>.tmp", which is fsync'ed, renamed over <path>
// (atomic on POSIX), and the folder is fsync'ed so the rename itself survives a power cut. A kill -9
// at any moment leaves <path> as it was (the old file or none) or as the complete new file; a stale
// <path>.tmp is harmless and is replaced by the next write.
//
// Reading is strict: files are untrusted. The header size is capped before anything is allocated,
// the JSON goes through core/json_checked.h (byte and depth limits, duplicate keys refused), and every
// entry is checked (known dtype, at most 8 non-negative extents, numel * dtype size == end - begin
// without overflow, offsets inside the file, no overlap and no gap) before a tensor byte is read.
// Every floating tensor read is checked finite (a NaN or inf weight is refused by name, not trained
// on or predicted with), unless ReadLimits::check_finite is turned off.
//
// Checksums: halfgrad's writer adds "__metadata__"["halfgrad_xxh3"], a JSON object (as a string, the
// spec's metadata values being strings) holding the XXH3-64 (core/checksum.h) of every tensor's bytes
// under its name and of the rest of the metadata under "__metadata__":
//   {"enc.0.0.weight": "9f0c...", ..., "__metadata__": "41aa..."}
// The reader checks them when the key is present (a flipped bit, a weight edited by hand, a
// truncated copy: an error naming the tensor); a file without it (written by PyTorch, or by halfgrad
// before 2026-12-04) loads as before, and Header::has_checksums says that nothing was verified.
// Every error is a halfgrad::Error that starts "safetensors: <path>: " and names the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace halfgrad {

/// (name, tensor) pairs in a deterministic order: the form of a module's named_parameters() and of a
/// safetensors file's contents (nn/module.h uses this type too).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

namespace safetensors {

/// Limits on what read_header / read_file accept, checked before allocating.
struct ReadLimits {
  /// The header's byte count (the reference implementation's MAX_HEADER_SIZE is 100,000,000).
  uint64_t max_header_bytes = 100'000'000;
  /// JSON nesting depth of the header (a valid one nests 3 deep).
  int max_depth = 16;
  /// read_file: refuse a floating tensor holding NaN or +-inf (every halfgrad load leaves it on).
  bool check_finite = true;
};

/// The "__metadata__" key of the checksums (see the top of this file).
inline const char* const kChecksumKey = "halfgrad_xxh3";

/// One header entry: where a tensor's bytes lie, relative to the buffer's start.
struct Entry {
  std::string name;
  Dtype dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;                   // in the file's byte order (sorted by begin)
  std::map<std::string, std::string> metadata;  // "__metadata__" less kChecksumKey, empty when absent
  uint64_t buffer_offset = 0;                   // 8 + N: where the buffer starts in the file
  /// Whether the file carries kChecksumKey. When it does, the metadata's checksum has been verified
  /// by parse_header, and `checksums` holds each tensor's (verified by read_file).
  bool has_checksums = false;
  std::map<std::string, uint64_t> checksums;
};

struct Contents {
  NamedTensors tensors;  // new contiguous CPU tensors, in the file's byte order
  std::map<std::string, std::string> metadata;  // less kChecksumKey
  bool checksummed = false;  // every tensor's bytes and the metadata matched the file's checksums
};

/// The spec's code for a halfgrad dtype: "F32", "F16", "F64", "I64", "BF16".
const char* dtype_code(Dtype d);

/// Writes `tensors` (defined, any device and memory format; written as contiguous row-major
/// little-endian bytes, CUDA tensors through one host staging copy each) and `metadata` to `path`,
/// in the order given, via path.tmp + fsync + rename + fsync of the folder. Names must be non-empty,
/// unique and not "__metadata__"; `metadata` must not hold kChecksumKey, which the writer adds (the
/// tensors' checksums are computed while their bytes are written, and the header, whose length
/// they do not change, is then rewritten in place before the rename). Throws halfgrad::Error naming the path (and the tensor) when a
/// check fails or a write fails; the file at `path`, if any, is then untouched, except when only the
/// final fsync of the folder fails: the new file has then replaced it but may not survive a power cut.
void write_file(const std::string& path, const NamedTensors& tensors,
                const std::map<std::string, std::string>& metadata = {});

/// Parses and validates the header of `path` (see the layout above) without reading tensor bytes;
/// verifies the metadata's checksum when the file has one. `path` is opened without blocking and
/// must be a regular file (core/file_io.h: a FIFO is refused, not waited on).
Header read_header(const std::string& path, const ReadLimits& limits = {});

/// read_header, then every tensor's bytes straight into a new CPU tensor, each checked against its
/// checksum (when the file has them) and, with limits.check_finite, for NaN and inf. Throws
/// halfgrad::Error naming the path and the tensor ("tensor 'enc.0.0.weight' (F32 [16, 1, 3, 3, 3])
/// holds NaN at flat index 17 ...").
Contents read_file(const std::string& path, const ReadLimits& limits = {});


/// Parses a header from memory: `file_size` is the size of the whole file the header came from
/// (the byte ranges are checked against it). `data` holds the file's first bytes, at least 8 + N.
/// For read_header and the fuzz harness.
Header parse_header(const char* data, size_t n, uint64_t file_size, const std::string& path,
                    const ReadLimits& limits = {});

}  // namespace safetensors
}  // namespace halfgrad
