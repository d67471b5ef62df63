// checkpoint.h - save and load a module's parameters and buffers, plus optional extra state, as one
// safetensors file (core/safetensors.h). The counterpart of
// safetensors.torch.save_file(model.state_dict()) / model.load_state_dict(load_file(..), strict=True):
// the tensors carry the module's names (named_parameters(), named_buffers()), in its order, as
// contiguous row-major bytes, so PyTorch reads the file without halfgrad.
//
// halfgrad's own information lives in the file's "__metadata__" (string -> string):
//   "halfgrad"                the extra JSON (nlohmann::json::dump()), absent when null
//   "halfgrad_buffers"        a JSON array of the names that are buffers (the others are parameters)
//   "halfgrad_extra_tensors"  a JSON array of the names that are extra tensors, absent when none
// A file without "halfgrad_buffers" (written by PyTorch) is read with the names ending in
// .running_mean / .running_var / .num_batches_tracked as buffers (PyTorch's BatchNorm buffers), and
// load_checkpoint takes the module's word for which is which.
//
// Writes are crash-safe (path.tmp, fsync, rename, fsync of the folder; see core/safetensors.h): a
// kill -9 at any moment leaves either the old checkpoint or the new one.
//
// Loading is strict and all-or-nothing: every parameter and buffer of the module must be in the file
// with the same name, kind, shape and dtype, and the file must hold no parameter or buffer the module
// lacks. PyTorch's load_state_dict converts dtypes silently; here a dtype mismatch is an error, because
// loading FP16-rounded values into FP32 master weights is exactly the bug mixed precision must avoid.
// Every check runs before the first byte is copied, so on any error the module is unchanged.
// Every error is a halfgrad::Error whose message names the function or the format and the file's path.
//
// Files are untrusted input: the safetensors reader validates every header entry and byte range, and
// the metadata JSON is parsed only within the byte and depth limits below (core/json_checked.h), so
// a crafted file gives an Error, never a crash or a huge allocation. Read the metadata's fields
// through json_checked::Field, which names the file and the field on a missing key or a wrong type.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/module.h"

namespace halfgrad::nn {

/// The extra JSON's limits. A safetensors header holds at most 100 MB (core/safetensors.h), the extra
/// JSON inside it as a string; a halfgrad-unet3d run's is a few KiB (tensors are never in it). 64
/// levels are ten times what it nests. Both are checked before nlohmann parses a byte.
constexpr size_t kMaxMetadataBytes = 100'000'000;
constexpr int kMaxMetadataDepth = 64;
/// Longest tensor name accepted by write_checkpoint.
constexpr size_t kMaxNameLen = 4096;

/// The "__metadata__" keys (see the top of this file).
inline const char* const kMetadataKey = "halfgrad";
inline const char* const kBuffersKey = "halfgrad_buffers";
inline const char* const kExtraTensorsKey = "halfgrad_extra_tensors";

/// Everything a checkpoint file holds.
struct CheckpointState {
  NamedTensors parameters;     // a module's named_parameters(), in its order
  NamedTensors buffers;        // a module's named_buffers()
  NamedTensors extra_tensors;  // anything else: optimizer moments ("optim.state.<i>.exp_avg"), ...
  nlohmann::json extra;        // null when absent: scaler state, step counter, metadata ...
  /// Whether the file said which tensors are buffers ("halfgrad_buffers"): false for a file
  /// written by PyTorch, whose buffers were then guessed from their names.
  bool kinds_from_file = true;
  /// Whether the file carried halfgrad's checksums (core/safetensors.h), all verified: false for a
  /// file written by PyTorch or by halfgrad before checksums, whose bytes nothing vouches for.
  bool checksummed = true;
};

/// Writes `state` to `path` (safetensors, via path.tmp and an atomic rename). Tensors must be
/// defined (any device and memory format: written as host NCDHW bytes); names non-empty, at most
/// 4096 bytes and unique across all three lists. Throws halfgrad::Error when
/// a check fails or the file cannot be written (the old file at `path`, if any, is then untouched,
/// unless only the folder's final fsync failed: safetensors::write_file).
void write_checkpoint(const std::string& path, const CheckpointState& state);

/// Reads and validates a whole file (safetensors::read_file's checks: structure, every tensor's
/// checksum when the file has them, every floating tensor finite; the metadata JSON's size, depth,
/// syntax and duplicate keys). Throws halfgrad::Error for a missing, unreadable, truncated or
/// structurally invalid file, a tensor whose bytes do not match their checksum, or a NaN/inf value
/// (naming the tensor).
/// The returned tensors are new CPU leaves that own their data.
CheckpointState read_checkpoint(const std::string& path);

/// read_checkpoint(path).extra: the JSON saved with the checkpoint (null when none), e.g. to rebuild
/// the model from UNet3dOptions::from_json before load_checkpoint. Reads and validates only the
/// header (no tensor bytes). Same errors as read_checkpoint.
nlohmann::json read_checkpoint_metadata(const std::string& path);
/// The extra JSON of an already-read "__metadata__" map (null when absent).
nlohmann::json read_checkpoint_metadata(const std::string& path, const std::map<std::string, std::string>& metadata);

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

/// load_checkpoint's checks and copy for a file already read (`path` only names it in errors).
/// For a foreign file (kinds_from_file false) it first re-sorts `file`'s parameters and buffers by
/// the module's names.
void load_into(CheckpointState& file, const std::string& path, Module& module);

}  // namespace halfgrad::nn
