#include "nn/checkpoint.h"

#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/json_checked.h"
#include "core/safetensors.h"

namespace halfgrad::nn {

namespace {

enum class Kind : uint8_t { Parameter = 0, Buffer = 1, Extra = 2 };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Parameter: return "parameter";
    case Kind::Buffer: return "buffer";
    case Kind::Extra: return "extra tensor";
  }
  return "?";
}

void check_unique(const char* fn, const std::string& path, Kind kind, const NamedTensors& ts) {
  std::set<std::string> seen;
  for (const auto& [name, t] : ts)
    HG_CHECK(seen.insert(name).second, fn << ": " << path << ": " << kind_name(kind) << " '" << name
                                          << "' appears twice");
}

nlohmann::json names_of(const NamedTensors& ts) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [n, t] : ts) a.push_back(n);
  return a;
}

json_checked::ParseLimits metadata_limits() {
  json_checked::ParseLimits limits;
  limits.max_bytes = kMaxMetadataBytes;
  limits.max_depth = kMaxMetadataDepth;
  return limits;
}

// A name list saved under `key` in the metadata (halfgrad_buffers, halfgrad_extra_tensors).
std::set<std::string> name_set(const std::map<std::string, std::string>& meta, const std::string& key,
                               const std::string& path) {
  std::set<std::string> out;
  auto it = meta.find(key);
  if (it == meta.end()) return out;
  const std::string where = "read_checkpoint: " + path + ": metadata '" + key + "'";
  const nlohmann::json j = json_checked::parse(it->second.data(), it->second.size(), where, metadata_limits());
  for (const std::string& n : json_checked::Field(j, where).as_string_list()) out.insert(n);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------------

void write_checkpoint(const std::string& path, const CheckpointState& state) {
  const std::pair<Kind, const NamedTensors*> sections[] = {
      {Kind::Parameter, &state.parameters}, {Kind::Buffer, &state.buffers}, {Kind::Extra, &state.extra_tensors}};
  NamedTensors all;
  for (const auto& [kind, ts] : sections) {
    check_unique("write_checkpoint", path, kind, *ts);
    for (const auto& [name, t] : *ts) {
      HG_CHECK(!name.empty() && name.size() <= kMaxNameLen, "write_checkpoint: " << path << ": " << kind_name(kind)
                                                                                 << " name '" << name << "' must be 1 to "
                                                                                 << kMaxNameLen << " bytes");
      HG_CHECK(t.defined(), "write_checkpoint: " << path << ": " << kind_name(kind) << " '" << name << "' is undefined");
      all.emplace_back(name, t);
    }
  }
  std::map<std::string, std::string> meta;
  if (!state.extra.is_null()) meta[kMetadataKey] = state.extra.dump();
  // The reader refuses metadata beyond its limit: never write a checkpoint that cannot be read back.
  HG_CHECK(meta[kMetadataKey].size() <= kMaxMetadataBytes,
           "write_checkpoint: " << path << ": the extra JSON is " << meta[kMetadataKey].size() << " bytes; at most "
                                << kMaxMetadataBytes << " can be read back (nn/checkpoint.h kMaxMetadataBytes)");
  if (state.extra.is_null()) meta.erase(kMetadataKey);
  meta[kBuffersKey] = names_of(state.buffers).dump();
  if (!state.extra_tensors.empty()) meta[kExtraTensorsKey] = names_of(state.extra_tensors).dump();
  safetensors::write_file(path, all, meta);  // checks names across kinds are unique too
}

CheckpointState read_checkpoint(const std::string& path) {
  safetensors::Contents file = safetensors::read_file(path);
  CheckpointState state;
  const bool has_kinds = file.metadata.count(kBuffersKey) > 0;
  const std::set<std::string> buffers = name_set(file.metadata, kBuffersKey, path);
  const std::set<std::string> extras = name_set(file.metadata, kExtraTensorsKey, path);
  for (auto& [name, t] : file.tensors) {
    const bool is_buffer = has_kinds ? buffers.count(name) > 0
                                     : ends_with(name, ".running_mean") || ends_with(name, ".running_var") ||
                                           ends_with(name, ".num_batches_tracked");
    NamedTensors& dst = extras.count(name) ? state.extra_tensors : is_buffer ? state.buffers : state.parameters;
    dst.emplace_back(std::move(name), std::move(t));
  }
  state.kinds_from_file = has_kinds;
  state.checksummed = file.checksummed;
  state.extra = read_checkpoint_metadata(path, file.metadata);
  return state;
}

nlohmann::json read_checkpoint_metadata(const std::string& path, const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find(kMetadataKey);
  if (it == metadata.end()) return nullptr;
  return json_checked::parse(it->second.data(), it->second.size(), "read_checkpoint: " + path + ": the extra JSON",
                             metadata_limits());
}

nlohmann::json read_checkpoint_metadata(const std::string& path) {
  return read_checkpoint_metadata(path, safetensors::read_header(path).metadata);
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
  load_into(file, path, module);
  return file;
}

void load_into(CheckpointState& file, const std::string& path, Module& module) {
  const std::string fn = "load_checkpoint: " + path + ": ";
  if (!file.kinds_from_file) {
    // A file written elsewhere (PyTorch's save_file) does not say which tensor is a buffer: take
    // the module's word for it.
    std::set<std::string> module_buffers;
    for (const auto& [n, t] : module.named_buffers()) module_buffers.insert(n);
    NamedTensors all = std::move(file.parameters);
    all.insert(all.end(), file.buffers.begin(), file.buffers.end());
    file.parameters.clear();
    file.buffers.clear();
    for (auto& [n, t] : all) (module_buffers.count(n) ? file.buffers : file.parameters).emplace_back(n, t);
  }

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
}

}  // namespace halfgrad::nn
