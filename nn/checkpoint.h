// checkpoint.h - save and load a module's parameters and buffers, plus optional extra state, in one
// binary file. The counterpart of torch.save(model.state_dict()) / model.load_state_dict(..,
// strict=True), in a format a reader can parse by hand.
//
// File layout (version 1; integers little-endian, tensor bytes in the host's order, which must be
// little-endian - checked at compile time):
//   magic      8 bytes   0x89 'H' 'G' 'C' 'K' 'P' 'T' '\n'  (the high byte and the newline catch files
//                        mangled by 7-bit or text-mode transfers, as PNG's signature does)
//   version    u32       1
//   count      u32       number of tensor records
//   record x count:
//     kind     u8        0 parameter, 1 buffer, 2 extra tensor
//     dtype    u8        0 float32, 1 float16, 2 float64, 3 int64
//     ndim     u8        0..8
//     reserved u8        0
//     name_len u32       1..4096, then the name's bytes (UTF-8, no terminator)
//     shape    i64 x ndim
//     nbytes   u64       = numel * dtype size, then the raw row-major element bytes
//   json_len   u64       0 when there is no extra JSON, then its text (nlohmann::json::dump());
//                        at most kMaxMetadataBytes, nested at most kMaxMetadataDepth deep
//   checksum   u64       FNV-1a-64 of every preceding byte, hashed as 8-byte little-endian words
//                        (a trailing partial word byte by byte)
//
// Writes are crash-safe: the file is written to "<path>.tmp", flushed and fsync'ed, then renamed over
// <path> (rename is atomic on POSIX), so a crash leaves either the old checkpoint or the new one.
//
// Loading is strict and all-or-nothing: every parameter and buffer of the module must be in the file
// with the same name, kind, shape and dtype, and the file must hold no parameter or buffer the module
// lacks. PyTorch's load_state_dict converts dtypes silently; here a dtype mismatch is an error, because
// loading FP16-rounded values into FP32 master weights is exactly the bug mixed precision must avoid.
// Every check runs before the first byte is copied, so on any error the module is unchanged.
// Every error is a halfgrad::Error whose message starts with the function and the file's path.
//
// Files are untrusted input (the checksum is unkeyed: anyone can write a valid one). The reader
// checks every length against the bytes that remain before allocating, numel * dtype size for
// overflow, and parses the extra JSON only within the byte and depth limits below
// (core/json_checked.h), so a crafted file gives an Error, never a crash or a huge allocation.
// Read the metadata's fields through json_checked::Field, which names the file and the field on a
// missing key or a wrong type.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "nn/module.h"

namespace halfgrad::nn {

/// The extra JSON's limits. 1 GiB holds the metadata of any halfgrad-unet3d run (the AdamW state of
/// the default 5.6M-parameter U-Net with FP32 master weights is about 90 MB of base64); 64 levels
/// are ten times what it nests. Both are checked before nlohmann parses a byte.
constexpr size_t kMaxMetadataBytes = size_t{1} << 30;
constexpr int kMaxMetadataDepth = 64;

/// Everything a checkpoint file holds.
struct CheckpointState {
  NamedTensors parameters;     // a module's named_parameters(), in its order
  NamedTensors buffers;        // a module's named_buffers()
  NamedTensors extra_tensors;  // anything else: optimizer moments ("optim.exp_avg.<param>"), ...
  nlohmann::json extra;        // null when absent: scaler state, step counter, metadata ...
};

/// Writes `state` to `path` (via path.tmp and an atomic rename). Tensors must be defined and on the
/// CPU; names non-empty, at most 4096 bytes and unique within their kind. Throws halfgrad::Error when
/// a check fails or the file cannot be written (the old file at `path`, if any, is then untouched).
void write_checkpoint(const std::string& path, const CheckpointState& state);

/// Reads and validates a whole file (magic, version, every record's bounds, the checksum; duplicate
/// names; the extra JSON's size, depth and syntax). Throws halfgrad::Error for a missing,
/// unreadable, truncated, corrupt or foreign file.
/// The returned tensors are new CPU leaves that own their data.
CheckpointState read_checkpoint(const std::string& path);

/// read_checkpoint(path).extra: the JSON saved with the checkpoint (null when none), e.g. to rebuild
/// the model from UNet3dOptions::from_json before load_checkpoint. Same errors as read_checkpoint.
nlohmann::json read_checkpoint_metadata(const std::string& path);

/// The format's checksum of n bytes (FNV-1a-64 over 8-byte little-endian words, see the layout
/// above). It detects accidents, not forgeries: the fuzzer (fuzz/checkpoint_fuzz.cpp) uses it to
/// make mutated files reach the parsing behind the checksum, as a crafted file would.
uint64_t checkpoint_checksum(const void* data, size_t n);

/// write_checkpoint of module.named_parameters(), module.named_buffers(), `extra_tensors`, `extra`.
void save_checkpoint(const std::string& path, const Module& module, const nlohmann::json& extra = nullptr,
                     const NamedTensors& extra_tensors = {});

/// Reads `path` and copies its parameters and buffers into `module` (in place: the module's Tensor
/// handles keep their identity, requires_grad and .grad; each tensor's version goes up by one, so a
/// graph recorded before the load cannot be backpropagated through afterwards). Returns the whole file's contents, so the
/// caller can take `extra` and `extra_tensors`. Throws halfgrad::Error (module unchanged) for any
/// read_checkpoint error and for a missing, unexpected, wrong-kind, wrong-shape or wrong-dtype tensor,
/// listing every mismatch by name.
CheckpointState load_checkpoint(const std::string& path, Module& module);

}  // namespace halfgrad::nn
